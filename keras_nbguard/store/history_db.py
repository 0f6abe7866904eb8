"""Run history in SQLite, written as runs go, so it survives kernel restarts and kernel deaths.

Writes go through one background thread (writer.py: a cell never waits on the disk, nor on a
lock another process holds) that gets a run's samples as it goes (feed.py); a kernel killed
mid-run therefore leaves its run with its last samples. Reads have a connection of their own.
Nothing here raises into a cell: only our own file is used (dbfile.py), a corrupt one is moved
aside, an unwritable or newer one gives way to an in-memory store, each with one warning. When
the file was only out of reach for a while (a lock held while it needed setting up, a folder not
writable yet), the store tries it again now and then and moves what it kept in memory there.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from keras_nbguard.records.run import RunKey, RunRecord
from keras_nbguard.store.dbfile import NotOurs, file_owner
from keras_nbguard.store.died import DiedRun
from keras_nbguard.store.schema import (
    ENV_PATH,
    NewerDatabase,
    copy_runs,
    db_name,
    prepare,
    run_record,
    select_runs,
    storable,
    text,
)
from keras_nbguard.store.writer import START_SQL, StartRow, Statement, Writer

WRITE_TIMEOUT = 2.0  # one try of the writer thread (it tries again while a lock lasts)
READ_TIMEOUT = 0.5  # seconds a cell's read may wait (only a schema change ever blocks a WAL read)
MEMORY = ":memory:"
RESET_KEY = "reset "  # meta key, + the notebook: when its history was last reset
LABEL_RESET_KEY = "reset label "  # + JSON [notebook, label]: when that label's runs were
DISK_RETRY_SECONDS = 30.0  # how often a store that fell back to memory tries its file again


def default_path() -> str:
    if os.environ.get(ENV_PATH):
        return os.environ[ENV_PATH]
    from jupyter_core.paths import jupyter_data_dir

    return os.path.join(jupyter_data_dir(), "keras_nbguard", "runs.sqlite")


class Store:
    def __init__(
        self, path: str | None = None, warn: Callable[[str], object] | None = None
    ) -> None:
        self._warn = warn or (lambda message: None)
        self.path = path or default_path()
        self.wanted: str | None = None  # the file to go back to, after a passing failure
        self._next_try = time.monotonic() + DISK_RETRY_SECONDS
        self._lock = threading.Lock()  # the writer's connection
        self.closed = False
        self.db = self._open(self.path)
        self.writer = Writer(self.db, self._lock, self._warn)
        self.writer.direct = self._direct_for(self.path)
        self._reader, self._read_lock = self._reader_for(self.db)

    def _direct_for(self, path: str) -> sqlite3.Connection | None:
        """The connection a run's start and end are written on from the cell's thread
        (writer.py): it never waits for a lock (an error instead, and the writer thread takes
        the rows) and never checkpoints (the writer thread does, now and then)."""
        if path == MEMORY:  # one database per connection: the writer's is the only one
            return None
        try:
            db = sqlite3.connect(
                db_name(path), check_same_thread=False, timeout=0, isolation_level=None
            )
        except sqlite3.Error:
            return None
        try:
            db.execute("PRAGMA synchronous = NORMAL")  # as the writer's: no fsync per commit
            db.execute("PRAGMA wal_autocheckpoint = 0")
        except sqlite3.Error:
            db.close()
            return None
        return db

    def _reader_for(self, db: sqlite3.Connection) -> tuple[sqlite3.Connection, threading.Lock]:
        """Reads have a connection of their own: in WAL mode they never wait for a writer, so
        a cell that asks for its previous run never waits behind our writer thread stuck on
        another process's lock (in memory, there is only the one database)."""
        if not self.in_memory:
            try:
                return (
                    sqlite3.connect(
                        db_name(self.path),
                        check_same_thread=False,
                        timeout=READ_TIMEOUT,
                        isolation_level=None,
                    ),
                    threading.Lock(),
                )
            except sqlite3.Error:
                pass
        return db, self._lock

    # -- opening, whatever state the file is in --------------------------------------------------
    def _open(self, path: str) -> sqlite3.Connection:
        if path == MEMORY:
            return self._connect(MEMORY)
        try:
            return self._open_ours(path)
        except (NewerDatabase, NotOurs) as exc:
            self._warn(str(exc))
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                aside = f"{path}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
                try:
                    os.replace(path, aside)
                    self._warn(
                        f"run history database {path} was corrupt ({exc}); moved it to "
                        f"{aside} and started a new one"
                    )
                    return self._connect(path)
                except (OSError, sqlite3.Error) as again:
                    self._warn(
                        f"run history database {path} is corrupt and could not be "
                        f"replaced ({again}); keeping history in memory"
                    )
            else:
                self._fell_back(path, exc)
        except OSError as exc:
            self._fell_back(path, exc)
        except UnicodeError as exc:  # a name no file system can take: it won't get better
            self._warn(f"run history can't be kept in {path!r} ({exc}); keeping it in memory")
        self.path = MEMORY
        return self._connect(MEMORY)

    def _fell_back(self, path: str, exc: Exception) -> None:
        self.wanted = path
        self._warn(
            f"run history can't be written to {path} for now ({exc}); keeping it in "
            f"memory, and trying the file again every {DISK_RETRY_SECONDS:.0f} s"
        )

    def _open_ours(self, path: str) -> sqlite3.Connection:
        """``path`` opened and set up, or an exception (it is ours, or new)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # user-only from birth
        owner = file_owner(path)
        if owner is not None:
            raise NotOurs(
                f"{path} is {owner}, not a keras_nbguard run history: it is left "
                f"untouched and history is kept in memory this session; set "
                f"{ENV_PATH} or %nbguard config --db to a file of its own"
            )
        return self._connect(path)

    def _connect(self, path: str) -> sqlite3.Connection:
        db = sqlite3.connect(
            db_name(path), check_same_thread=False, timeout=WRITE_TIMEOUT, isolation_level=None
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {int(WRITE_TIMEOUT * 1000)}")
            prepare(db, path, on_disk=path != MEMORY)
        except BaseException:
            db.close()
            raise
        return db

    @property
    def in_memory(self) -> bool:
        return self.path == MEMORY

    def try_disk(self, then: Callable[[], None]) -> None:
        """After a passing failure: now and then, try the file again (on the writer thread, so
        no cell waits); once it opens, everything kept in memory moves there, and ``then``."""
        if self.wanted is None or time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + DISK_RETRY_SECONDS
        self.writer.call(lambda: self._back_to_disk(then))

    def _back_to_disk(self, then: Callable[[], None]) -> None:
        path = self.wanted
        if path is None:
            return
        try:
            disk = self._open_ours(path)
        except (OSError, sqlite3.Error):  # still out of reach (NotOurs: someone else's now)
            return
        try:  # on the writer thread: nothing is written to the memory database meanwhile
            count = copy_runs(self.db, disk)
        except sqlite3.Error:
            disk.close()
            return
        with self._lock:
            memory, self.db, self.writer.db = self.db, disk, disk
            self.path, self.wanted = path, None
            self._reader, self._read_lock = self._reader_for(disk)
        self.writer.direct = self._direct_for(path)
        memory.close()
        self._warn(
            f"run history: {path} can be written again; the {count} run(s) kept in "
            f"memory meanwhile are in it now"
        )
        then()

    # -- writing (from any thread: a run's start and end on it, the rest on the writer thread) -----
    def run_started(self, row: StartRow) -> None:
        """A run's start row (``start_row``), written now: a run's feed holds it instead."""
        self.writer.write_now([(START_SQL, row)])

    # ``start``: the run's start row, when still held by its feed: written first
    def add_samples(
        self, run_id: str, samples: Sequence[tuple[float, int]], start: StartRow | None = None
    ) -> None:
        rows = _started(start) + ([("samples", (run_id, list(samples)))] if samples else [])
        for sql, params in rows:
            self._submit(sql, params)

    def add_epoch(
        self, run_id: str, epoch: int, seconds: float, start: StartRow | None = None
    ) -> None:
        for sql, params in [
            *_started(start),
            ("INSERT INTO epochs VALUES (?, ?, ?)", (run_id, epoch, seconds)),
        ]:
            self._submit(sql, params)

    def run_finished(
        self,
        run_id: str,
        record: RunRecord | None,
        last_samples: Sequence[tuple[float, int]] = (),
        start: StartRow | None = None,
    ) -> None:
        """The run's end, written at once (on the calling thread when it can:
        writer.py). With a record: one statement, the whole row when its start is still held;
        ``last_samples`` are not kept then, since a finished run is read from its record
        (schema.run_record). ``record`` None (none could be made): the row keeps its start and
        samples."""
        if record is not None:
            end = ("run", (start, record)) if start is not None else ("finish", (run_id, record))
            self.writer.write_now([end])
            return
        rows = _started(start) + (
            [("samples", (run_id, list(last_samples)))] if last_samples else []
        )
        if rows:
            self.writer.write_now(rows)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything submitted so far is committed (``timeout`` at most)."""
        self.writer.flush(timeout)

    def _submit(self, sql: str, params: tuple[Any, ...]) -> None:
        self.writer.submit(sql, params)

    def close(self) -> None:
        """Write what is queued, end the writer thread, close every connection (and so every
        file). Once closed, writes are dropped and reads find nothing; closing again is a
        no-op."""
        if self.closed:
            return
        self.writer.close()
        with self._read_lock:  # a read going on ends first (in memory: the writer's lock too)
            self.closed = True
            if self._reader is not self.db:
                self._reader.close()
        with self._lock:
            self.db.close()

    # -- reading -------------------------------------------------------------------------------
    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            if self.closed:
                return []
            return self._reader.execute(sql, storable(params)).fetchall()

    def _records(
        self,
        where: str,
        params: tuple[Any, ...],
        order: str = "started_at",
        keep: Callable[[sqlite3.Row], bool] = lambda row: True,
    ) -> list[RunRecord]:
        with self._read_lock:
            if self.closed:
                return []
            return [
                run_record(self._reader, row)
                for row in select_runs(self._reader, where, storable(params), order=order)
                if keep(row)
            ]

    def last_run(self, notebook: str, label: str, before: float) -> RunRecord | None:
        """The newest finished or died run of ``label`` in ``notebook`` started before
        ``before`` (runs still going don't count), or None."""
        records = self._records(
            "WHERE notebook = ? AND label = ? AND started_at < ? AND status != 'running'",
            (notebook, label, before),
            order="started_at DESC LIMIT 1",
        )
        return records[0] if records else None

    def runs(
        self, notebook: str | None = None, kernel_id: str | None = None, before: float | None = None
    ) -> list[RunRecord]:
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
        return self._records(
            "WHERE " + " AND ".join(where) if where else "",
            tuple(params),
            keep=lambda row: row["status"] != "running" or row["kernel_id"] == kernel_id,
        )

    def reset_mark(self, notebook: str) -> float | None:
        """When the notebook's history was last reset (runs before it are hidden); None."""
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (RESET_KEY + notebook,))
        return float(rows[0][0]) if rows else None

    def label_reset_marks(self, notebook: str) -> dict[str, float]:
        """When each label of the notebook was last reset on its own (``reset --label``)."""
        rows = self._rows(
            "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?",
            (len(LABEL_RESET_KEY), LABEL_RESET_KEY),
        )
        marks = {}
        for key, value in rows:
            try:
                where, label = json.loads(key[len(LABEL_RESET_KEY) :])
            except ValueError:
                continue
            if where == notebook:
                marks[label] = float(value)
        return marks

    def set_reset_mark(self, notebook: str, at: float | None, label: str | None = None) -> None:
        """Keep (``at``) or drop (None) the notebook's reset mark, or one label's."""
        key = (
            RESET_KEY + notebook
            if label is None
            else LABEL_RESET_KEY + json.dumps([notebook, label])
        )  # ASCII: any label fits
        if at is None:
            self._submit("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self._submit("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, repr(at)))

    def mark_dead_runs(
        self, alive: Callable[[int, float], bool], notebook: str | None = None
    ) -> list[DiedRun]:
        """Runs left 'running' by processes that are gone (of ``notebook``, or all): mark them
        died and say so."""
        rows = self._rows(
            "SELECT id, label, run_number, pid, pid_started, started_at, "
            "updated_at, last_rss FROM runs WHERE status = 'running'"
            + ("" if notebook is None else " AND notebook = ?"),
            () if notebook is None else (notebook,),
        )
        died = []
        for run_id, label, number, pid, pid_started, started, updated, rss in rows:
            if alive(pid, pid_started):
                continue
            # written by the writer thread: %load_ext never waits on a lock for it
            self._submit(
                "UPDATE runs SET status = 'died' WHERE id = ? AND status = 'running'", (run_id,)
            )
            died.append(DiedRun(text(label), number, updated - started, rss, pid))
        if died:  # rare: wait a moment, so that reads right after see them as died
            self.flush(READ_TIMEOUT)
        return died


def _started(start: StartRow | None) -> list[Statement]:
    return [] if start is None else [(START_SQL, start)]


def start_row(
    run_id: str, key: RunKey, label: str, run_number: int, started_at: float, rss: int | None
) -> StartRow:
    """The values of a run's row as it starts (``status`` 'running' until its end)."""
    return (
        run_id,
        key.notebook,
        key.cell_id,
        label,
        run_number,
        key.kernel_id,
        key.pid,
        key.pid_started,
        started_at,
        started_at,
        rss,
    )
