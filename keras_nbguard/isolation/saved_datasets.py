"""tf.data pipelines saved for isolated runs, kept on disk while the pipeline lives.

A ``tf.data.Dataset`` object never changes once made, and saving one runs it in the kernel: its
time again at every run, and TensorFlow keeps ~1 MiB of the kernel's heap each time (+1.1 MiB a
run on Keras' text classification example, whose replayed ``train_ds`` reads the setup cell's
``raw_train_ds``). So a pipeline is saved once; later runs send the same file. The file goes
when the pipeline does (a setup cell re-run binds a new one), and the folder with the extension
or the kernel.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from typing import Any


class SavedDatasets:
    def __init__(self) -> None:
        self._folder: str | None = None
        self._saved: dict[int, tuple[weakref.ref[Any], str]] = {}  # id -> (pipeline, file)
        self._made = 0

    def zip_of(self, dataset: Any, save: Callable[[Any], bytes]) -> tuple[bytes, bool]:
        """(the pipeline's zip, whether an earlier run saved it); ``save`` makes it anew."""
        known = self._saved.get(id(dataset))
        if known is not None and known[0]() is dataset:
            try:
                with open(known[1], "rb") as saved:
                    return saved.read(), True
            except OSError:  # the file went (a cleaned /tmp): saved again below
                pass
        data = save(dataset)
        with contextlib.suppress(OSError, TypeError):  # no room, or no weak reference: not kept
            self._keep(dataset, data)
        return data, False

    def _keep(self, dataset: Any, data: bytes) -> None:
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="keras-nbguard-datasets-")
            weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        self._made += 1
        path = os.path.join(self._folder, f"{self._made}.zip")
        with open(path, "wb") as out:
            out.write(data)
        key = id(dataset)

        # the pipeline is gone: so is its file. Also at the interpreter's exit, when the
        # modules' globals may already be None: what it calls comes bound.
        def forget(_: Any, remove: Callable[[str], None] = os.remove) -> None:
            if self._saved.get(key, (None, ""))[1] == path:
                del self._saved[key]
            try:  # noqa: SIM105 (contextlib may be gone by then)
                remove(path)
            except OSError:
                pass

        self._saved[key] = (weakref.ref(dataset, forget), path)

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        self._folder, self._saved = None, {}
