"""The run history's database schema, in one place for the kernels' store and the server: tables,
the version, migrations, opening a file so that only a new or older one takes the write lock
(another kernel may hold it for a while), opening one read-only, and rows into records (by
column name)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from keras_nbguard.records.run import GpuReading, RunRecord
from keras_nbguard.records.samples import RssSamples
from keras_nbguard.store.dbfile import APPLICATION_ID

SCHEMA_VERSION = 2
ENV_PATH = "KERAS_NBGUARD_DB"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, notebook TEXT, cell_id TEXT, label TEXT, run_number INTEGER,
    kernel_id TEXT, pid INTEGER, pid_started REAL, started_at REAL, updated_at REAL,
    status TEXT, last_rss INTEGER, record TEXT);
CREATE INDEX IF NOT EXISTS runs_by_notebook ON runs (notebook, started_at);
CREATE TABLE IF NOT EXISTS samples (run_id TEXT, t REAL, rss INTEGER);
CREATE INDEX IF NOT EXISTS samples_by_run ON samples (run_id);
CREATE TABLE IF NOT EXISTS epochs (run_id TEXT, epoch INTEGER, seconds REAL);
"""
# Not part of the schema's version: an index any reader may lack, added to older files on open.
LABEL_INDEX = "CREATE INDEX IF NOT EXISTS runs_by_label ON runs (notebook, label, started_at)"
RUN_COLUMNS = (
    "id, notebook, {cell_id}, label, run_number, kernel_id, pid, pid_started, "
    "started_at, updated_at, status, last_rss"
)
# A text SQLite can't hold as it is (a lone surrogate: "\udcff", what Python makes of a file name
# that is not UTF-8) is kept as this mark + its JSON (ASCII, lossless); so is a text that starts
# with the mark itself, so that reading back is never in doubt. Other texts are stored as they are.
ESCAPED = "\x00"
# Schema 1 had no cell ids and no per-epoch table.
MIGRATIONS = {
    1: "ALTER TABLE runs ADD COLUMN cell_id TEXT;\n"
    "CREATE TABLE IF NOT EXISTS epochs (run_id TEXT, epoch INTEGER, seconds REAL);"
}


def storable(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """``params`` with each text SQLite can't take escaped (see ``ESCAPED``): any Python string
    is stored, and a query by the same string finds it."""
    if not any(isinstance(p, str) and _escape(p) for p in params):
        return params
    return tuple(
        ESCAPED + json.dumps(p) if isinstance(p, str) and _escape(p) else p for p in params
    )


def _escape(value: str) -> bool:
    if value.isascii():
        return value[:1] == ESCAPED
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text(value: Any) -> Any:
    """A stored text as the Python string it was (``storable`` undone); anything else as is."""
    if isinstance(value, str) and value[:1] == ESCAPED:
        try:
            return json.loads(value[1:])
        except ValueError:
            return value
    return value


def db_name(path: str) -> str | bytes:
    """``path`` as ``sqlite3.connect`` takes it: a name that is not UTF-8 (a lone surrogate) as
    the file system's bytes (``UnicodeEncodeError`` when not even those can name it)."""
    if path.isascii():
        return path
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path)
    return path


class Unreadable(Exception):
    """Why a history can't be read (read-only opening); the text is for the user."""


class NewerDatabase(sqlite3.DatabaseError):
    """The file was written by a newer keras_nbguard: refuse it rather than damage it."""


def prepare(db: sqlite3.Connection, path: str, on_disk: bool) -> None:
    """WAL and the current schema, writing (and locking) only what needs it."""
    if on_disk:
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            to_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")
    if not current(db):
        migrate(db, path)


def current(db: sqlite3.Connection) -> bool:
    """Whether the file is ours at this schema, indexed and marked: then opening it writes
    nothing and takes no lock."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        index = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs_by_label'").fetchone()
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
    except sqlite3.Error:
        return False
    return (
        bool(row) and row[0] == str(SCHEMA_VERSION) and bool(index) and (app_id == APPLICATION_ID)
    )


def migrate(db: sqlite3.Connection, path: str) -> None:
    """Create the tables of a new file, or bring an older one up to ``SCHEMA_VERSION``."""
    db.execute("BEGIN IMMEDIATE")  # two kernels opening a new file at once: one creates it
    try:
        has_meta = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()
        version = None
        if has_meta:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            version = int(row[0]) if row else None
        if version is not None and version > SCHEMA_VERSION:
            raise NewerDatabase(
                f"run history database {path} was written by a newer keras_nbguard (schema "
                f"{version}, this one knows {SCHEMA_VERSION}); it is left untouched and "
                f"history is kept in memory. Upgrade keras_nbguard, or set {ENV_PATH}."
            )
        while version is not None and version < SCHEMA_VERSION:
            for statement in MIGRATIONS[version].split(";\n"):
                db.execute(statement)
            version += 1
        if version is None:  # a new file (executescript would commit our transaction)
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
        db.execute(LABEL_INDEX)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def to_wal(db: sqlite3.Connection, tries: int = 50) -> None:
    """``PRAGMA journal_mode = WAL``. Switching takes an exclusive lock and does not wait for the
    busy timeout: while another kernel creates the same new file, it fails at once with
    "database is locked". A few short retries (1 s at most) get past that moment."""
    for attempt in range(tries):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.02)


def copy_runs(source: sqlite3.Connection, target: sqlite3.Connection) -> int:
    """Copy every run, sample, epoch and mark of ``source`` into ``target`` (one transaction),
    column by name: an older file migrated in place has its columns in another order."""
    tables = {
        table: [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
        for table in ("runs", "samples", "epochs", "meta")
    }
    target.execute("BEGIN IMMEDIATE")
    try:
        for table, columns in tables.items():
            if table == "meta":  # the schema row is the target's own; reset marks move over
                rows = source.execute("SELECT key, value FROM meta WHERE key != 'schema'")
            else:
                rows = source.execute(f"SELECT {', '.join(columns)} FROM {table}")
            marks = ", ".join("?" for _ in columns)
            target.executemany(
                f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                rows.fetchall(),
            )
        target.execute("COMMIT")
    except BaseException:
        target.execute("ROLLBACK")
        raise
    return int(source.execute("SELECT count(*) FROM runs").fetchone()[0])


# -- reading ------------------------------------------------------------------------------------
def open_read_only(path: str) -> sqlite3.Connection:
    """``path`` in SQLite's read-only mode, checked: ``Unreadable`` if it is missing, not a
    history of ours or newer than this code. Opening it can't create, migrate or lock it."""
    if path == ":memory:" or not os.path.isfile(path):
        raise Unreadable(
            f"No run history yet: {path} does not exist. It is created by the first "
            f"%%kerasrun of a kernel that loaded keras_nbguard (set {ENV_PATH} to "
            f"read another file)."
        )
    try:
        db = sqlite3.connect(
            f"{Path(path).absolute().as_uri()}?mode=ro",
            uri=True,
            timeout=5,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise Unreadable(f"The run history {path} can't be opened ({exc}).") from exc
    try:
        _check_readable(db, path)
    except BaseException:
        db.close()
        raise
    return db


def _check_readable(db: sqlite3.Connection, path: str) -> None:
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not tables:  # what a kernel's Store starts from, too
            raise Unreadable(f"No runs recorded yet: {path} is empty.")
        if not {"meta", "runs"} <= tables:
            raise Unreadable(f"{path} is not a keras_nbguard run history (no runs table).")
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise Unreadable(
            f"The run history {path} can't be read ({exc}). The next kernel that "
            f"loads keras_nbguard moves a corrupt file aside and starts a new "
            f"one."
        ) from exc
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise Unreadable(
            f"The run history {path} was written by a newer keras_nbguard (schema "
            f"{version}; this code knows {SCHEMA_VERSION}): upgrade keras_nbguard "
            f"where it reads the file."
        )


def select_runs(
    db: sqlite3.Connection,
    where: str = "",
    params: tuple[Any, ...] = (),
    samples: bool = True,
    order: str = "started_at",
) -> list[sqlite3.Row]:
    """Run rows (``sqlite3.Row``: by column name), with ``record`` the JSON of finished ones.
    ``samples``: with their RSS series; without, SQLite drops it from each JSON (in C): parsing
    it was most of the time a page with thousands of runs took."""
    has_cell = any(col[1] == "cell_id" for col in db.execute("PRAGMA table_info(runs)"))
    columns = RUN_COLUMNS.format(cell_id="cell_id" if has_cell else "NULL AS cell_id")
    record = "record" if samples else "json_remove(record, '$.rss_samples') AS record"
    cursor = db.execute(f"SELECT {columns}, {record} FROM runs {where} ORDER BY {order}", params)
    cursor.row_factory = sqlite3.Row
    return cursor.fetchall()


def run_record(db: sqlite3.Connection, row: sqlite3.Row, status: str | None = None) -> RunRecord:
    """The record of a run row: the stored one if it finished, else what the rows written during
    the run tell (it is running, or died). ``status``: the one to show, if not the stored one."""
    if row["record"]:
        # the pid column is the truth (a record built without a pid stores "pid": null)
        return RunRecord.from_dict({**json.loads(row["record"]), "pid": row["pid"]})
    shown = status or row["status"]
    samples = db.execute(
        "SELECT t, rss FROM samples WHERE run_id = ? ORDER BY t", (row["id"],)
    ).fetchall()  # as stored: no storable() again
    rss = row["last_rss"]
    return RunRecord(
        label=text(row["label"]),
        status=shown,
        started_at=row["started_at"],
        wall_seconds=row["updated_at"] - row["started_at"],
        fit_seconds=None,
        fits=(),
        rss_before=samples[0][1] if samples else None,
        rss_after=rss,
        rss_peak=max((s[1] for s in samples), default=rss),
        gpu=GpuReading(reason=f"not recorded: the run {shown}"),
        cleared=False,
        traces=None,
        run_number=row["run_number"],
        rss_samples=RssSamples(samples),
        notebook=text(row["notebook"]),
        cell_id=text(row["cell_id"]),
        kernel_id=text(row["kernel_id"]),
        pid=row["pid"],
    )
