"""Times how long the user's own Python input (a generator, a ``PyDataset``, Keras 2's
``Sequence``) takes to make the batches of one fit: the time the fit waits for its input when
that input is the slower side.

Keras pulls such input on a tf.data thread and prefetches, so making a batch overlaps the step
before it; a fit waits for its input once making the batches takes about as long as the fit
itself. tf.data pipelines and arrays are not timed here: their batches are made in C++.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from keras_nbguard.collectors.patching import AttributePatch

PY_DATASET_MODULE = "keras.src.trainers.data_adapters.py_dataset_adapter"
# ImageDataGenerator's flow(), flow_from_directory() and flow_from_dataframe() make PyDatasets
# of their own (Keras 3 keeps the class for the code people copy): named so, the user knows it
IMAGE_ITERATOR_MODULE = "keras.src.legacy.preprocessing.image"
# Keras 2 (tf_keras): a Sequence, ImageDataGenerator's batches among them, reaches fit as the
# generator its adapter's _handle_multiprocessing makes for each epoch (its workers' queue or
# a loop over its indices)
TF_KERAS_ADAPTER_MODULE = "tf_keras.src.engine.data_adapter"
TF_KERAS_IMAGE_MODULE = "tf_keras.src.preprocessing.image"


class InputClock:
    """Wraps the input ``x`` of one fit (``wrap``) until ``restore()``; ``seconds`` is None when
    the input is not the user's Python code."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        # "generator", "PyDataset", "Sequence" (Keras 2) or "ImageDataGenerator"
        self.kind: str | None = None
        self.seconds: float | None = None
        self.batches = 0
        self._patch: AttributePatch | None = None

    def wrap(self, x: Any) -> Any:
        """``x`` itself, or a timed stand-in Keras treats the same way."""
        if isinstance(x, types.GeneratorType):
            self.kind, self.seconds = "generator", 0.0
            return self._timed(x)
        timed = self._timed
        adapters = sys.modules.get(PY_DATASET_MODULE)
        if adapters is not None and isinstance(x, adapters.PyDataset):
            self.kind, self.seconds = _kind_of(x, IMAGE_ITERATOR_MODULE, "PyDataset"), 0.0
            adapter = adapters.PyDatasetAdapter
            original = adapter._get_iterator

            def _get_iterator(self: Any) -> Iterator[Any]:
                __tracebackhide__ = True  # IPython leaves our frame out of the traceback
                return timed(original(self))

            self._patch = AttributePatch(adapter, "_get_iterator", _get_iterator)
        elif (sequences := _keras2_sequence_adapter(x)) is not None:
            self.kind, self.seconds = _kind_of(x, TF_KERAS_IMAGE_MODULE, "Sequence"), 0.0
            make_generator = sequences._handle_multiprocessing

            def _handle_multiprocessing(self: Any, *args: Any, **kwargs: Any) -> Any:
                __tracebackhide__ = True  # IPython leaves our frame out of the traceback
                each_epoch = make_generator(self, *args, **kwargs)
                return lambda: timed(each_epoch())

            self._patch = AttributePatch(
                sequences, "_handle_multiprocessing", _handle_multiprocessing
            )
        return x

    def restore(self) -> None:
        if self._patch is not None:
            self._patch.restore()
            self._patch = None

    def _timed(self, batches: Iterator[Any]) -> Iterator[Any]:
        __tracebackhide__ = True  # a generator's error shows its own frame, not ours
        clock = self.clock
        while True:
            start = clock()
            try:
                batch = next(batches)
            except StopIteration:
                return
            finally:
                self.seconds = (self.seconds or 0.0) + clock() - start
            self.batches += 1
            yield batch


def _kind_of(x: Any, images_module: str, otherwise: str) -> str:
    """``ImageDataGenerator`` for the batches its ``flow`` methods make, else ``otherwise``."""
    iterator = getattr(sys.modules.get(images_module), "Iterator", None)
    if isinstance(iterator, type) and isinstance(x, iterator):
        return "ImageDataGenerator"
    return otherwise


def _keras2_sequence_adapter(x: Any) -> Any:
    """tf_keras' adapter class for ``x`` when ``x`` is one of its Sequences, else None."""
    adapters = sys.modules.get(TF_KERAS_ADAPTER_MODULE)
    sequence = getattr(getattr(adapters, "data_utils", None), "Sequence", None)
    if not (isinstance(sequence, type) and isinstance(x, sequence)):
        return None
    adapter = getattr(adapters, "KerasSequenceAdapter", None)
    return adapter if hasattr(adapter, "_handle_multiprocessing") else None
