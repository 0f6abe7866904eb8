"""Work a cell need not wait for, done once its reply is sent, where something says when.

The IPython layer gives the Session a ``schedule`` (ipython/after_reply.py) that puts a callback
on a Jupyter kernel's loop, where it runs right after the cell's reply; it answers False where
there is no such loop, and the work is done at once, as it always was. Whoever needs the work done
before going on (the next run, closing the store, the interpreter's exit) calls ``run()``."""

from __future__ import annotations

import atexit
from collections import deque
from collections.abc import Callable

Work = Callable[[], None]


class Later:
    def __init__(self, warn: Callable[[str], object]) -> None:
        self._warn = warn
        self.schedule: Callable[[Work], bool] | None = None  # None: nothing is ever left
        self._pending: deque[Work] = deque()
        self._at_exit = False

    def add(self, work: Work) -> None:
        if self.schedule is None:
            work()
            return
        self._pending.append(work)
        if len(self._pending) > 1:  # the first one's callback runs them all
            return
        if not self.schedule(self.run):
            self.run()
        elif not self._at_exit:  # a kernel shut down before its loop turns again
            atexit.register(self.run)
            self._at_exit = True

    def run(self) -> None:
        """Everything left so far, in order; one failing does not keep the rest from running."""
        while self._pending:
            work = self._pending.popleft()
            try:
                work()
            except Exception as exc:  # the work warns of its own failures; this is a bug's
                self._warn(f"keras_nbguard: {type(exc).__name__}: {exc} (after the cell)")

    def close(self) -> None:
        self.run()
        if self._at_exit:
            atexit.unregister(self.run)
            self._at_exit = False
