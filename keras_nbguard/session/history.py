"""This notebook's runs as the session sees them: this kernel's, earlier kernels' (read from the
store on first use), how the next run is numbered, and the reset mark.

A reset has one meaning everywhere (``%nbguard reset``, the dashboard's button): the runs
before it are hidden from ``runs()``, the summary's trend and the dashboard, not deleted — the
database keeps them, the mark is kept in it too (a restarted kernel honours it), and
``%nbguard reset --undo`` brings them back. Run numbers never repeat within a notebook: the
next run after a reset is numbered after the last one, hidden or not, and "vs previous"
compares with it. ``%nbguard reset --label a`` does the same for label ``a`` alone; a reset of
every label drops the labels' own marks (it hides what they hid, and more).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from keras_nbguard.records.run import RunRecord


class RunHistory:
    def __init__(self, notebook: str, warn: Callable[[str], object]) -> None:
        self.notebook = notebook
        self._warn = warn
        self.store: Any = None
        self.mine: list[RunRecord] = []  # this kernel's runs, hidden ones too
        # ``mine`` by label, so a run's bookkeeping doesn't grow with the runs before it;
        # brought up to date on use (``mine`` may be extended directly)
        self._mine_by_label: dict[str, list[RunRecord]] = {}
        self._indexed, self._indexed_list = 0, self.mine
        self._highest: dict[str, int] = {}  # the highest run number of each label in ``mine``
        # this notebook's runs before this session (earlier kernels', and this process's before a
        # %reload_ext), read from the store on first use: see ``earlier``
        self._earlier: list[RunRecord] | None = []
        self._began = time.time()
        self.reset_at: float | None = None  # runs started before it are hidden
        self.label_reset_at: dict[str, float] = {}  # the same, per label (reset --label)
        self._stored_last: dict[str, RunRecord | None] = {}  # per label, before this session

    def attach(self, store: Any) -> None:
        """Read from ``store`` from now on (earlier runs on first use, to keep loading cheap)."""
        self.store = store
        self._earlier = None
        self._stored_last = {}
        self._began = time.time()
        self.reset_at = None
        self.label_reset_at = {}
        if store is not None:
            self.reset_at = self._read(lambda: store.reset_mark(self.notebook), None)
            self.label_reset_at = self._read(lambda: store.label_reset_marks(self.notebook), {})

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
                    lambda: self.store.runs(notebook=self.notebook, before=self._began), []
                )
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
        if this_kernel and label is not None:
            return [r for r in self._mine_of(label) if self._shown(r)]
        records = self.mine if this_kernel else self.earlier + self.mine
        return [r for r in records if (label is None or r.label == label) and self._shown(r)]

    def latest(self, label: str, count: int) -> list[RunRecord]:
        """This kernel's ``count`` latest visible runs of ``label``, oldest first: what a run's
        diagnosis reads, whatever the number of runs before (a reset hides the older ones)."""
        found: list[RunRecord] = []
        for record in reversed(self._mine_of(label)):
            if len(found) == count or not self._shown(record):
                break
            found.append(record)
        return found[::-1]

    def last_run(self, label: str) -> RunRecord | None:
        """The label's latest run, hidden or not: numbers continue, and "vs previous" compares
        with the run that really came before."""
        mine = self._mine_of(label)
        return mine[-1] if mine else self._last_stored(label)

    def next_number(self, label: str) -> int:
        """One more than the label's highest number, in this kernel or stored: numbers never
        repeat, even when runs kept in memory while the file was out of reach join it."""
        self._mine_of(label)  # brings the highest numbers up to date
        stored = self._last_stored(label)
        return 1 + max(self._highest.get(label, 0), stored.run_number if stored else 0)

    def _mine_of(self, label: str) -> list[RunRecord]:
        """This kernel's runs of ``label``, oldest first, hidden ones too."""
        if self.mine is not self._indexed_list or len(self.mine) < self._indexed:
            # ``mine`` was replaced or cut: index it again
            self._mine_by_label, self._indexed, self._indexed_list = {}, 0, self.mine
            self._highest = {}
        for record in self.mine[self._indexed :]:
            self._mine_by_label.setdefault(record.label, []).append(record)
            self._highest[record.label] = max(self._highest.get(record.label, 0), record.run_number)
        self._indexed = len(self.mine)
        return self._mine_by_label.get(label, [])

    def _last_stored(self, label: str) -> RunRecord | None:
        if label not in self._stored_last:
            found = None
            if self._earlier is None and self.store is not None:
                # before the history is loaded: one query for this label, not the whole notebook
                found = self._read(
                    lambda: self.store.last_run(self.notebook, label, self._began), None
                )
            else:
                found = next((r for r in reversed(self.earlier) if r.label == label), None)
            self._stored_last[label] = found
        return self._stored_last[label]

    def reset(self, label: str | None = None) -> str:
        """Hide every run so far, or ``label``'s (the database keeps them)."""
        count = len(self.runs(label))
        now = time.time()
        if label is None:
            self.reset_at = now
            self._save_mark(None, now)
            for dropped in list(self.label_reset_at):  # older than this mark: nothing to add
                self._drop_label_mark(dropped)
            return (
                f"hid {count} run(s) from runs() and the dashboard; the database keeps "
                f"them and %nbguard reset --undo shows them again"
            )
        self.label_reset_at[label] = now
        self._save_mark(label, now)
        unknown = (
            ""
            if self._has_label(label)
            else (
                f" (no run is labelled {label!r} here; labels: "
                f"{', '.join(sorted(self._labels())) or 'none yet'})"
            )
        )
        return (
            f"hid {count} run(s) of {label!r} from runs() and the dashboard{unknown}; the "
            f"database keeps them and %nbguard reset --undo --label {label} shows them again"
        )

    def undo_reset(self, label: str | None = None) -> str:
        """Show the runs a reset hid again: every label's, or ``label``'s own reset undone."""
        if label is None:
            if self.reset_at is None and not self.label_reset_at:
                return "no reset to undo"
            hidden = [r for r in self.earlier + self.mine if not self._shown(r)]
            self.reset_at = None
            self._save_mark(None, None)
            for dropped in list(self.label_reset_at):
                self._drop_label_mark(dropped)
            return f"showing {len(hidden)} hidden run(s) again"
        if label not in self.label_reset_at:
            return f"no reset of {label!r} to undo" + self._still_hidden(label)
        before = len(self.runs(label))
        self._drop_label_mark(label)
        return (
            f"showing {len(self.runs(label)) - before} hidden run(s) of {label!r} again"
            + self._still_hidden(label)
        )

    def _still_hidden(self, label: str) -> str:
        if self.reset_at is None or not any(
            r.label == label and not self._shown(r) for r in self.earlier + self.mine
        ):
            return ""
        return "; runs before the last reset of every label stay hidden (%nbguard reset --undo)"

    def _shown(self, record: RunRecord) -> bool:
        mark = self.reset_at
        if self.label_reset_at:
            own = self.label_reset_at.get(record.label)
            if own is not None and (mark is None or own > mark):
                mark = own
        return mark is None or record.started_at >= mark

    def _has_label(self, label: str) -> bool:
        return any(r.label == label for r in self.mine) or self._last_stored(label) is not None

    def _labels(self) -> set[str]:
        return {r.label for r in self.earlier + self.mine}

    def _drop_label_mark(self, label: str) -> None:
        self.label_reset_at.pop(label, None)
        self._save_mark(label, None)

    def _save_mark(self, label: str | None, at: float | None) -> None:
        if self.store is not None:
            self._read(lambda: self.store.set_reset_mark(self.notebook, at, label), None)

    def _read(self, step: Callable[[], Any], default: Any) -> Any:
        try:
            return step()
        except Exception as exc:  # a broken store never stops a kernel
            self._warn(f"run history could not be read: {type(exc).__name__}: {exc}")
            return default
