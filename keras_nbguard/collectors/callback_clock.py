"""Times the user's callbacks during one fit, per class and method, with the bytes each wrote.

Only the hooks a callback overrides are wrapped: Keras' no-op defaults stay untouched, so its
asynchronous dispatch stays on. Bytes written are read from the calling thread's own I/O counter
(``/proc/thread-self/io``, ``wchar``: every ``write`` of this thread, on Linux only), so what
other threads write meanwhile (the kernel's output, our store) is not blamed on a callback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from keras_nbguard.records.calls import CallbackTime

CALLBACK_HOOKS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
)


class CallbackClock:
    """Wraps the hooks of ``callbacks`` (a list or tuple) until ``restore()``."""

    def __init__(self, callbacks: Any, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.complete = True  # False: a callback could not be timed (slots, a CallbackList)
        # "Class.method": [seconds, calls, bytes, the slowest call's seconds]
        self._times: dict[str, list[float]] = {}
        self._wrapped: list[tuple[Any, str, Any]] = []
        self._io = _ThreadWrites()
        self._io_known = self._io.known
        if not isinstance(callbacks, (list, tuple)):
            self.complete = callbacks is None
            return
        for callback in callbacks:
            self._wrap(callback)

    @property
    def seconds(self) -> float | None:
        return sum(t[0] for t in self._times.values()) if self.complete else None

    def breakdown(self) -> tuple[CallbackTime, ...]:
        """Each timed hook, slowest first."""
        known = self._io_known
        times = (
            CallbackTime(name, seconds, int(calls), int(written) if known else None, slowest)
            for name, (seconds, calls, written, slowest) in self._times.items()
        )
        return tuple(sorted(times, key=lambda t: -t.seconds))

    def restore(self) -> None:
        for callback, name, previous in self._wrapped:
            if previous is None:
                del callback.__dict__[name]
            else:
                setattr(callback, name, previous)
        self._wrapped.clear()
        self._io.close()

    def _wrap(self, callback: Any) -> None:
        for name in CALLBACK_HOOKS:
            method = getattr(callback, name, None)
            if method is None or getattr(method, "_is_default", False):
                continue  # Keras' no-op default: nothing to time, and async dispatch stays on
            previous = callback.__dict__.get(name) if hasattr(callback, "__dict__") else None
            key = f"{type(callback).__name__}.{name}"
            try:
                setattr(
                    callback, name, self._timed(method, self._times.setdefault(key, [0, 0, 0, 0]))
                )
            except (AttributeError, TypeError):  # __slots__ or a frozen object
                self.complete = False
                continue
            self._wrapped.append((callback, name, previous))

    def _timed(self, method: Callable[..., Any], totals: list[float]) -> Callable[..., Any]:
        clock, written = self.clock, self._io.written

        @functools.wraps(method)
        def hook(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # IPython leaves our frame out of the user's traceback
            before, start = written(), clock()
            try:
                return method(*args, **kwargs)
            finally:
                took = clock() - start
                totals[0] += took
                totals[1] += 1
                totals[2] += written() - before
                totals[3] = max(totals[3], took)

        return hook


class _ThreadWrites:
    """Bytes written so far by the thread that made this (0 where it can't be read)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        with contextlib.suppress(OSError):  # the task's own file: hooks run on fit's thread
            self._fd = os.open(f"/proc/self/task/{threading.get_native_id()}/io", os.O_RDONLY)

    @property
    def known(self) -> bool:
        return self._fd is not None

    def written(self) -> int:
        if self._fd is None:
            return 0
        try:
            text = os.pread(self._fd, 512, 0)  # ~2 µs: no open per call
        except OSError:
            return 0
        start = text.find(b"wchar:")
        return int(text[start + 6 : text.find(b"\n", start)]) if start >= 0 else 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
