"""The stop button held while keras_nbguard does its own bookkeeping around a cell.

A kernel stops a cell with SIGINT: Python's handler raises KeyboardInterrupt at whatever line runs.
Landing in our preparation (the release, the clear, the collection: up to seconds when earlier
models are held by a traceback) or in keeping the record, it cut that work in half: the run was
not recorded, and where it fell between claiming the run and starting it, every later
``%%kerasrun`` said "run is still going" until the kernel restarted. Held, the press is noted and
acted on once our work is whole: before the cell, the cell does not run and the run is kept as
interrupted; after it, the record is kept and then the cell stops. A second press while held
stops at once, as before: our work may hang, and the stop button must always work.
"""

from __future__ import annotations

# signal.signal without its enum wrapping: 0.3 µs a call, not 3.4 (four a run); no stub
import _signal  # type: ignore[import-not-found]
import signal
from types import FrameType, TracebackType


class HeldInterrupt:
    """``with HeldInterrupt() as stop: ...``; then ``stop.pressed``. Only Python's own handler
    on the main thread is replaced (a kernel running a cell has it): another handler, or another
    thread, is left as it is and nothing is held."""

    def __init__(self) -> None:
        self.pressed = False
        self._held = False

    def __enter__(self) -> HeldInterrupt:
        # one call, not a look first: each costs a system call (~4 us; two holds a run)
        try:
            previous = _signal.signal(signal.SIGINT, self._press)
        except (ValueError, OSError):  # not the main thread, or no signals here
            return self
        if previous is signal.default_int_handler:
            self._held = True
        else:  # someone else's handler: theirs to keep
            _signal.signal(signal.SIGINT, previous)
        return self

    def _press(self, signum: int, frame: FrameType | None) -> None:
        if self.pressed:
            raise KeyboardInterrupt("stop pressed twice: keras_nbguard's bookkeeping cut short")
        self.pressed = True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._held:
            _signal.signal(signal.SIGINT, signal.default_int_handler)
            self._held = False
