"""The one thread that writes the run history, so that a cell never waits on the disk.

A run's start and end (a few rows) are written on the calling thread instead (the cell's, or the
kernel's right after the cell's reply: session/later.py), through a connection of their own that
never waits: waking this thread costs a short cell more (it takes the interpreter lock at the
cell's next system calls: +0.35 ms a cell in a kernel, bench_core.py) than the write itself.
Anything that would make that connection wait (a lock another process holds, rows of the
writer's still going, a disk slower than ``SLOW_DIRECT_SECONDS`` a few times in a row) and the
rows go to the thread as before.

Statements are queued from any thread and written one transaction per batch. While another
process holds a lock on the database, or the disk is full, the batch is kept (with whatever is
queued meanwhile) and tried again after a pause: no run is dropped, and once it clears everything
is written, with one warning when it starts and one when it is over. A write that can never
succeed is rolled back and costs only its own figures: the rest of its batch, and the batches after
it, still land. Any Python string is stored (schema.storable escapes what SQLite can't hold).
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from keras_nbguard.store.schema import storable

RETRY_SECONDS = (0.05, 0.2, 1.0, 2.0)  # the pauses while a lock or a full disk lasts
SLOW_DIRECT_SECONDS = 0.005  # direct writes slower than this, SLOW_IN_A_ROW times in a row (a
SLOW_IN_A_ROW = (
    3  # network home; one alone is a hiccup: a first write here took 6 ms): the thread's
)
CHECKPOINT_EVERY = 100  # direct writes between two checkpoints (that connection makes none)
Statement = tuple[str, tuple[Any, ...]]  # SQL (or one of _apply's names) and its values
Entry = Statement | None  # None: stop
StartRow = tuple[Any, ...]  # a run's START_SQL values

START_SQL = (
    "INSERT INTO runs (id, notebook, cell_id, label, run_number, kernel_id, pid, pid_started, "
    "started_at, updated_at, last_rss, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')"
)
# A run whose start was still held at its end: the whole row in one statement
WHOLE_RUN_SQL = (
    "INSERT INTO runs (id, notebook, cell_id, label, run_number, kernel_id, pid, pid_started, "
    "started_at, updated_at, last_rss, status, record) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class Writer:
    def __init__(
        self, db: sqlite3.Connection, lock: threading.Lock, warn: Callable[[str], object]
    ) -> None:
        self.db = db
        self._lock = lock  # shared with the store's migrations on the same connection
        self._warn = warn
        self._queue: queue.Queue[Entry] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._waiting = False  # waiting for a lock or disk space to clear
        self._retries = 0
        self.closed = False
        # The cell's own connection for a run's start and end (None: in memory, or turned off)
        self.direct: sqlite3.Connection | None = None
        self._direct_lock = threading.Lock()
        self._direct_writes = 0
        self._slow_in_a_row = 0

    def write_now(self, entries: list[Statement]) -> None:
        """``entries`` in one transaction on the calling thread when nothing would make it wait
        (see the module's docstring), else submitted to the thread."""
        if not self._written_directly(entries):
            for sql, params in entries:
                self.submit(sql, params)

    def submit(self, sql: str, params: tuple[Any, ...]) -> None:
        if self.closed:  # a store closed on unload: its session writes no more
            return
        self._queue.put((sql, params))
        self._ensure_thread()

    def call(self, step: Callable[[], None]) -> None:
        """Run ``step`` on the writer thread once what came before it is written, outside any
        transaction: nothing is written meanwhile, and no cell waits for it."""
        self.submit("call", (step,))

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (``timeout`` at most) until everything submitted so far is committed."""
        if self.closed or not self._queue.unfinished_tasks:  # all of it is (or no thread ran)
            return
        done = threading.Event()
        self.submit("flush", (done,))
        done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then end the thread (``timeout`` at most while a lock lasts)."""
        with self._lock:
            self.closed = True  # no thread is started after this
        self.close_direct()
        if self._thread is not None:
            atexit.unregister(self.flush)
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._warn(
                    f"run history: the database stayed locked for {timeout:.0f} s; what "
                    f"was still queued stays in memory only"
                )

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self.closed:
                    self._thread = threading.Thread(
                        target=self._loop, daemon=True, name="keras-nbguard-store"
                    )
                    self._thread.start()
                    # The thread is a daemon: without this, a kernel shut down (or a script
                    # ending) right after a run would lose its result, and the next load would
                    # call that run "died".
                    atexit.register(self.flush)

    def _written_directly(self, entries: list[Statement]) -> bool:
        db = self.direct
        # The thread's rows first: a run's end must not land before its samples still queued.
        if db is None or self._waiting or self._queue.unfinished_tasks:
            return False
        if not self._direct_lock.acquire(blocking=False):
            return False
        try:
            if self.closed or self.direct is not db:
                return False
            batch = [_serialized(e) for e in entries]  # (a long run's record: ~1 ms of JSON)
            started = time.perf_counter()
            try:
                only = batch[0] if len(batch) == 1 else None
                if only is not None and only[0] != "samples":
                    self._apply(db, *only)  # one statement: atomic as it is, no BEGIN/COMMIT
                else:
                    self._write_in(db, batch)
            except Exception:  # locked, full, or a bug: the thread tries (and warns) as before
                return False
            slow = time.perf_counter() - started > SLOW_DIRECT_SECONDS
            self._slow_in_a_row = self._slow_in_a_row + 1 if slow else 0
            if self._slow_in_a_row >= SLOW_IN_A_ROW:
                self.direct = None  # the disk is slow: the cell no longer waits on it
                db.close()
            self._direct_writes += 1
            if self._direct_writes % CHECKPOINT_EVERY == 0:
                self.call(self._checkpoint)
            return True
        finally:
            self._direct_lock.release()

    def _checkpoint(self) -> None:
        """Copy the log's pages into the database file and empty the log (the direct connection
        never checkpoints). TRUNCATE waits for readers to leave the log, so the next write starts
        it anew: a PASSIVE one raced with the cell's next write, and the log grew by every run."""
        with self._lock:  # (its row fetched: a statement left stepping would hold a snapshot)
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def close_direct(self) -> None:
        with self._direct_lock:
            db, self.direct = self.direct, None
        if db is not None:
            db.close()

    def _loop(self) -> None:
        batch: list[Entry] = []
        while True:
            if not batch:
                batch.append(self._queue.get())
            while not self._queue.empty():  # one transaction for whatever piled up
                batch.append(self._queue.get())
            # ...up to the first ``call``, which runs once what came before it is written
            cut = next(
                (i for i, entry in enumerate(batch) if entry is not None and entry[0] == "call"),
                len(batch),
            )
            head = batch[:cut]
            try:
                if head and not self._write(head):  # (a call first: no empty transaction)
                    batch[:cut] = head  # kept: tried again, with what came meanwhile
                    continue
            except Exception as exc:  # a bug of ours must not end the writer for good
                self._warn(
                    f"run history write failed ({type(exc).__name__}: {exc}); those "
                    f"figures stay in memory only"
                )
            for _ in head:  # done with: a direct write may go now (see _written_directly)
                self._queue.task_done()
            if any(entry is None for entry in head):
                return
            if cut < len(batch):
                self._run(batch[cut])
                self._queue.task_done()
            batch = batch[cut + 1 :]

    def _run(self, entry: Entry) -> None:
        assert entry is not None
        try:
            entry[1][0]()
        except Exception as exc:
            self._warn(f"run history: {type(exc).__name__}: {exc}")

    def _write(self, batch: list[Entry]) -> bool:
        """One transaction for ``batch``; False when it must be tried again (a lock held by
        another process, a full disk), True when it is written or never can be."""
        # Records are serialized before the lock and the write transaction are taken: a long
        # run's RSS series takes a while, and readers (the next run's begin) would wait on it.
        batch[:] = [_serialized(e) for e in batch]
        try:
            waiting = self._transaction(batch)
        except Exception as exc:
            if isinstance(exc, sqlite3.Error) and _passing(exc):
                return self._pause(exc)
            waiting = self._one_by_one(batch)
        self._retries = 0
        if self._waiting:
            self._waiting = False
            self._warn(
                "run history: the database can be written again; the runs that waited "
                "are on disk now"
            )
        for event in waiting:
            event.set()
        return True

    def _transaction(self, batch: list[Entry]) -> list[threading.Event]:
        with self._lock:
            return self._write_in(self.db, batch)

    def _write_in(self, db: sqlite3.Connection, batch: list[Entry]) -> list[threading.Event]:
        """``batch`` in one transaction, rolled back whatever goes wrong: a transaction left
        open would make every later batch fail ("cannot start a transaction within a
        transaction")."""
        waiting: list[threading.Event] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for entry in batch:
                if entry is not None:
                    waiting.extend(self._apply(db, *entry))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        return waiting

    def _one_by_one(self, batch: list[Entry]) -> list[threading.Event]:
        """After a failure that won't pass: each entry in a transaction of its own, so that
        only the one SQLite refuses is lost (with a warning), not the runs written with it."""
        waiting: list[threading.Event] = []
        failed: list[str] = []
        for entry in batch:
            if entry is None:
                continue
            try:
                waiting.extend(self._transaction([entry]))
            except Exception as exc:
                what = entry[0] if entry[0] in ("finish", "samples") else entry[0].split(" (")[0]
                failed.append(f"{what}: {type(exc).__name__}: {exc}")
        if failed:  # one warning for the batch
            self._warn(
                f"run history: {len(failed)} write(s) failed ({failed[0]}"
                f"{' ...' if len(failed) > 1 else ''}); those figures stay in memory "
                f"only, the rest is written"
            )
        return waiting

    def _apply(
        self, db: sqlite3.Connection, sql: str, params: tuple[Any, ...]
    ) -> list[threading.Event]:
        if sql == "flush":
            return [params[0]]
        if sql in ("finish", "run"):
            what, record, payload = params
            if payload is None:  # the record could not be serialized (see _serialized)
                raise ValueError("the run's record could not be written as JSON")
        if sql == "run":  # (start row, record): started and finished, as one row
            start: StartRow = what
            db.execute(
                WHOLE_RUN_SQL,
                storable((*start[:-2], time.time(), record.rss_after, record.status, payload)),
            )
        elif sql == "finish":
            run_id = what
            db.execute(
                "UPDATE runs SET status = ?, updated_at = ?, last_rss = ?, record = ? WHERE id = ?",
                storable((record.status, time.time(), record.rss_after, payload, run_id)),
            )
        elif sql == "samples":
            run_id, samples = params
            db.executemany(
                "INSERT INTO samples VALUES (?, ?, ?)", [(run_id, t, rss) for t, rss in samples]
            )
            # the time of the last sample seen, not of this write: a died run's duration
            db.execute(
                "UPDATE runs SET updated_at = started_at + ?, last_rss = ? WHERE id = ?",
                (samples[-1][0], samples[-1][1], run_id),
            )
        else:
            db.execute(sql, storable(params))
        return []

    def _pause(self, exc: sqlite3.Error) -> bool:
        if not self._waiting:
            self._waiting = True
            self._warn(
                f"run history: the database can't be written for now ({exc}: another "
                f"process holding a lock, or a full disk); runs go on and are written as "
                f"soon as it can be"
            )
        time.sleep(RETRY_SECONDS[min(self._retries, len(RETRY_SECONDS) - 1)])
        self._retries += 1
        return False


def _serialized(entry: Entry) -> Entry:
    """A ``finish`` or ``run`` entry with its record as JSON (ASCII: any label fits); None as
    the JSON when the record can't be serialized, so that only that entry fails."""
    if entry is None or entry[0] not in ("finish", "run") or len(entry[1]) != 2:
        return entry
    what, record = entry[1]
    payload: str | None = None
    for _ in range(3):
        try:
            payload = record.to_json()
            break
        except (TypeError, ValueError):
            break  # the record itself can't be JSON: trying again won't change that
        except Exception:
            # A heap scan on another thread (gc.get_objects / get_referrers: the leak finder's,
            # or the user's) caught asdict's tuples half-built (CPython raised SystemError);
            # to_json builds none, but whatever is transient is tried again, and never takes
            # the batch with it.
            continue
    return (entry[0], (what, record, payload))


def _passing(exc: sqlite3.Error) -> bool:
    """A failure that goes away by itself: a lock another process holds, a full disk."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and any(
        word in text for word in ("locked", "busy", "full", "disk i/o")
    )
