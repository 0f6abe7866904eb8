"""A stop pressed while a finalizer runs, kept instead of dropped.

Python runs a finalizer (``__del__``, a weakref callback) inside whatever code let go of the
object, and what it raises is printed ("Exception ignored in ...") and dropped. The stop button
is a KeyboardInterrupt raised at whatever line runs: landing in a finalizer, it is dropped with
it and the cell runs on. In a run, finalizers run inside the user's fit often: each tf.data
iterator Keras lets go of is handed to our closing thread by one (iterator_closing.py), and the
user's own and the frameworks' run there too.

While a run is going, such a KeyboardInterrupt is noted here instead of printed; the run raises
it at the next point of ours on the cell's way (a ``fit``, ``evaluate`` or ``predict`` returning,
an epoch beginning or ending: collectors/fit.py), else as the cell ends, its record kept as
stopped (session/core.py). Not a signal sent again later: that one could land after the cell,
in whatever runs next.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

MESSAGE = (
    "the stop landed in a finalizer ({finalizer}), where Python drops it; keras_nbguard kept it"
)


class StopsInFinalizers:
    """``install()`` for a run; ``take()`` the stop noted meanwhile, once, on the main thread
    (where the stop is raised: a ``predict`` of another thread leaves it to the cell's)."""

    def __init__(self) -> None:
        self.pressed = False
        self.where = ""  # the finalizer it landed in
        self._installed = False
        self._previous: Any = None

    def install(self) -> None:
        self._previous, self._installed = sys.unraisablehook, True
        sys.unraisablehook = self._unraisable

    def uninstall(self) -> None:
        self._installed = False
        if sys.unraisablehook == self._unraisable:  # (else someone chained ours: we pass through)
            sys.unraisablehook = self._previous

    def take(self, where: str) -> KeyboardInterrupt | None:
        """The stop noted since the last take, as the exception to raise ``where``."""
        if not self.pressed or threading.current_thread() is not threading.main_thread():
            return None
        self.pressed = False
        return KeyboardInterrupt(
            f"{MESSAGE.format(finalizer=self.where)} and stopped the cell {where}"
        )

    def raise_if_pressed(self, where: str) -> None:
        stop = self.take(where)
        if stop is not None:
            raise stop

    def _unraisable(self, unraisable: Any) -> None:
        if self._installed and isinstance(unraisable.exc_value, KeyboardInterrupt):
            self.pressed = True
            finalizer = unraisable.object
            self.where = getattr(finalizer, "__qualname__", type(finalizer).__name__)
            return
        (self._previous or sys.__unraisablehook__)(unraisable)
