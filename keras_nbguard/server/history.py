"""The run history as the server sees it: read-only, never created, migrated or repaired.

Kernels own the database (``store.Store`` creates, migrates and writes it). The server opens it in
SQLite's read-only mode per request, so viewing the page can't create a missing file, move a
corrupt one aside or take a write lock from a kernel in the middle of a run; whatever goes wrong
becomes a ``message`` for the page instead of an exception.

A run still marked 'running' whose kernel process is gone is *reported* as died (``inferred``)
but not written back: the notebook's next kernel marks it died in the database
(``Store.mark_dead_runs``), exactly as it would without the page.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from keras_nbguard.records.run import RunRecord
from keras_nbguard.records.samples import RssSamples
from keras_nbguard.store.died import process_alive
from keras_nbguard.store.schema import Unreadable, open_read_only, run_record, select_runs

__all__ = ["StoredRun", "Unreadable", "by_notebook", "notebook_summary", "read_runs"]

Alive = Callable[[int, float], bool]


@dataclass(frozen=True)
class StoredRun:
    """One row of the history: the record plus where it ran (the process tells restarts apart)."""

    id: str
    notebook: str
    kernel_id: str | None
    record: RunRecord
    pid: int | None
    pid_started: float | None
    stored_status: str  # as in the database; record.status may say 'died' where this is 'running'
    change: str | None = None  # "new kernel" / "kernel restarted" since the notebook's last run

    @property
    def died(self) -> bool:
        return self.record.status == "died"

    @property
    def inferred(self) -> bool:
        """Died by our reading only: still 'running' in the database, its process gone."""
        return self.died and self.stored_status == "running"

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        # the RSS series is the long part (?samples=1 asks for it): not copied just to be dropped
        record = self.record if samples else replace(self.record, rss_samples=RssSamples())
        data = record.to_dict()
        if not samples:
            del data["rss_samples"]
        data.update(
            id=self.id,
            notebook=self.notebook,
            kernel_id=self.kernel_id,
            pid=self.pid,
            died=self.died,
            died_inferred=self.inferred,
            stored_status=self.stored_status,
            change=self.change,
        )
        return data


def read_runs(
    path: str, notebook: str | None = None, alive: Alive = process_alive, samples: bool = True
) -> list[StoredRun]:
    """Runs oldest first, of one notebook or all, every status; ``Unreadable`` says why not.
    ``samples``: with the finished runs' RSS series (the page does not need them)."""
    db = open_read_only(path)
    try:
        rows = select_runs(
            db,
            "WHERE notebook = ?" if notebook is not None else "",
            (notebook,) if notebook is not None else (),
            samples,
        )
        runs = [_run(db, row, alive) for row in rows]
    except (sqlite3.Error, ValueError, TypeError, KeyError) as exc:  # damaged rows included
        raise Unreadable(
            f"The run history {path} can't be read ({type(exc).__name__}: {exc})."
        ) from exc
    finally:
        db.close()
    return mark_changes(runs)


def by_notebook(runs: list[StoredRun]) -> dict[str, list[StoredRun]]:
    """Runs grouped by notebook, most recently active first."""
    groups: dict[str, list[StoredRun]] = {}
    for run in runs:
        groups.setdefault(run.notebook, []).append(run)
    ordered = sorted(groups.items(), key=lambda kv: kv[1][-1].record.started_at, reverse=True)
    return dict(ordered)


def notebook_summary(name: str, runs: list[StoredRun]) -> dict[str, Any]:
    labels = list(dict.fromkeys(r.record.label for r in runs))
    return {
        "notebook": name,
        "runs": len(runs),
        "died": sum(r.died for r in runs),
        "running": sum(r.record.status == "running" for r in runs),
        "kernels": len({r.kernel_id for r in runs}),
        "restarts": sum(r.change == "kernel restarted" for r in runs),
        "labels": labels,
        "first_started_at": runs[0].record.started_at,
        "last_started_at": runs[-1].record.started_at,
    }


def mark_changes(runs: list[StoredRun]) -> list[StoredRun]:
    """Note where a notebook's runs move to a new kernel (another id) or a restarted one (same
    id, a new process)."""
    marked: list[StoredRun] = []
    before: dict[str, tuple[str | None, int | None, float | None]] = {}
    for run in runs:
        where, last = (run.kernel_id, run.pid, run.pid_started), before.get(run.notebook)
        change = None
        if last is not None and where != last:
            change = "new kernel" if where[0] != last[0] else "kernel restarted"
        marked.append(replace(run, change=change))
        before[run.notebook] = where
    return marked


def _run(db: sqlite3.Connection, row: sqlite3.Row, alive: Alive) -> StoredRun:
    status, pid, pid_started = row["status"], row["pid"], row["pid_started"]
    shown = status
    if status == "running" and not (pid and alive(pid, pid_started or 0.0)):
        shown = "died"  # its process is gone: killed mid-run, whatever the database still says
    return StoredRun(
        row["id"],
        row["notebook"] or "<unknown>",
        row["kernel_id"],
        run_record(db, row, shown),
        pid,
        pid_started,
        status,
    )
