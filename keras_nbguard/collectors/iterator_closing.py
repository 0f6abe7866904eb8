"""The tf.data iterators a run lets go of, deleted on a thread of their own.

Deleting a tf.data iterator can wait for TensorFlow's autotuning thread behind it, the longer
the iterator was used the longer: 0 to 5 s after 5–8 s of use, 22 s once after 60 s (the
interpreter lock released meanwhile; docs/benchmarks.md, December 7). Keras lets go of its
iterators inside ``fit`` (an epoch's when the next epoch starts, the last as ``fit`` returns), a
training loop of one's own at the end of each ``for batch in dataset``: a plain cell waits
there, a run seconds slower than the one before for nothing of the user's.

While a run's cell runs, ``OwnedIterator`` has a ``__del__`` of ours: a dying iterator is handed
to one daemon thread, which lets go of it there (PEP 442: the finalizer runs once, so the
thread's drop frees it). Nothing else changes: the iterator was unreachable already. Except
for a pipeline that writes files: an unfinished cache to a file keeps its lock until its
iterator is deleted, and the next iterator, made right after, would find it held
(``AlreadyExistsError``, checked): such an iterator, or a snapshot's or a save's, is deleted
where it dies, as before. So is any in a forked child, which has no such thread. At the
interpreter's exit we wait for the thread (``EXIT_WAIT_SECONDS`` at most), so TensorFlow is not
torn down under a deletion.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
from types import ModuleType
from typing import Any

from keras_nbguard.collectors.patching import AttributePatch, PatchOnImport

ITERATOR_MODULE = "tensorflow.python.data.ops.iterator_ops"  # never imported here
THREAD_NAME = "keras-nbguard-iterator-close"
EXIT_WAIT_SECONDS = 30.0
# tf.data's datasets that write files of their own (a cache's only when it has a file name)
WRITING = ("CacheDataset", "_SnapshotDataset", "_LegacySnapshotDataset", "_SaveDataset")


class IteratorCloser:
    """One daemon thread that drops whatever it is handed, in order."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.closed = 0  # iterators let go of here (the bench and the tests read it)
        self.longest = 0.0  # seconds, the longest deletion: what a cell would have waited
        # SimpleQueue: its put may run inside a finalizer, even one interrupting a put
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=THREAD_NAME, daemon=True).start()

    def take(self, iterator: Any) -> None:
        self._queue.put(iterator)

    def wait(self, timeout: float) -> bool:
        """Whether everything handed over so far was let go of within ``timeout`` seconds."""
        reached = threading.Event()
        self._queue.put(reached)
        return reached.wait(timeout)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            marker = isinstance(item, threading.Event)
            if marker:
                item.set()
            started = time.perf_counter()
            del item  # an iterator's deletion, and TensorFlow's wait, happen here
            if not marker:
                self.closed += 1
                self.longest = max(self.longest, time.perf_counter() - started)


_closer: IteratorCloser | None = None


def closer() -> IteratorCloser:
    """This process's closer (a forked child starts its own)."""
    global _closer
    if _closer is None or _closer.pid != os.getpid():
        _closer = IteratorCloser()
        atexit.register(_wait_at_exit, _closer)
    return _closer


class IteratorsClosedElsewhere:
    """While installed (a run), the tf.data iterators that die are deleted on the closer's
    thread; TensorFlow imported during the run is patched as it comes."""

    def __init__(self) -> None:
        self._scope = PatchOnImport(ITERATOR_MODULE)

    def install(self) -> None:
        self._scope.install(_patch)

    def uninstall(self) -> None:
        self._scope.uninstall()


def _patch(module: ModuleType) -> AttributePatch | None:
    """None where the iterator has a ``__del__`` already: ours, in a nested run; or somebody
    else's, left alone."""
    owned = getattr(module, "OwnedIterator", None)
    if not isinstance(owned, type) or hasattr(owned, "__del__"):
        return None
    closer()
    return AttributePatch(owned, "__del__", _hand_over)


def _hand_over(iterator: Any) -> None:
    current = _closer
    if current is not None and current.pid == os.getpid() and _may_wait(iterator):
        current.take(iterator)  # (else it is freed here, once this returns, as before)


def _may_wait(iterator: Any) -> bool:
    """Whether ``iterator`` may be deleted later: it was made from a dataset (not rebuilt from
    a tensor inside a traced function), and nothing in its pipeline writes files."""
    try:
        seen, pending = set(), [iterator._dataset]
        while pending:
            dataset = pending.pop()
            if id(dataset) in seen:
                continue
            seen.add(id(dataset))
            if type(dataset).__name__ in WRITING and _writes_a_file(dataset):
                return False
            pending.extend(dataset._inputs())
        return True
    except Exception:  # an iterator or a TensorFlow we don't know: deleted here, as before
        return False


def _writes_a_file(dataset: Any) -> bool:
    if type(dataset).__name__ != "CacheDataset":
        return True
    return bool(dataset._filename.numpy())  # "" caches in memory


def _wait_at_exit(owner: IteratorCloser) -> None:
    if owner.pid == os.getpid():  # (a forked child inherits the parent's exit handlers)
        owner.wait(EXIT_WAIT_SECONDS)
