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

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..records import RunRecord
from ..schema import ENV_PATH, SCHEMA_VERSION
from ..store import process_alive, unfinished_record

Alive = Callable[[int, float], bool]
COLUMNS = ("id, notebook, {cell_id}, label, run_number, kernel_id, pid, pid_started, started_at, "
           "updated_at, status, last_rss")


class Unreadable(Exception):
    """Why the history can't be shown; the text is for the page."""


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
        record = self.record if samples else replace(self.record, rss_samples=())
        data = record.to_dict()
        if not samples:
            del data["rss_samples"]
        data.update(id=self.id, notebook=self.notebook, kernel_id=self.kernel_id, pid=self.pid,
                    died=self.died, died_inferred=self.inferred, stored_status=self.stored_status,
                    change=self.change)
        return data


def connect(path: str) -> sqlite3.Connection:
    """The database read-only; ``Unreadable`` if it is missing or not a history of ours."""
    if path == ":memory:" or not os.path.isfile(path):
        raise Unreadable(f"No run history yet: {path} does not exist. It is created by the first "
                         f"%%kerasrun of a kernel that loaded keras_nbguard (set {ENV_PATH} to "
                         f"read another file).")
    try:
        db = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, timeout=5,
                             check_same_thread=False)
    except sqlite3.Error as exc:
        raise Unreadable(f"The run history {path} can't be opened ({exc}).") from exc
    try:
        check_schema(db, path)
    except BaseException:
        db.close()
        raise
    return db


def check_schema(db: sqlite3.Connection, path: str) -> None:
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not tables:  # what a kernel's Store starts from, too
            raise Unreadable(f"No runs recorded yet: {path} is empty.")
        if not {"meta", "runs"} <= tables:
            raise Unreadable(f"{path} is not a keras_nbguard run history (no runs table).")
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"The run history {path} can't be read ({exc}). The next kernel that "
                         f"loads keras_nbguard moves a corrupt file aside and starts a new "
                         f"one.") from exc
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise Unreadable(f"The run history {path} was written by a newer keras_nbguard (schema "
                         f"{version}; this server knows {SCHEMA_VERSION}): upgrade keras_nbguard "
                         f"in the server's environment.")


def _select(db: sqlite3.Connection, where: str = "", params: tuple[Any, ...] = (),
            samples: bool = True) -> list[Any]:
    has_cell = any(col[1] == "cell_id" for col in db.execute("PRAGMA table_info(runs)"))
    columns = COLUMNS.format(cell_id="cell_id" if has_cell else "NULL")  # schema 1 had none
    # Without the RSS series, SQLite drops it from each record's JSON (in C): parsing it was
    # most of the time a page with thousands of runs took.
    record = "record" if samples else "json_remove(record, '$.rss_samples')"
    return db.execute(f"SELECT {columns}, {record} FROM runs {where} ORDER BY started_at",
                      params).fetchall()


def read_runs(path: str, notebook: str | None = None, alive: Alive = process_alive,
              samples: bool = True) -> list[StoredRun]:
    """Runs oldest first, of one notebook or all, every status; ``Unreadable`` says why not.
    ``samples``: with the finished runs' RSS series (the page does not need them)."""
    db = connect(path)
    try:
        rows = _select(db, "WHERE notebook = ?" if notebook is not None else "",
                       (notebook,) if notebook is not None else (), samples)
        runs = [_run(db, row, alive) for row in rows]
    except (sqlite3.Error, ValueError, TypeError, KeyError) as exc:  # damaged rows included
        raise Unreadable(f"The run history {path} can't be read ({type(exc).__name__}: "
                         f"{exc}).") from exc
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
    return {"notebook": name, "runs": len(runs), "died": sum(r.died for r in runs),
            "running": sum(r.record.status == "running" for r in runs),
            "kernels": len({r.kernel_id for r in runs}),
            "restarts": sum(r.change == "kernel restarted" for r in runs),
            "labels": labels, "first_started_at": runs[0].record.started_at,
            "last_started_at": runs[-1].record.started_at}


def mark_changes(runs: list[StoredRun]) -> list[StoredRun]:
    """Note where a notebook's runs move to a new kernel (another id) or a restarted one (same
    id, a new process)."""
    marked, before = [], {}
    for run in runs:
        where, last = (run.kernel_id, run.pid, run.pid_started), before.get(run.notebook)
        change = None
        if last is not None and where != last:
            change = "new kernel" if where[0] != last[0] else "kernel restarted"
        marked.append(replace(run, change=change))
        before[run.notebook] = where
    return marked


def _run(db: sqlite3.Connection, row: tuple[Any, ...], alive: Alive) -> StoredRun:
    (run_id, notebook, cell_id, label, number, kernel, pid, pid_started, started, updated,
     status, last_rss, data) = row
    shown = status
    if status == "running" and not (pid and alive(pid, pid_started or 0.0)):
        shown = "died"  # its process is gone: killed mid-run, whatever the database still says
    if data:
        record = RunRecord.from_dict({**json.loads(data), "pid": pid})
    else:  # not finished: what the rows written during the run tell (as Store does)
        samples = db.execute("SELECT t, rss FROM samples WHERE run_id = ? ORDER BY t",
                             (run_id,)).fetchall()
        record = unfinished_record((notebook, cell_id, label, number, kernel, started, updated,
                                    status, last_rss, pid), shown, samples)
    return StoredRun(run_id, notebook or "<unknown>", kernel, record, pid, pid_started, status)
