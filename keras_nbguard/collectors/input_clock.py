"""Times how long the user's own Python input (a generator, a ``PyDataset``) takes to make the
batches of one fit: the time the fit waits for its input when that input is the slower side.

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


class InputClock:
    """Wraps the input ``x`` of one fit (``wrap``) until ``restore()``; ``seconds`` is None when
    the input is not the user's Python code."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.kind: str | None = None  # "generator", "PyDataset" or "ImageDataGenerator"
        self.seconds: float | None = None
        self.batches = 0
        self._patch: AttributePatch | None = None

    def wrap(self, x: Any) -> Any:
        """``x`` itself, or a timed stand-in Keras treats the same way."""
        if isinstance(x, types.GeneratorType):
            self.kind, self.seconds = "generator", 0.0
            return self._timed(x)
        adapters = sys.modules.get(PY_DATASET_MODULE)
        if adapters is not None and isinstance(x, adapters.PyDataset):
            self.kind, self.seconds = _py_dataset_kind(x), 0.0
            adapter = adapters.PyDatasetAdapter
            original = adapter._get_iterator
            timed = self._timed

            def _get_iterator(self: Any) -> Iterator[Any]:
                return timed(original(self))

            self._patch = AttributePatch(adapter, "_get_iterator", _get_iterator)
        return x

    def restore(self) -> None:
        if self._patch is not None:
            self._patch.restore()
            self._patch = None

    def _timed(self, batches: Iterator[Any]) -> Iterator[Any]:
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


def _py_dataset_kind(x: Any) -> str:
    """``ImageDataGenerator`` for the batches its ``flow`` methods make, else ``PyDataset``."""
    images = sys.modules.get(IMAGE_ITERATOR_MODULE)
    iterator = getattr(images, "Iterator", None)
    if isinstance(iterator, type) and isinstance(x, iterator):
        return "ImageDataGenerator"
    return "PyDataset"
