"""This notebook's runs as the session sees them: this kernel's, earlier kernels' (read from the
store on first use), how the next run is numbered, and the reset mark.

A reset has one meaning everywhere (``%nbguard reset``, the dashboard's button): the runs
before it are hidden from ``runs()``, the summary's trend and the dashboard, not deleted — the
database keeps them, the mark is kept in it too (a restarted kernel honours it), and
``%nbguard reset --undo`` brings them back. Run numbers never repeat within a notebook: the
next run after a reset is numbered after the last one, hidden or not, and "vs previous"
compares with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .records import RunRecord


class RunHistory:
    def __init__(self, notebook: str, warn: Callable[[str], object]) -> None:
        self.notebook = notebook
        self._warn = warn
        self.store: Any = None
        self.mine: list[RunRecord] = []  # this kernel's runs, hidden ones too
        # this notebook's runs before this session (earlier kernels', and this process's before a
        # %reload_ext), read from the store on first use: see ``earlier``
        self._earlier: list[RunRecord] | None = []
        self._began = time.time()
        self.reset_at: float | None = None  # runs started before it are hidden
        self._stored_last: dict[str, RunRecord | None] = {}  # per label, before this session

    def attach(self, store: Any) -> None:
        """Read from ``store`` from now on (earlier runs on first use, to keep loading cheap)."""
        self.store = store
        self._earlier = None
        self._stored_last = {}
        self._began = time.time()
        self.reset_at = None
        if store is not None:
            self.reset_at = self._read(lambda: store.reset_mark(self.notebook), None)

    @property
    def earlier(self) -> list[RunRecord]:
        """This notebook's runs before this session, oldest first, hidden ones too. Everything
        stored is earlier, since this session had no run yet when it began (not filtered by
        kernel id: Jupyter's "Restart kernel" keeps the id, and the runs before it are
        history)."""
        if self._earlier is None:
            self._earlier = []
            if self.store is not None:
                self._earlier = self._read(
                    lambda: self.store.runs(notebook=self.notebook, before=self._began), [])
        return self._earlier

    def reread(self) -> None:
        """The store has more of this notebook's past now (it came back from memory to its
        file): read the earlier runs again on next use."""
        self._earlier = None
        self._stored_last = {}

    def add(self, record: RunRecord) -> None:
        self.mine.append(record)

    def runs(self, label: str | None = None, this_kernel: bool = False) -> list[RunRecord]:
        """The visible runs, oldest first; across kernel restarts unless ``this_kernel``."""
        records = self.mine if this_kernel else self.earlier + self.mine
        return [r for r in records if (label is None or r.label == label) and self._shown(r)]

    def last_run(self, label: str) -> RunRecord | None:
        """The label's latest run, hidden or not: numbers continue, and "vs previous" compares
        with the run that really came before."""
        for record in reversed(self.mine):
            if record.label == label:
                return record
        return self._last_stored(label)

    def next_number(self, label: str) -> int:
        """One more than the label's highest number, in this kernel or stored: numbers never
        repeat, even when runs kept in memory while the file was out of reach join it."""
        numbers = [r.run_number for r in self.mine if r.label == label]
        stored = self._last_stored(label)
        return 1 + max(numbers + ([stored.run_number] if stored else []), default=0)

    def _last_stored(self, label: str) -> RunRecord | None:
        if label not in self._stored_last:
            found = None
            if self._earlier is None and self.store is not None:
                # before the history is loaded: one query for this label, not the whole notebook
                found = self._read(
                    lambda: self.store.last_run(self.notebook, label, self._began), None)
            else:
                found = next((r for r in reversed(self.earlier) if r.label == label), None)
            self._stored_last[label] = found
        return self._stored_last[label]

    def reset(self) -> str:
        """Hide every run so far (the database keeps them)."""
        count = len(self.runs())
        self.reset_at = time.time()
        self._save_mark()
        return (f"hid {count} run(s) from runs() and the dashboard; the database keeps them and "
                f"%nbguard reset --undo shows them again")

    def undo_reset(self) -> str:
        if self.reset_at is None:
            return "no reset to undo"
        hidden = [r for r in self.earlier + self.mine if not self._shown(r)]
        self.reset_at = None
        self._save_mark()
        return f"showing {len(hidden)} hidden run(s) again"

    def _shown(self, record: RunRecord) -> bool:
        return self.reset_at is None or record.started_at >= self.reset_at

    def _save_mark(self) -> None:
        if self.store is not None:
            self._read(lambda: self.store.set_reset_mark(self.notebook, self.reset_at), None)

    def _read(self, step: Callable[[], Any], default: Any) -> Any:
        try:
            return step()
        except Exception as exc:  # a broken store never stops a kernel
            self._warn(f"run history could not be read: {type(exc).__name__}: {exc}")
            return default
