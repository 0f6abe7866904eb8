"""Run history in SQLite, written as runs go, so it survives kernel restarts and kernel deaths.

Writes go through one background thread (a cell never waits on the disk) that commits at least
every ``FLUSH_SECONDS``; a kernel killed mid-run therefore leaves its run with its last samples.
Nothing here raises into a cell: a corrupt database is moved aside, an unwritable or newer one
gives way to an in-memory store, each with one warning.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dbfile import APPLICATION_ID, NotOurs, file_owner
from .records import RunRecord, fmt_bytes, fmt_seconds

SCHEMA_VERSION = 2
ENV_PATH = "KERAS_NBGUARD_DB"
FLUSH_SECONDS = 0.25  # a kernel killed 0.7 s into a run still leaves 0.5 s of its samples
SAMPLE_STEP = 0.1  # seconds between stored RSS samples (the record keeps the full series)
MEMORY = ":memory:"

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


def default_path() -> str:
    if os.environ.get(ENV_PATH):
        return os.environ[ENV_PATH]
    from jupyter_core.paths import jupyter_data_dir

    return os.path.join(jupyter_data_dir(), "keras_nbguard", "runs.sqlite")


@dataclass(frozen=True)
class RunKey:
    """Where a run happens: the notebook (or script), the cell, the kernel and its process."""

    notebook: str
    cell_id: str | None
    kernel_id: str
    pid: int
    pid_started: float


@dataclass(frozen=True)
class DiedRun:
    label: str
    run_number: int
    seconds: float
    last_rss: int | None
    pid: int

    def text(self) -> str:
        return (f"keras_nbguard: run {self.label!r} #{self.run_number} died: the kernel (pid "
                f"{self.pid}) was killed {fmt_seconds(self.seconds)} into the run; last RSS seen "
                f"{fmt_bytes(self.last_rss)}. An out-of-memory kill is the usual cause.")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())


class Store:
    def __init__(self, path: str | None = None, warn: Callable[[str], None] | None = None) -> None:
        self._warn = warn or (lambda message: None)
        self.path = path or default_path()
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self.db = self._open(self.path)

    # -- opening, whatever state the file is in --------------------------------------------------
    def _open(self, path: str) -> sqlite3.Connection:
        if path == MEMORY:
            return self._connect(MEMORY)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            if not os.path.exists(path):
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # user-only from birth
            owner = file_owner(path)
            if owner is not None:
                raise NotOurs(f"{path} is {owner}, not a keras_nbguard run history: it is left "
                              f"untouched and history is kept in memory this session; set "
                              f"{ENV_PATH} or %nbguard config --db to a file of its own")
            return self._connect(path)
        except (NewerDatabase, NotOurs) as exc:
            self._warn(str(exc))
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                aside = f"{path}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
                try:
                    os.replace(path, aside)
                    self._warn(f"run history database {path} was corrupt ({exc}); moved it to "
                               f"{aside} and started a new one")
                    return self._connect(path)
                except (OSError, sqlite3.Error) as again:
                    self._warn(f"run history database {path} is corrupt and could not be "
                               f"replaced ({again}); keeping history in memory")
            else:
                self._warn(f"run history can't be written to {path} ({exc}); keeping it in "
                           f"memory this session")
        except OSError as exc:
            self._warn(f"run history can't be written to {path} ({exc}); keeping it in memory "
                       f"this session")
        self.path = MEMORY
        return self._connect(MEMORY)

    def _connect(self, path: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, check_same_thread=False, timeout=10, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout = 10000")
            if path != MEMORY:
                _to_wal(db)
                db.execute("PRAGMA synchronous = NORMAL")
            self._migrate(db, path)
        except BaseException:
            db.close()
            raise
        return db

    def _migrate(self, db: sqlite3.Connection, path: str) -> None:
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

    @property
    def in_memory(self) -> bool:
        return self.path == MEMORY

    # -- writing (from any thread; done by the writer thread) -------------------------------------
    def run_started(self, run_id: str, key: RunKey, label: str, run_number: int,
                    started_at: float, rss: int | None) -> None:
        self._submit("INSERT INTO runs (id, notebook, cell_id, label, run_number, kernel_id, pid, "
                     "pid_started, started_at, updated_at, status, last_rss) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                     (run_id, key.notebook, key.cell_id, label, run_number, key.kernel_id,
                      key.pid, key.pid_started, started_at, started_at, rss))

    def add_samples(self, run_id: str, samples: list[tuple[float, int]]) -> None:
        if samples:
            self._submit("samples", (run_id, samples))

    def add_epoch(self, run_id: str, epoch: int, seconds: float) -> None:
        self._submit("INSERT INTO epochs VALUES (?, ?, ?)", (run_id, epoch, seconds))

    def run_finished(self, run_id: str, record: RunRecord) -> None:
        # serialized on the writer thread: the cell does not wait for the JSON either
        self._submit("finish", (run_id, record))

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything submitted so far is committed."""
        done = threading.Event()
        self._queue.put(("flush", (done,)))
        self._ensure_writer()
        done.wait(timeout)

    def _submit(self, sql: str, params: tuple[Any, ...]) -> None:
        self._queue.put((sql, params))
        self._ensure_writer()

    def _ensure_writer(self) -> None:
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                                    name="keras-nbguard-store")
                    self._writer.start()
                    # The writer is a daemon: without this, a kernel shut down (or a script
                    # ending) right after a run would lose its result, and the next load would
                    # call that run "died".
                    atexit.register(self.flush)

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while not self._queue.empty():  # one transaction for whatever piled up
                batch.append(self._queue.get())
            self._write(batch)
            if any(entry is None for entry in batch):
                return

    def _write(self, batch: list[tuple[str, tuple[Any, ...]] | None]) -> None:
        waiting = []
        # Records are serialized before the lock and the write transaction are taken: a long
        # run's RSS series takes a while, and readers (the next run's begin) would wait on it.
        batch = [("finish", (e[1][0], e[1][1], json.dumps(e[1][1].to_dict())))
                 if e is not None and e[0] == "finish" else e for e in batch]
        try:
            with self._lock:
                self.db.execute("BEGIN IMMEDIATE")
                for entry in batch:
                    if entry is None:
                        continue
                    sql, params = entry
                    if sql == "flush":
                        waiting.append(params[0])
                    elif sql == "finish":
                        run_id, record, payload = params
                        self.db.execute(
                            "UPDATE runs SET status = ?, updated_at = ?, last_rss = ?, "
                            "record = ? WHERE id = ?",
                            (record.status, time.time(), record.rss_after, payload, run_id))
                    elif sql == "samples":
                        run_id, samples = params
                        self.db.executemany("INSERT INTO samples VALUES (?, ?, ?)",
                                            [(run_id, t, rss) for t, rss in samples])
                        # the time of the last sample seen, not of this write: what a died
                        # run's duration is read from
                        self.db.execute("UPDATE runs SET updated_at = started_at + ?, "
                                        "last_rss = ? WHERE id = ?",
                                        (samples[-1][0], samples[-1][1], run_id))
                    else:
                        self.db.execute(sql, params)
                self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._warn(f"run history write failed ({exc}); those figures stay in memory only")
            try:
                with self._lock:
                    self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        for event in waiting:
            event.set()

    def close(self) -> None:
        if self._writer is not None:
            atexit.unregister(self.flush)
            self._queue.put(None)
            self._writer.join(10)
        self.db.close()

    # -- reading -------------------------------------------------------------------------------
    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.db.execute(sql, params).fetchall()

    def last_run(self, notebook: str, label: str, before: float) -> RunRecord | None:
        """The newest finished or died run of ``label`` in ``notebook`` started before
        ``before`` (runs still going don't count), or None."""
        rows = self._rows(f"{RUN_COLUMNS} WHERE notebook = ? AND label = ? AND started_at < ? "
                          f"AND status != 'running' ORDER BY started_at DESC LIMIT 1",
                          (notebook, label, before))
        return self._record(rows[0]) if rows else None

    def runs(self, notebook: str | None = None, kernel_id: str | None = None,
             before: float | None = None) -> list[RunRecord]:
        """Records oldest first: of one notebook (all kernels) or one kernel, started before
        ``before`` if given; died runs included."""
        where: list[str] = []
        params: list[Any] = []
        if before is not None:
            where.append("started_at < ?")
            params.append(before)
        if notebook is not None:
            where.append("notebook = ?")
            params.append(notebook)
        if kernel_id is not None:
            where.append("kernel_id = ?")
            params.append(kernel_id)
        sql = (RUN_COLUMNS + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY started_at")
        return [self._record(row) for row in self._rows(sql, tuple(params))
                if row[8] != "running" or row[5] == kernel_id]

    def _record(self, row: tuple[Any, ...]) -> RunRecord:
        run_id, status, data, pid = row[0], row[8], row[10], row[11]
        if data:
            # the pid column is the truth (a record built without a pid stores "pid": null)
            return RunRecord.from_dict({**json.loads(data), "pid": pid})
        samples = self._rows("SELECT t, rss FROM samples WHERE run_id = ? ORDER BY t", (run_id,))
        return unfinished_record((*row[1:10], pid), status, samples)

    def mark_dead_runs(self, alive: Callable[[int, float], bool],
                       notebook: str | None = None) -> list[DiedRun]:
        """Runs left 'running' by processes that are gone (of ``notebook``, or all): mark them
        died and say so."""
        rows = self._rows("SELECT id, label, run_number, pid, pid_started, started_at, "
                          "updated_at, last_rss FROM runs WHERE status = 'running'"
                          + ("" if notebook is None else " AND notebook = ?"),
                          () if notebook is None else (notebook,))
        died = []
        for run_id, label, number, pid, pid_started, started, updated, rss in rows:
            if alive(pid, pid_started):
                continue
            with self._lock:
                self.db.execute("UPDATE runs SET status = 'died' WHERE id = ? AND "
                                "status = 'running'", (run_id,))
            died.append(DiedRun(label, number, updated - started, rss, pid))
        return died


class RunFeed:
    """Feeds one run's RSS series to the store: one sample per ``SAMPLE_STEP`` (the largest seen
    in that step, so spikes survive), handed to the writer at most every ``FLUSH_SECONDS``."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._pending: list[tuple[float, int]] = []
        self._window: tuple[float, int] | None = None
        self._last_flush = time.monotonic()

    def on_sample(self, t: float, rss: int) -> None:  # called on the sampler thread
        window = self._window
        if window is None or t - window[0] >= SAMPLE_STEP:
            if window is not None:
                self._pending.append(window)
            self._window = (t, rss)
        elif rss > window[1]:
            self._window = (window[0], rss)
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self._hand_over()

    def on_epoch(self, epoch: int, seconds: float) -> None:
        self._store.add_epoch(self._run_id, epoch, seconds)

    def close(self) -> None:
        if self._window is not None:
            self._pending.append(self._window)
            self._window = None
        self._hand_over()

    def _hand_over(self) -> None:
        pending, self._pending = self._pending, []
        self._last_flush = time.monotonic()
        self._store.add_samples(self._run_id, pending)


class NewerDatabase(sqlite3.DatabaseError):
    """The file was written by a newer keras_nbguard: refuse it rather than damage it."""


def _to_wal(db: sqlite3.Connection, tries: int = 50) -> None:
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


def unfinished_record(row: tuple[Any, ...], status: str,
                      samples: list[tuple[float, int]]) -> RunRecord:
    """What the rows written during a run that never finished tell (it is running, or died).

    ``row``: notebook, cell_id, label, run_number, kernel_id, started_at, updated_at, status (in
    the database), last_rss, pid; ``status``: the one to show."""
    from .records import GpuReading

    notebook, cell_id, label, number, kernel, started, updated, _, rss, pid = row
    return RunRecord(
        label=label, status=status, started_at=started, wall_seconds=updated - started,
        fit_seconds=None, fits=(), rss_before=samples[0][1] if samples else None,
        rss_after=rss, rss_peak=max((s[1] for s in samples), default=rss),
        gpu=GpuReading(reason=f"not recorded: the run {status}"), cleared=False, traces=None,
        run_number=number, rss_samples=tuple((t, r) for t, r in samples), notebook=notebook,
        cell_id=cell_id, kernel_id=kernel, pid=pid)


def process_alive(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started the run (pids get reused)."""
    import psutil

    try:
        process = psutil.Process(pid)
        # a killed kernel its parent has not reaped yet is a zombie: gone, though its pid and
        # create time are still there
        return (abs(process.create_time() - started) < 1.0
                and process.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False
