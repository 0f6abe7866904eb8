"""Run history in real SQLite: survives restarts and kills, and never stops a cell."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
from helpers import make_record, wait_until

import keras_nbguard
from keras_nbguard.records.notices import NbguardWarning
from keras_nbguard.session.core import Session, using
from keras_nbguard.store.dbfile import APPLICATION_ID
from keras_nbguard.store.died import process_alive
from keras_nbguard.store.feed import RunFeed
from keras_nbguard.store.history_db import MEMORY, RunKey, Store, start_row
from keras_nbguard.store.schema import SCHEMA_VERSION


def test_runs_survive_a_restart_and_numbers_continue(history_database, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/experiments.ipynb")
    earlier_kernel = (
        "import keras_nbguard\nwith keras_nbguard.track('mlp'): pass\n"
        "keras_nbguard.get_session().close()\n"
    )
    subprocess.run([sys.executable, "-c", earlier_kernel], check=True)
    with using(Session()) as second:
        with keras_nbguard.track("mlp") as run:
            pass
        assert run.run_number == 2 and run.previous_run == 1
        assert [r.run_number for r in keras_nbguard.runs("mlp")] == [1, 2]
        assert [r.run_number for r in second.runs("mlp", this_kernel=True)] == [2]
    assert oct(os.stat(history_database).st_mode & 0o777) == "0o600"


def test_a_process_that_ends_right_after_a_run_still_stores_its_result(history_database):
    # no close(), no flush(): the interpreter's exit must not drop the queued result
    script = "import keras_nbguard\nwith keras_nbguard.track('last words'): pass\n"
    subprocess.run([sys.executable, "-c", script], check=True)
    with sqlite3.connect(history_database) as db:
        rows = db.execute("SELECT status, record IS NOT NULL FROM runs").fetchall()
    assert rows == [("ok", 1)]
    assert Session().died == []


@pytest.mark.slow
def test_a_killed_run_is_reported_died_with_its_last_samples(history_database):
    script = textwrap.dedent("""
        import time, numpy as np, keras_nbguard
        with keras_nbguard.track("doomed"):
            block = np.ones(100 * 2**20 // 8)
            print("running", flush=True)
            time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "running"

    def flushed_two_seconds_in() -> bool:
        with sqlite3.connect(history_database) as db:
            row = db.execute(
                "SELECT updated_at - started_at, last_rss FROM runs WHERE label = 'doomed'"
            ).fetchone()
        return row is not None and row[0] >= 2 and (row[1] or 0) > 100 * 2**20

    wait_until(flushed_two_seconds_in, timeout=60, step=0.1)  # what the run wrote as it went
    child.send_signal(signal.SIGKILL)
    child.wait()
    store = Store(str(history_database))
    (died,) = store.mark_dead_runs(process_alive)
    assert died.label == "doomed" and died.seconds >= 2 and died.last_rss > 100 * 2**20
    assert "died" in died.text()
    (record,) = [r for r in store.runs() if r.label == "doomed"]
    assert record.status == "died" and record.rss_samples
    assert abs(record.wall_seconds - record.rss_samples[-1][0]) < 0.05  # the last sample's time


def test_a_run_killed_in_its_first_second_says_how_far_it_got(history_database):
    script = textwrap.dedent("""
        import time, keras_nbguard
        with keras_nbguard.track("early"):
            print("running", flush=True)
            time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "running"
    began = time.monotonic()
    time.sleep(0.7)
    child.send_signal(signal.SIGKILL)
    killed_after = time.monotonic() - began  # more than 0.7 s where the machine is loaded
    child.wait()
    (died,) = Store(str(history_database)).mark_dead_runs(process_alive)
    assert 0.3 <= died.seconds <= killed_after + 0.5, died.text()  # not "killed 0 ms into it"
    assert died.last_rss is not None


def test_two_processes_writing_at_once_lose_no_rows(history_database):
    script = textwrap.dedent("""
        import keras_nbguard
        for i in range(40):
            with keras_nbguard.track("w"):
                pass
        keras_nbguard.get_session().close()
    """)
    children = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    assert all(c.wait(120) == 0 for c in children)
    assert len(Store(str(history_database)).runs()) == 80


def test_our_own_corrupt_database_is_moved_aside(tmp_path):
    path = tmp_path / "runs.sqlite"
    Store(str(path)).close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page, past the (marked) header
    path.write_bytes(bytes(data))
    warnings = []
    store = Store(str(path), warn=warnings.append)
    assert not store.in_memory and "corrupt" in warnings[0]
    assert list(tmp_path.glob("runs.sqlite.corrupt-*"))


def test_files_that_are_not_ours_are_left_byte_for_byte(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_bytes(b"this is not sqlite\n" * 100)
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.executescript("CREATE TABLE things (x); INSERT INTO things VALUES (1);")
    db.close()
    for path in (text, other):
        before = path.read_bytes()
        warnings = []
        store = Store(str(path), warn=warnings.append)
        assert store.in_memory and "not a keras_nbguard run history" in warnings[0]
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "other.sqlite"]


def test_a_database_from_before_the_mark_is_ours_and_gets_marked(tmp_path):
    path = tmp_path / "runs.sqlite"
    Store(str(path)).db.execute("PRAGMA application_id = 0")  # as written before the mark
    assert int.from_bytes(path.read_bytes()[68:72], "big") == 0
    store = Store(str(path))
    assert not store.in_memory
    assert store.db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_unwritable_location_falls_back_to_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    warnings = []
    store = Store(str(blocker / "sub" / "runs.sqlite"), warn=warnings.append)
    assert store.path == MEMORY and "memory" in warnings[0]


def test_a_store_that_fell_back_to_memory_goes_back_to_its_file_with_the_runs(
    tmp_path, monkeypatch
):
    monkeypatch.setattr("keras_nbguard.store.history_db.DISK_RETRY_SECONDS", 0.0)
    blocker = tmp_path / "history"
    blocker.write_text("x")  # the folder can't be made yet
    path = blocker / "runs.sqlite"
    warnings: list[str] = []
    with using(Session(store=Store(str(path), warn=warnings.append))) as session:
        assert session.store.in_memory and "trying the file again" in warnings[-1]
        for _ in range(2):
            with keras_nbguard.track("mlp", clear=False) as run:
                pass
        # samples as a run still going hands them over (a finished run's are in its record)
        session.store.add_samples(run.id, [(0.25, 100 * 2**20)])
        blocker.unlink()  # now it can be
        with keras_nbguard.track("mlp", clear=False) as third:
            pass
        session.store.flush()
        assert not session.store.in_memory and session.store.path == str(path)
        assert "kept in memory meanwhile are in it now" in warnings[-1]
        with keras_nbguard.track("mlp", clear=False):
            pass
        session.store.flush()
        assert third.run_number == 3 and [r.run_number for r in session.runs("mlp")] == [1, 2, 3, 4]
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT run_number, status, (SELECT count(*) FROM samples "
            "WHERE run_id = id) > 0 FROM runs ORDER BY run_number"
        ).fetchall()
    assert rows == [(1, "ok", 0), (2, "ok", 1), (3, "ok", 0), (4, "ok", 0)]  # samples moved too


def test_newer_database_is_refused_and_older_migrated(tmp_path):
    newer = tmp_path / "newer.sqlite"
    db = sqlite3.connect(newer)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    warnings = []
    assert Store(str(newer), warn=warnings.append).in_memory
    assert "newer keras_nbguard" in warnings[0]

    older = tmp_path / "older.sqlite"
    db = sqlite3.connect(older)
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        INSERT INTO meta VALUES ('schema', '1');
        CREATE TABLE runs (id TEXT PRIMARY KEY, notebook TEXT, label TEXT, run_number INTEGER,
            kernel_id TEXT, pid INTEGER, pid_started REAL, started_at REAL, updated_at REAL,
            status TEXT, last_rss INTEGER, record TEXT);
        CREATE TABLE samples (run_id TEXT, t REAL, rss INTEGER);
    """)
    db.close()
    store = Store(str(older))
    assert not store.in_memory
    columns = [r[1] for r in store.db.execute("PRAGMA table_info(runs)")]
    assert "cell_id" in columns


def test_a_broken_store_never_stops_a_run(tmp_path):
    store = Store(str(tmp_path / "runs.sqlite"))
    store.db.close()  # every later write fails
    with using(Session(store=store)), keras_nbguard.track("still runs") as run:
        ran = True
    assert ran and run.status == "ok"


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()  # held until the test says so: no race with a slow machine
db.execute("COMMIT")
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("default::keras_nbguard.NbguardWarning")  # expected: the lock
def test_a_lock_held_by_another_process_never_stalls_a_cell_nor_loses_a_run(history_database):
    from IPython.core.interactiveshell import InteractiveShell

    Store(str(history_database)).close()  # an existing history, as on any second day
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(history_database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout.readline().strip() == "locked"
    shell = InteractiveShell.instance()
    try:
        t0 = time.perf_counter()
        shell.run_line_magic("load_ext", "keras_nbguard")
        load = time.perf_counter() - t0
        cells = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert shell.run_cell("%%kerasrun --label locked --quiet\nz = 1").success
            cells.append(time.perf_counter() - t0)
        session = keras_nbguard.get_session()
        assert [r.run_number for r in session.runs("locked")] == [1, 2, 3, 4, 5]
        assert locker.poll() is None  # all of that while the lock was held
        # A cell that waited for the lock would wait as long as it is held, here for ever:
        # the bound only has to tell "never waited" from "waited", not time the cell.
        assert load < 5 and max(cells) < 5, (load, cells)
        said = session.warn_once.said
        wait_until(lambda: any("can't be written for now" in w for w in said), timeout=60)
        locker.communicate("release\n", timeout=30)
        session.store.flush(15)
        with sqlite3.connect(history_database) as db:
            rows = db.execute(
                "SELECT run_number, status FROM runs WHERE label = 'locked' ORDER BY run_number"
            ).fetchall()
        assert rows == [(n, "ok") for n in range(1, 6)]  # nothing lost, nothing left running
    finally:
        locker.kill()
        shell.run_line_magic("unload_ext", "keras_nbguard")
        shell.reset(new_session=False)


class FullDisk:
    """The writer's connection while the disk is full: every transaction fails like SQLite's
    own 'database or disk is full', until ``free()``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.full = db, True

    def execute(self, sql: str, *args):
        if self.full and sql.startswith(("BEGIN", "INSERT", "UPDATE")):
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def executemany(self, sql: str, *args):
        return self.execute(sql) and self.db.executemany(sql, *args)

    def free(self) -> None:
        self.full = False

    def __getattr__(self, name: str):
        return getattr(self.db, name)


@pytest.mark.slow
def test_a_full_disk_loses_no_run_and_leaves_none_running(history_database):
    said: list[str] = []
    store = Store(str(history_database), warn=said.append)
    disk = store.writer.db = FullDisk(store.writer.db)
    store.writer.direct = FullDisk(store.writer.direct)  # the cell's own connection: as full
    session = Session(store=store)
    with using(session):
        for _ in range(3):
            with keras_nbguard.track("full"):
                pass
    wait_until(lambda: store.writer._waiting)  # the writer has met the full disk, and waits
    with sqlite3.connect(history_database) as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    disk.free()
    store.flush(10)
    with sqlite3.connect(history_database) as db:
        rows = db.execute("SELECT run_number, status FROM runs ORDER BY run_number").fetchall()
    assert rows == [(1, "ok"), (2, "ok"), (3, "ok")]
    assert "full disk" in said[0] and "written again" in said[-1]


def test_a_six_hour_run_keeps_a_few_thousand_sample_rows_and_its_peak():
    class Rows:
        def __init__(self) -> None:
            self.rows: list[tuple[float, int]] = []

        def add_samples(self, run_id: str, samples: list[tuple[float, int]], start=None) -> None:
            self.rows.extend(samples)

    store = Rows()
    feed = RunFeed(store, "long")  # type: ignore[arg-type]
    hours, hz = 6, 50
    for i in range(hours * 3600 * hz):
        t = i / hz
        feed.on_sample(t, 10**9 if i == 700_000 else 5 * 10**8 + i)  # one spike, 4 h in
    store.rows.extend(feed.close())  # the last ones go with the run's end
    times = [t for t, _ in store.rows]
    assert 2_000 < len(store.rows) < 7_000 and times == sorted(times)
    assert max(v for _, v in store.rows) == 10**9  # the spike survives the thinning
    assert times[-1] > hours * 3600 - 120  # and the series reaches the end


@pytest.mark.slow
def test_five_kills_mid_run_leave_a_sound_database(history_database):
    script = textwrap.dedent("""
        import time, keras_nbguard
        with keras_nbguard.track("killed"):
            print("running", flush=True)
            time.sleep(60)
    """)

    def rows_written() -> int:
        try:
            with sqlite3.connect(history_database) as db:
                return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])
        except sqlite3.OperationalError:  # the first child has not made the table yet
            return 0

    for n in range(1, 6):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "running"
        # killed once its start is stored (with its first samples, FLUSH_SECONDS in): a sleep
        # of 0.4 s came before that on a loaded machine, and the run left no row to mark
        wait_until(lambda n=n: rows_written() == n, timeout=30)
        child.send_signal(signal.SIGKILL)
        child.wait()
    with sqlite3.connect(history_database) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    Store(str(history_database)).mark_dead_runs(process_alive)  # the next kernel's load
    with sqlite3.connect(history_database) as db:
        rows = db.execute("SELECT run_number, status FROM runs ORDER BY run_number").fetchall()
    assert rows == [(n, "died") for n in range(1, 6)]  # each told, none left 'running'


# -- any Python string; a failed write costs only itself ---------------------------------------
ODD = ["\udcff", "lone \ud800 high", "\x00starts with the mark", '\x00"\\udcff"', "plain", "ü ✓"]


def test_labels_and_paths_with_any_python_string_are_stored_and_read_back_equal(tmp_path):
    path = str(tmp_path / "his\udcfftory.sqlite")  # a file name that is not UTF-8
    store = Store(path)
    assert store.path == path and not store.in_memory
    notebook = "/home/me/n\udcffb.ipynb"
    with using(Session(store=store)) as session:
        session.notebook = session.past.notebook = notebook
        session.kernel_id = "kernel"
        for label in ODD:
            with keras_nbguard.track(label):
                pass
        key = RunKey(notebook, "\ud800cell", "kernel", os.getpid(), 0.0)
        store.run_started(
            start_row("still-running", key, "\udcffgoing", 99, time.time() + 60, None)
        )
        session.close()
    again = Store(path)
    stored = again.runs(notebook=notebook, kernel_id="kernel")
    assert [r.label for r in stored] == [*ODD, "\udcffgoing"]
    assert {r.notebook for r in stored} == {notebook}
    assert stored[-1].cell_id == "\ud800cell" and stored[-1].status == "running"
    assert again.last_run(notebook, "\udcff", float("inf")).label == "\udcff"
    assert again.last_run(notebook, '\x00"\\udcff"', float("inf")).label == '\x00"\\udcff"'
    # what SQLite holds is valid text every reader can read (the escape is ASCII JSON)
    with sqlite3.connect(os.fsencode(path)) as db:
        assert ("plain",) in db.execute("SELECT label FROM runs").fetchall()
    again.close()


@pytest.mark.filterwarnings("default::keras_nbguard.NbguardWarning")
def test_a_failed_write_is_rolled_back_and_the_next_batch_still_lands(tmp_path):
    warnings: list[str] = []
    store = Store(str(tmp_path / "runs.sqlite"), warn=warnings.append)
    key = RunKey("nb", None, "k", os.getpid(), 0.0)
    store.run_started(start_row("good-1", key, "a", 1, 1.0, None))
    store.run_started(start_row("bad", key, object(), 2, 2.0, None))  # SQLite can't take this value
    store.run_started(start_row("good-2", key, "a", 3, 3.0, None))
    store.flush()
    assert not store.db.in_transaction  # nothing left open for the next batch to trip on
    store.run_started(start_row("next-batch", key, "a", 4, 4.0, None))
    store.flush()
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:
        ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY started_at")]
    assert ids == ["good-1", "good-2", "next-batch"]
    assert len(warnings) == 1 and "1 write(s) failed" in warnings[0]
    store.close()


def test_a_closed_store_writes_nothing_and_reads_nothing(tmp_path):
    store = Store(str(tmp_path / "runs.sqlite"))
    store.run_started(start_row("r", RunKey("nb", None, "k", os.getpid(), 0.0), "a", 1, 1.0, None))
    store.close()
    assert store.writer._thread is None or not store.writer._thread.is_alive()
    store.close()  # again: nothing
    store.run_started(
        start_row("late", RunKey("nb", None, "k", os.getpid(), 0.0), "a", 2, 2.0, None)
    )
    store.flush()
    assert store.runs() == [] and store.reset_mark("nb") is None
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:
        assert [row[0] for row in db.execute("SELECT id FROM runs")] == ["r"]


def test_a_record_caught_half_built_by_a_heap_scan_is_serialized_again():
    """CPython raises SystemError in ``asdict`` when another thread's gc.get_objects() /
    get_referrers() meets its tuples half-built (seen with the leak finder's scans): the
    writer tries again instead of dropping the batch."""
    import dataclasses as dc
    import json as js

    from keras_nbguard.store.writer import _serialized

    failures = [SystemError("Objects/tupleobject.c:927: bad argument to internal function")]

    @dc.dataclass(frozen=True)
    class Racy(type(make_record())):
        def to_json(self):
            if failures:
                raise failures.pop()
            return super().to_json()

    record = Racy(**{f.name: getattr(make_record(), f.name) for f in dc.fields(make_record())})
    _, (run_id, same, payload) = _serialized(("finish", ("r1", record)))
    assert run_id == "r1" and same is record and js.loads(payload)["label"] == record.label


def _rows(path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT label, status FROM runs ORDER BY started_at").fetchall()


def test_a_short_run_is_on_disk_when_it_ends_without_waking_the_writer_thread(history_database):
    """A run shorter than the feed's first hand-over is one write, on the cell's own thread
    (store/feed.py, writer.py): the start row waits for the end, and the end is on disk
    before the run is over, so a kill right after the cell loses nothing."""
    store = Store(str(history_database))
    session = Session(store=store)
    with using(session):
        with keras_nbguard.track("short"):
            assert _rows(history_database) == []  # held: no write of its own at the start
        assert _rows(history_database) == [("short", "ok")]  # no flush: written already
        with keras_nbguard.track("short"):
            pass
    assert _rows(history_database) == [("short", "ok"), ("short", "ok")]
    assert store.writer._thread is None  # nothing of those runs went through the thread
    store.close()


def test_in_a_kernel_a_runs_row_waits_for_the_reply_and_the_next_run_writes_it_first(
    history_database,
):
    """With a kernel's schedule (session/later.py: after the reply), the row is not written in
    the cell; a next run that comes before the callback (a sweep's next point, a loop of
    track()) writes it first, a change of store and close write the rest, and what it warned
    of after the cell was over is said by the next run."""
    store = Store(str(history_database))
    session = Session(store=store)
    callbacks: list[object] = []
    session.later.schedule = lambda callback: callbacks.append(callback) is None  # never called
    with using(session):
        with keras_nbguard.track("a"):
            pass
        assert _rows(history_database) == [] and len(callbacks) == 1
        with keras_nbguard.track("b"):
            assert _rows(history_database) == [("a", "ok")]  # before b did anything
        assert _rows(history_database) == [("a", "ok")]
        with pytest.warns(NbguardWarning, match="disk full"):  # said at once, in a cell
            session.later.warn("run history: the run's result was not stored (disk full)")
        session.later._after_reply = True  # as from the callback, once the cell is over
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # kept, not said to a cell that is over
            session.later.warn("run history: the run's result was not stored (locked)")
        session.later._after_reply = False
        with pytest.warns(NbguardWarning, match="locked"), keras_nbguard.track("c"):
            pass
        session.close()
    assert _rows(history_database) == [("a", "ok"), ("b", "ok"), ("c", "ok")]
    store.close()


@pytest.mark.slow
def test_a_longer_run_writes_its_start_with_its_first_samples(history_database):
    store = Store(str(history_database))
    session = Session(store=store)
    with using(session):
        with keras_nbguard.track("long"):
            # a kill from now on would leave the run as died, with its samples so far
            wait_until(lambda: _rows(history_database) == [("long", "running")])
        store.flush()  # a loaded machine's slow writes go through the writer thread
        assert _rows(history_database) == [("long", "ok")]
    store.close()


def test_a_slow_disk_gives_the_writes_back_to_the_writer_thread(history_database, monkeypatch):
    from keras_nbguard.store import writer

    monkeypatch.setattr(writer, "SLOW_DIRECT_SECONDS", 0.0)  # every write is "slow"
    store = Store(str(history_database))
    session = Session(store=store)
    with using(session):
        for _ in range(writer.SLOW_IN_A_ROW - 1):  # one slow write is a hiccup
            with keras_nbguard.track("direct"):
                pass
        assert store.writer.direct is not None
        with keras_nbguard.track("direct"):
            pass
        assert store.writer.direct is None and store.writer._thread is None
        with keras_nbguard.track("thread"):
            pass
    assert store.writer._thread is not None  # that one went through the thread
    store.flush()
    assert _rows(history_database) == [("direct", "ok")] * writer.SLOW_IN_A_ROW + [("thread", "ok")]
    store.close()


def test_the_writer_thread_checkpoints_what_the_cells_connection_wrote(
    history_database, monkeypatch
):
    """The cell's connection never checkpoints (a checkpoint syncs the disk): without the
    writer's, the log would grow by every run for the kernel's life."""
    from keras_nbguard.store import writer

    monkeypatch.setattr(writer, "CHECKPOINT_EVERY", 5)
    monkeypatch.setattr(writer, "SLOW_DIRECT_SECONDS", 60.0)  # a loaded machine: still direct
    store = Store(str(history_database))
    session = Session(store=store)
    log = f"{history_database}-wal"
    sizes = []
    with using(session):
        for _ in range(6):
            for _ in range(10):
                with keras_nbguard.track("many"):
                    pass
            store.flush()
            sizes.append(os.path.getsize(log))
    assert len(_rows(history_database)) == 60
    # Emptied at each checkpoint: the log holds the runs since the last one (without them it
    # grows by ~300 KB every 10 runs here)
    assert max(sizes) < 150_000, sizes
    store.close()
