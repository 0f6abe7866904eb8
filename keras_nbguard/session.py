"""The Session: the one stateful object of a kernel (options, history, the run in progress)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .collectors.gpu import NvmlReader, TfGpu
from .prepare import RunOptions
from .records import RunRecord
from .tracking import Run, tracked


class NbguardWarning(UserWarning):
    """Something keras_nbguard could not do; the user's code ran regardless."""


class Session:
    def __init__(self, options: RunOptions | None = None, *,
                 tf_gpu: Callable[[], TfGpu | None] = TfGpu.if_imported,
                 nvml: NvmlReader | None = None, sample_hz: float = 100.0) -> None:
        self.options = options or RunOptions()
        self.tf_gpu = tf_gpu
        self.nvml = nvml or NvmlReader()
        self.sample_hz = sample_hz
        self.history: list[RunRecord] = []
        self.current: Run | None = None
        self.record_listeners: list[Callable[[RunRecord], None]] = []
        self._warned: set[str] = set()

    # -- configuration ---------------------------------------------------------------------------
    def configure(self, **changes: Any) -> RunOptions:
        """Change the defaults every later run starts from (same names as ``RunOptions``)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(RunOptions)}
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        self.options = dataclasses.replace(self.options, **changes)
        return self.options

    # -- runs ------------------------------------------------------------------------------------
    def runs(self, label: str | None = None) -> list[RunRecord]:
        return [r for r in self.history if label is None or r.label == label]

    def last_run(self, label: str) -> RunRecord | None:
        for record in reversed(self.history):
            if record.label == label:
                return record
        return None

    def track(self, label: str, **overrides: Any) -> Any:
        """Context manager: prepare and measure a block like ``%%kerasrun`` does a cell."""
        return tracked(self, label, dataclasses.replace(self.options, **overrides))

    def begin(self, label: str, options: RunOptions) -> Run:
        if self.current is not None:
            raise RuntimeError(f"keras_nbguard: run {self.current.label!r} is still going; "
                               f"tracked runs can't be nested")
        previous = self.last_run(label)
        run = Run(self, label, (previous.run_number + 1) if previous else 1, options)
        self.current = run
        try:
            run.start()
        except BaseException:
            self.current = None
            run.stop(None)
            raise
        return run

    def finish(self, run: Run, error: BaseException | None) -> RunRecord | None:
        """Stop the run's collectors and keep its record; never raises (it runs in a finally)."""
        self.current = None
        try:
            record = run.stop(error).compared_to(self.last_run(run.label))
        except Exception as exc:  # a bug of ours must not hide the user's own exception
            self.warn_once(f"the run could not be recorded: {type(exc).__name__}: {exc}")
            return None
        run.record = record
        self.history.append(record)
        for listener in list(self.record_listeners):
            try:
                listener(record)
            except Exception as exc:
                self.warn_once(f"a run listener failed: {type(exc).__name__}: {exc}")
        return record

    def warn_once(self, message: str) -> bool:
        if message in self._warned:
            return False
        self._warned.add(message)
        warnings.warn(f"keras_nbguard: {message}", NbguardWarning, stacklevel=2)
        return True


_current: Session | None = None


def get_session() -> Session:
    """The kernel's session: the one the extension made, or a new one for plain scripts."""
    global _current
    if _current is None:
        _current = Session()
    return _current


def set_session(session: Session | None) -> None:
    global _current
    _current = session


@contextmanager
def using(session: Session) -> Iterator[Session]:
    """Make ``session`` the current one for a block (tests, and nested tools)."""
    before = _current
    set_session(session)
    try:
        yield session
    finally:
        set_session(before)
