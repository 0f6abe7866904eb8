"""Runs whose kernel died mid-run: how to tell (the process that started it is gone) and what
the next load of the extension says about them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras_nbguard.records.formatting import fmt_bytes, fmt_seconds


@dataclass(frozen=True)
class DiedRun:
    label: str
    run_number: int
    seconds: float
    last_rss: int | None
    pid: int

    def text(self) -> str:
        return (
            f"keras_nbguard: run {self.label!r} #{self.run_number} died: the kernel (pid "
            f"{self.pid}) was killed {fmt_seconds(self.seconds)} into the run; last RSS seen "
            f"{fmt_bytes(self.last_rss)}. An out-of-memory kill is the usual cause."
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())


def process_alive(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started the run (pids get reused)."""
    import psutil

    try:
        process = psutil.Process(pid)
        # a killed kernel its parent has not reaped yet is a zombie: gone, though its pid and
        # create time are still there
        return bool(
            abs(process.create_time() - started) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False
