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

import signal
import threading
from types import FrameType, TracebackType


class HeldInterrupt:
    """``with HeldInterrupt() as stop: ...``; then ``stop.pressed``. Only Python's own handler
    on the main thread is replaced (a kernel running a cell has it): another handler, or another
    thread, is left as it is and nothing is held."""

    def __init__(self) -> None:
        self.pressed = False
        self._held = False

    def __enter__(self) -> HeldInterrupt:
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    signal.signal(signal.SIGINT, self._press)
                    self._held = True
            except (ValueError, OSError):  # no signals here (an embedded interpreter)
                pass
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
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._held = False
