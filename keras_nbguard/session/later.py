"""Work a cell need not wait for, done once its reply is sent, where something says when.

The IPython layer gives the Session a ``schedule`` (ipython/after_reply.py) that puts a callback
on a Jupyter kernel's loop, where it runs right after the cell's reply; it answers False where
there is no such loop, and the work is done at once, as it always was. Whoever needs the work done
before going on (the next cell of any kind, the next run, a change of store, closing) calls
``run()``; at the interpreter's exit it is done, then ``at_exit`` (the store's flush: a row that
fell back to the writer thread).

What the work warns of after the reply would go to a cell the front end has closed: it is kept
(``warn``) and said by the next cell (``unsaid``)."""

from __future__ import annotations

import atexit
import threading
from collections import deque
from collections.abc import Callable

Work = Callable[[], None]


class Later:
    def __init__(
        self, warn: Callable[[str], object], at_exit: Callable[[], None] | None = None
    ) -> None:
        self._warn = warn
        self._at_exit = at_exit
        self.schedule: Callable[[Work], bool] | None = None  # None: nothing is ever left
        self._pending: deque[Work] = deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a callback is on its way: it runs whatever is left by then
        self._after_reply = False  # running from that callback
        self._unsaid: list[str] = []
        self._exit_hook = False

    def add(self, work: Work) -> None:
        if self.schedule is None:
            work()
            return
        with self._lock:
            self._pending.append(work)
            if self._scheduled:
                return
            try:
                self._scheduled = self.schedule(self._after_the_reply)
            except Exception:  # a loop closing meanwhile: the work is done at once
                self._scheduled = False
            scheduled = self._scheduled
        if not scheduled:
            self.run()
        elif not self._exit_hook:  # a kernel shut down before its loop turns again
            atexit.register(self._exit)
            self._exit_hook = True

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def run(self) -> None:
        """Everything left so far, in order; one failing does not keep the rest from running."""
        while self._pending:  # (a look first: every cell asks, and almost always finds none)
            try:
                work = self._pending.popleft()
            except IndexError:  # another thread took the last one meanwhile
                return
            try:
                work()
            except Exception as exc:  # the work warns of its own failures; this is a bug's
                self.warn(f"keras_nbguard: {type(exc).__name__}: {exc} (after the cell)")

    def warn(self, message: str) -> None:
        """The work's warnings: said now, or kept for the next cell when this one is over."""
        if self._after_reply:
            self._unsaid.append(message)
        else:
            self._warn(message)

    def unsaid(self) -> list[str]:
        said, self._unsaid = self._unsaid, []
        return said

    def close(self) -> None:
        self.run()
        if self._exit_hook:
            atexit.unregister(self._exit)
            self._exit_hook = False

    def _after_the_reply(self) -> None:
        with self._lock:
            self._scheduled = False
        self._after_reply = True
        try:
            self.run()
        finally:
            self._after_reply = False

    def _exit(self) -> None:
        self.run()
        if self._at_exit is not None:
            self._at_exit()
