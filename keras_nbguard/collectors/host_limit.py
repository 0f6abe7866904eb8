"""``--host-limit MiB``: a cap on the memory a run may add to the kernel's RSS (over the run's
start), enforced by the RSS sampler, for CPU users who have no ``--gpu-limit``.

Over the run's start, not an absolute RSS: memory a run frees stays in the process (malloc and
TensorFlow keep it for reuse), so an absolute cap would fail every run after a big one.

TensorFlow has no memory cap on the CPU, and an address-space limit (``RLIMIT_AS``) makes it
abort the process the next time it starts a thread. So the sampler watches RSS, and once the
run passes the cap, ``_thread.interrupt_main`` runs our handler in the main thread, which stops
the run with ``HostMemoryLimit`` (a ``MemoryError``: the run is recorded as out of memory) at
its next Python line: a fit stops after the step that crossed the cap. A soft cap, then: one
step's allocations, and a quarter second of sampling, may go past it.

The handler never raises inside our own code (a run's bookkeeping must not be cut in half):
there it lets the next sample trip it again; after the run, the crossing is only noted, and the
record says so.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from types import FrameType
from typing import Any

from keras_nbguard.records.formatting import fmt_bytes

SIGNAL = signal.SIGUSR2  # never sent by anyone: interrupt_main() trips its handler in-process
OUR_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class HostMemoryLimit(MemoryError):
    """The run passed ``--host-limit``: it was stopped, as an out-of-memory would stop it."""


class HostLimit:
    """Armed on the main thread at a run's start, disarmed first thing at its end."""

    def __init__(self, limit_mb: int) -> None:
        self.limit_mb = limit_mb
        self.base = 0  # RSS as the run started
        self.limit = limit_mb * 2**20  # the RSS past which the run is stopped
        self.crossed: int | None = None  # the first RSS over the cap, once there was one
        self.stopped_run = False
        self._armed = False
        self._tripped = False  # the handler is due to run
        self._previous: Any = None

    def arm(self, rss_at_start: int | None) -> str | None:
        """Start enforcing; a warning in words when it can't be."""
        if threading.current_thread() is not threading.main_thread():
            return "--host-limit is not enforced: the run is not on the main thread"
        if rss_at_start is None:
            return "--host-limit is not enforced: RSS could not be read"
        self.base = rss_at_start
        self.limit = rss_at_start + self.limit_mb * 2**20
        self._previous = signal.signal(SIGNAL, self._on_signal)
        self._armed = True
        return None

    def disarm(self) -> str | None:
        """Stop enforcing; a note in words when the cap was passed without stopping the run."""
        self._armed = False
        if self._previous is not None:
            signal.signal(SIGNAL, self._previous)
            self._previous = None
        if self.crossed is not None and not self.stopped_run:
            return f"{self._passed()} as the run ended: it was not stopped"
        return None

    def check(self, _t: float, rss: int) -> None:
        """A sampler listener (the sampler's thread): trip the handler once, on crossing."""
        if self._armed and not self._tripped and rss > self.limit:
            self.crossed = self.crossed or rss
            self._tripped = True
            _thread.interrupt_main(SIGNAL)

    def _on_signal(self, _signum: int, frame: FrameType | None) -> None:
        if not self._armed:
            return  # the run ended meanwhile: noted, not raised
        if frame is not None and frame.f_code.co_filename.startswith(OUR_CODE):
            self._tripped = False  # inside our own bookkeeping: the next sample trips it again
            return
        self._armed = False
        self.stopped_run = True
        raise HostMemoryLimit(f"{self._passed()}: the run was stopped at its next Python line")

    def _passed(self) -> str:
        grown = (self.crossed or 0) - self.base
        return (
            f"RSS {fmt_bytes(self.crossed)}, {fmt_bytes(grown)} over the run's start, passed "
            f"--host-limit {self.limit_mb:,} MiB"
        )
