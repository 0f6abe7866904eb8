"""The one thread that writes the run history, so that a cell never waits on the disk.

Statements are queued from any thread and written one transaction per batch. While another
process holds a lock on the database, or the disk is full, the batch is kept (with whatever is
queued meanwhile) and tried again after a pause: no run is dropped, and once it clears everything
is written, with one warning when it starts and one when it is over.
"""

from __future__ import annotations

import atexit
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

RETRY_SECONDS = (0.05, 0.2, 1.0, 2.0)  # the pauses while a lock or a full disk lasts
Entry = tuple[str, tuple[Any, ...]] | None  # None: stop


class Writer:
    def __init__(self, db: sqlite3.Connection, lock: threading.Lock,
                 warn: Callable[[str], object]) -> None:
        self.db = db
        self._lock = lock  # shared with the store's migrations on the same connection
        self._warn = warn
        self._queue: queue.Queue[Entry] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._waiting = False  # waiting for a lock or disk space to clear
        self._retries = 0

    def submit(self, sql: str, params: tuple[Any, ...]) -> None:
        self._queue.put((sql, params))
        self._ensure_thread()

    def call(self, step: Callable[[], None]) -> None:
        """Run ``step`` on the writer thread once what came before it is written, outside any
        transaction: nothing is written meanwhile, and no cell waits for it."""
        self.submit("call", (step,))

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (``timeout`` at most) until everything submitted so far is committed."""
        done = threading.Event()
        self.submit("flush", (done,))
        done.wait(timeout)

    def close(self) -> None:
        if self._thread is not None:
            atexit.unregister(self.flush)
            self._queue.put(None)
            self._thread.join(10)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, daemon=True,
                                                    name="keras-nbguard-store")
                    self._thread.start()
                    # The thread is a daemon: without this, a kernel shut down (or a script
                    # ending) right after a run would lose its result, and the next load would
                    # call that run "died".
                    atexit.register(self.flush)

    def _loop(self) -> None:
        batch: list[Entry] = []
        while True:
            if not batch:
                batch.append(self._queue.get())
            while not self._queue.empty():  # one transaction for whatever piled up
                batch.append(self._queue.get())
            # ...up to the first ``call``, which runs once what came before it is written
            cut = next((i for i, entry in enumerate(batch)
                        if entry is not None and entry[0] == "call"), len(batch))
            head = batch[:cut]
            try:
                if head and not self._write(head):  # (a call first: no empty transaction)
                    batch[:cut] = head  # kept: tried again, with what came meanwhile
                    continue
            except Exception as exc:  # a bug of ours must not end the writer for good
                self._warn(f"run history write failed ({type(exc).__name__}: {exc}); those "
                           f"figures stay in memory only")
            if any(entry is None for entry in head):
                return
            if cut < len(batch):
                self._run(batch[cut])
            batch = batch[cut + 1:]

    def _run(self, entry: Entry) -> None:
        assert entry is not None
        try:
            entry[1][0]()
        except Exception as exc:
            self._warn(f"run history: {type(exc).__name__}: {exc}")

    def _write(self, batch: list[Entry]) -> bool:
        """One transaction for ``batch``; False when it must be tried again (a lock held by
        another process, a full disk), True when it is written or never can be."""
        waiting = []
        # Records are serialized before the lock and the write transaction are taken: a long
        # run's RSS series takes a while, and readers (the next run's begin) would wait on it.
        batch[:] = [("finish", (e[1][0], e[1][1], json.dumps(e[1][1].to_dict())))
                    if e is not None and e[0] == "finish" and len(e[1]) == 2 else e
                    for e in batch]
        try:
            with self._lock:
                self.db.execute("BEGIN IMMEDIATE")
                for entry in batch:
                    if entry is not None:
                        waiting.extend(self._apply(*entry))
                self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            try:
                with self._lock:
                    self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if _passing(exc):
                return self._pause(exc)
            self._warn(f"run history write failed ({exc}); those figures stay in memory only")
        self._retries = 0
        if self._waiting:
            self._waiting = False
            self._warn("run history: the database can be written again; the runs that waited "
                       "are on disk now")
        for event in waiting:
            event.set()
        return True

    def _apply(self, sql: str, params: tuple[Any, ...]) -> list[threading.Event]:
        if sql == "flush":
            return [params[0]]
        if sql == "finish":
            run_id, record, payload = params
            self.db.execute("UPDATE runs SET status = ?, updated_at = ?, last_rss = ?, "
                            "record = ? WHERE id = ?",
                            (record.status, time.time(), record.rss_after, payload, run_id))
        elif sql == "samples":
            run_id, samples = params
            self.db.executemany("INSERT INTO samples VALUES (?, ?, ?)",
                                [(run_id, t, rss) for t, rss in samples])
            # the time of the last sample seen, not of this write: a died run's duration
            self.db.execute("UPDATE runs SET updated_at = started_at + ?, last_rss = ? "
                            "WHERE id = ?", (samples[-1][0], samples[-1][1], run_id))
        else:
            self.db.execute(sql, params)
        return []

    def _pause(self, exc: sqlite3.Error) -> bool:
        if not self._waiting:
            self._waiting = True
            self._warn(f"run history: the database can't be written for now ({exc}: another "
                       f"process holding a lock, or a full disk); runs go on and are written as "
                       f"soon as it can be")
        time.sleep(RETRY_SECONDS[min(self._retries, len(RETRY_SECONDS) - 1)])
        self._retries += 1
        return False


def _passing(exc: sqlite3.Error) -> bool:
    """A failure that goes away by itself: a lock another process holds, a full disk."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and any(
        word in text for word in ("locked", "busy", "full", "disk i/o"))
