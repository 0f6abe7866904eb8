"""The run history's database schema: tables, the version, migrations, and opening a file so
that only a new or older one takes the write lock (another kernel may hold it for a while)."""

from __future__ import annotations

import sqlite3
import time

from .dbfile import APPLICATION_ID

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
RUN_COLUMNS = ("SELECT id, notebook, cell_id, label, run_number, kernel_id, started_at, "
               "updated_at, status, last_rss, record, pid FROM runs")
# Schema 1 had no cell ids and no per-epoch table.
MIGRATIONS = {1: "ALTER TABLE runs ADD COLUMN cell_id TEXT;\n"
                 "CREATE TABLE IF NOT EXISTS epochs (run_id TEXT, epoch INTEGER, seconds REAL);"}


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
    return bool(row) and row[0] == str(SCHEMA_VERSION) and bool(index) and (
        app_id == APPLICATION_ID)


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
                f"history is kept in memory. Upgrade keras_nbguard, or set {ENV_PATH}.")
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
    tables = {table: [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
              for table in ("runs", "samples", "epochs", "meta")}
    target.execute("BEGIN IMMEDIATE")
    try:
        for table, columns in tables.items():
            if table == "meta":  # the schema row is the target's own; reset marks move over
                rows = source.execute("SELECT key, value FROM meta WHERE key != 'schema'")
            else:
                rows = source.execute(f"SELECT {', '.join(columns)} FROM {table}")
            marks = ", ".join("?" for _ in columns)
            target.executemany(f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) "
                               f"VALUES ({marks})", rows.fetchall())
        target.execute("COMMIT")
    except BaseException:
        target.execute("ROLLBACK")
        raise
    return int(source.execute("SELECT count(*) FROM runs").fetchone()[0])

