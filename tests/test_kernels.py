"""Real Jupyter kernels (jupyter_client, no mocks): history across restarts and kills, the shipped
"Python 3 (keras-nbguard)" kernelspec and the IPython-config opt-in."""

from __future__ import annotations

import ctypes.util
import json
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from keras_nbguard.records.formatting import fmt_bytes, fmt_seconds

pytestmark = pytest.mark.kernel

NOTEBOOK = "/home/me/experiments.ipynb"
SPEC = "python3-keras-nbguard"
JEMALLOC_SPEC = "python3-keras-nbguard-jemalloc"
STARTUP_TIMEOUT = 60.0  # TF-free start takes ~2 s here; a loaded CI box can take much longer
CELL_TIMEOUT = 120.0  # the first cell that imports TensorFlow takes several seconds on 2 cores

FIT_CELL = """%%kerasrun --label mlp
import numpy as np
import keras
x = np.random.default_rng(0).random((256, 8), dtype="float32")
y = np.random.default_rng(1).random((256, 1), dtype="float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(x, y, epochs=1, verbose=0)
"""

LONG_FIT_CELL = """%%kerasrun --label big
import numpy as np
import keras
x = np.random.default_rng(0).random((512, 8), dtype="float32")
y = np.random.default_rng(1).random((512, 1), dtype="float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(x, y, epochs=100_000, verbose=0)  # killed long before it ends
"""

# What a cell hands back to the test: one JSON line, after a marker, so that warnings or other
# prints in the same cell can't be mistaken for it.
MARK = "@@keras_nbguard_test@@"
RUNS_EXPR = (
    "[dict(label=r.label, status=r.status, number=r.run_number, kernel=r.kernel_id, "
    "notebook=r.notebook, samples=len(r.rss_samples), rss_after=r.rss_after) "
    "for r in __import__('keras_nbguard').runs({args})]"
)


@dataclass
class Cell:
    """What one executed cell put on iopub, as text."""

    status: str = ""
    stdout: str = ""
    stderr: str = ""
    display: str = ""  # text/plain of display_data and execute_result
    error: str = ""

    @property
    def text(self) -> str:
        return "\n".join((self.stdout, self.stderr, self.display, self.error))


@dataclass
class Kernel:
    km: KernelManager
    kc: BlockingKernelClient
    closed: bool = False

    @property
    def kernel_id(self) -> str:
        return str(self.km.kernel_id)

    @property
    def pid(self) -> int:
        process = self.km.provisioner.process  # type: ignore[union-attr]
        return int(process.pid)

    def run(self, code: str, timeout: float = CELL_TIMEOUT) -> Cell:
        cell = Cell()

        def collect(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    cell.stdout += content["text"]
                else:
                    cell.stderr += content["text"]
            elif kind in ("display_data", "execute_result"):
                cell.display += content["data"].get("text/plain", "") + "\n"
            elif kind == "error":
                cell.error += "\n".join(content["traceback"])

        reply = self.kc.execute_interactive(
            code, timeout=timeout, output_hook=collect, allow_stdin=False
        )
        cell.status = reply["content"]["status"]
        return cell

    def ok(self, code: str, timeout: float = CELL_TIMEOUT) -> Cell:
        cell = self.run(code, timeout)
        assert cell.status == "ok", cell.text
        return cell

    def value(self, expression: str) -> Any:
        """Evaluate ``expression`` in the kernel and bring it back through JSON."""
        cell = self.ok(f"import json as _j\nprint({MARK!r} + _j.dumps({expression}))\ndel _j")
        (line,) = [ln for ln in cell.stdout.splitlines() if ln.startswith(MARK)]
        return json.loads(line[len(MARK) :])

    def runs(self, args: str = "") -> list[dict[str, Any]]:
        return self.value(RUNS_EXPR.format(args=args))  # type: ignore[no-any-return]

    def close(self, now: bool = True) -> None:
        """Kill the kernel, or (``now=False``) ask it to shut down, as Jupyter's restart and
        shutdown do: it finishes what it does after a cell's reply (the run's row) and exits."""
        if self.closed:  # closed by the test (a restart) and again by the fixture
            return
        self.closed = True
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=now)
        self.km.cleanup_resources()


StartKernel = Callable[..., Kernel]


@pytest.fixture
def start_kernel(tmp_path: Path, history_database: Path) -> Iterator[StartKernel]:
    """Starts real kernels the way Jupyter Server does (a connection file named after the kernel
    id, JPY_SESSION_NAME set to the notebook); shuts every one of them down, however the test
    ends."""
    started: list[Kernel] = []
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    empty_profile = tmp_path / "ipython"  # never the user's own IPython profile / startup files

    def start(
        kernel_name: str = "python3", notebook: str = NOTEBOOK, ipython_dir: Path = empty_profile
    ) -> Kernel:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TF_FORCE_GPU_ALLOW_GROWTH", "JPY_SESSION_NAME")
        }
        env.update(
            KERAS_NBGUARD_DB=str(history_database),
            JPY_SESSION_NAME=notebook,
            IPYTHONDIR=str(ipython_dir),
            JUPYTER_RUNTIME_DIR=str(runtime),
            TF_CPP_MIN_LOG_LEVEL="2",
            PYDEVD_DISABLE_FILE_VALIDATION="1",
        )  # debugpy's frozen-modules note
        kernel_id = str(uuid.uuid4())
        km = KernelManager(
            kernel_name=kernel_name,
            kernel_id=kernel_id,
            connection_file=str(runtime / f"kernel-{kernel_id}.json"),
            # sockets in files: a TCP port picked free can be taken before the kernel binds
            # it, by a parallel test's kernel ("Address already in use": dead at start)
            transport="ipc",
            ip=str(runtime / kernel_id[:8]),
        )
        km.start_kernel(env=env)
        kc = km.client()
        kernel = Kernel(km, kc)
        started.append(kernel)
        kc.start_channels()
        kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        return kernel

    yield start
    for kernel in started:
        kernel.close()


def read_only(db: Path) -> sqlite3.Connection:
    # mode=ro: the test only watches; the kernel is the sole writer, as in real use
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)


def wait_for_samples(
    db: Path, label: str, kernel: Kernel, timeout: float = CELL_TIMEOUT
) -> tuple[Any, ...]:
    """The run's row once it is 'running' with over a second of RSS samples on disk."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert kernel.km.is_alive(), "the kernel died before the run got going"
        try:
            with read_only(db) as conn:
                row = conn.execute(
                    "SELECT r.id, r.status, r.run_number, r.pid, r.started_at, count(s.t), "
                    "max(s.t) - min(s.t) FROM runs r JOIN samples s ON s.run_id = r.id "
                    "WHERE r.label = ? GROUP BY r.id",
                    (label,),
                ).fetchone()
        except sqlite3.OperationalError:  # no database or no tables yet
            row = None
        if row and row[1] == "running" and row[5] >= 5 and row[6] >= 1.0:
            return tuple(row)
        time.sleep(0.2)
    raise AssertionError(f"run {label!r} never showed samples in {db}")


def kill_unreaped(pid: int) -> None:
    """SIGKILL, as the OOM killer does, and leave the process unreaped: until its parent waits
    for it a dead kernel is a zombie that still has its pid and create time."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the killed kernel did not die"
        time.sleep(0.05)


def test_runs_survive_a_kernel_restart_and_numbers_continue(start_kernel: StartKernel) -> None:
    first = start_kernel()
    assert first.value("'keras_nbguard' in __import__('sys').modules") is False
    first.ok("%load_ext keras_nbguard")
    assert "kerasrun 'mlp' #1" in first.ok(FIT_CELL).display
    assert "kerasrun 'mlp' #2" in first.ok(FIT_CELL).display
    # a restart: the kernel is shut down and a new process takes its place (killed at once
    # instead, a loaded machine could end it before its last run's row was written: 'died')
    first.close(now=False)

    second = start_kernel()
    second.ok("%load_ext keras_nbguard")
    earlier = second.runs()
    assert [(r["label"], r["number"], r["status"]) for r in earlier] == [
        ("mlp", 1, "ok"),
        ("mlp", 2, "ok"),
    ]
    assert {r["kernel"] for r in earlier} == {first.kernel_id}
    assert {r["notebook"] for r in earlier} == {NOTEBOOK}
    assert second.runs("this_kernel=True") == []
    # numbering continues from the store; the body needn't fit again for that
    assert "kerasrun 'mlp' #3" in second.ok("%%kerasrun --label mlp\nz = 1\n").display
    assert [r["number"] for r in second.runs("'mlp'")] == [1, 2, 3]
    mine = second.runs("this_kernel=True")
    assert [(r["number"], r["kernel"]) for r in mine] == [(3, second.kernel_id)]


def test_jupyters_restart_keeps_the_kernel_id_and_the_history(start_kernel: StartKernel) -> None:
    # "Restart kernel" in Jupyter: a new process under the same kernel id and connection file
    kernel = start_kernel(kernel_name=SPEC)
    assert "kerasrun 'mlp' #1" in kernel.ok("%%kerasrun --label mlp\nz = 1\n").display
    before = kernel.pid
    kernel.km.restart_kernel(now=True)
    kernel.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
    assert kernel.pid != before
    assert "kerasrun 'mlp' #2" in kernel.ok("%%kerasrun --label mlp\nz = 1\n").display
    assert [r["number"] for r in kernel.runs()] == [1, 2]
    assert [r["number"] for r in kernel.runs("this_kernel=True")] == [2]
    # the dashboard (and the history page) mark the restart between the two runs
    assert kernel.value(
        "__import__('keras_nbguard.board.figures').board.figures.kernel_epochs("
        "__import__('keras_nbguard').runs())"
    ) == [0, 1]  # a new one at #2


def test_the_summary_skips_empty_stream_flushes_and_overtakes_no_output(
    start_kernel: StartKernel,
) -> None:
    """ipykernel flushes stdout and stderr before each display message, a round trip to its
    IOPub thread each (bench_core.py): the summary skips them only when no text waits."""
    kernel = start_kernel()
    kernel.ok("%load_ext keras_nbguard")
    kernel.ok(
        "_pub, _flushes = type(get_ipython().display_pub), []\n"
        "_flush = _pub._flush_streams\n"
        "_pub._flush_streams = lambda self: (_flushes.append(1), _flush(self))[1]\n"
    )

    def sent_by(cell: str) -> list[str]:
        """What the cell sent, in order: stream text, and each display's first line."""
        sent: list[str] = []

        def keep(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                sent.append(msg["content"]["text"].strip())
            elif msg["msg_type"] == "display_data":
                sent.append(msg["content"]["data"]["text/plain"].split("\n")[0])

        reply = kernel.kc.execute_interactive(cell, timeout=CELL_TIMEOUT, output_hook=keep)
        assert reply["content"]["status"] == "ok", sent
        return sent

    assert sent_by("%%kerasrun --no-clear --label quiet\nx1 = 1") == ["kerasrun 'quiet' #1"]
    assert kernel.value("len(_flushes)") == 0  # nothing waited: no round trips
    sent = sent_by('%%kerasrun --no-clear --label talks\nprint("first")')
    assert sent == ["first", "kerasrun 'talks' #1"], sent  # the text before the summary
    assert kernel.value("len(_flushes)") == 1


def test_a_runs_row_is_written_after_the_cells_reply_and_before_the_next_cell(
    start_kernel: StartKernel, history_database: Path
) -> None:
    """The run's end goes to the history once the kernel has replied (the front end sees the
    cell end without waiting on the disk: session/later.py), and is there before the next
    request is taken, even a plain cell's of Run All."""
    kernel = start_kernel()
    kernel.ok("%load_ext keras_nbguard")
    kernel.ok(
        "import sqlite3 as _sq\n"
        f"_db = {str(history_database)!r}\n"
        "def _rows(label):\n"
        "    with _sq.connect(f'file:{_db}?mode=ro', uri=True) as c:\n"
        "        sql = \"SELECT count(*) FROM runs WHERE label = ? AND status != 'running'\"\n"
        "        return c.execute(sql, (label,)).fetchone()[0]\n"
        "_seen_at_cell_end = []\n"
        "get_ipython().events.register('post_run_cell', "
        "lambda result: _seen_at_cell_end.append(_rows('later')))\n"
    )
    for _ in range(2):
        kernel.ok("%%kerasrun --no-clear --quiet --label later\nx1 = 1")
        written = kernel.value("_rows('later')")  # a plain cell, right after the reply
        seen = kernel.value("_seen_at_cell_end[-2]")  # the run's cell, as it ended
        assert (seen, written) in ((0, 1), (1, 2)), (seen, written)
    assert kernel.value("_rows('later')") == 2
    # a graceful shutdown right after a cell (papermill's, Jupyter's restart) loses nothing
    kernel.ok("%%kerasrun --no-clear --quiet --label later\nx1 = 1")
    kernel.km.shutdown_kernel(now=False)
    with read_only(history_database) as conn:
        sql = "SELECT count(*) FROM runs WHERE label = 'later' AND status = 'ok'"
        assert conn.execute(sql).fetchone()[0] == 3


def test_a_killed_kernels_run_is_reported_by_the_next_kernel(
    start_kernel: StartKernel, history_database: Path
) -> None:
    first = start_kernel()
    first.ok("%load_ext keras_nbguard")
    first.kc.execute(LONG_FIT_CELL)  # not waited for: it is still fitting when killed
    run_id, _, number, pid, started_at, _, _ = wait_for_samples(history_database, "big", first)
    assert pid == first.pid  # the row names the kernel process itself
    kill_unreaped(pid)

    second = start_kernel()
    loaded = second.ok("%load_ext keras_nbguard").text
    with read_only(history_database) as conn:
        status, updated_at, last_rss, samples = conn.execute(
            "SELECT status, updated_at, last_rss, (SELECT count(*) FROM samples WHERE run_id = "
            "runs.id) FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
    assert status == "died" and last_rss and samples >= 5
    assert f"run 'big' #{number} died" in loaded
    assert f"pid {pid}" in loaded
    assert updated_at - started_at >= 1.0  # the row was flushed while the fit went on
    assert f"{fmt_seconds(updated_at - started_at)} into the run" in loaded
    assert f"last RSS seen {fmt_bytes(last_rss)}" in loaded

    (died,) = second.runs()
    assert died["label"] == "big" and died["status"] == "died" and died["number"] == number
    assert died["kernel"] == first.kernel_id and died["samples"] == samples
    assert died["rss_after"] == last_rss
    # shown once: the next load finds nothing left 'running'
    assert "died" not in second.ok("%reload_ext keras_nbguard").text


HELPERS = (
    "[p.pid for p in __import__('psutil').Process().children() "
    "if any(part.endswith('rss_watch.py') for part in p.cmdline())]"
)


def test_the_stop_button_leaves_the_rss_helper_running(
    start_kernel: StartKernel, history_database: Path
) -> None:
    """Jupyter interrupts a kernel by sending SIGINT to its process group, which holds our RSS
    helper: the helper died of it, and every later run sampled with a thread in the kernel."""
    kernel = start_kernel()
    kernel.ok("%load_ext keras_nbguard")
    kernel.ok("%%kerasrun --label before --quiet\nimport time\ntime.sleep(0.6)\n")
    (helper,) = kernel.value(HELPERS)
    # stop_on_error=False: ipykernel 7 aborts a request that comes in just after an error
    # reply (a race with its "stop aborting" message), which is not what this test is about
    kernel.kc.execute(
        "%%kerasrun --label stopped --quiet\nimport time\ntime.sleep(30)\n", stop_on_error=False
    )
    wait_until_running(history_database, "stopped")
    kernel.km.interrupt_kernel()  # what the stop button does: SIGINT to the process group
    reply = kernel.kc.get_shell_msg(timeout=CELL_TIMEOUT)
    assert reply["content"]["status"] == "error"
    kernel.ok("%%kerasrun --label after --quiet\nimport time\ntime.sleep(0.6)\n")
    assert kernel.value(HELPERS) == [helper]
    assert [run["status"] for run in kernel.runs()] == ["ok", "interrupted", "ok"]
    assert psutil.Process(helper).status() != psutil.STATUS_ZOMBIE


def wait_until_running(db: Path, label: str) -> None:
    """Until a run of ``label`` is on disk (its kernel is busy with it: read from the history)."""
    deadline = time.monotonic() + CELL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with read_only(db) as conn:
                if conn.execute("SELECT 1 FROM runs WHERE label = ?", (label,)).fetchone():
                    return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"run {label!r} never began")


def test_the_shipped_kernelspec_loads_the_extension_before_user_code(
    start_kernel: StartKernel,
) -> None:
    spec = KernelSpecManager().get_kernel_spec(SPEC)
    assert spec.display_name == "Python 3 (keras-nbguard)"
    assert "--ext=keras_nbguard" in spec.argv
    assert SPEC in KernelSpecManager().find_kernel_specs()

    kernel = start_kernel(kernel_name=SPEC)
    status = kernel.ok("%nbguard status").display  # the very first cell, no %load_ext
    # loaded before TensorFlow, so GPU growth went in through the environment
    assert "TensorFlow not imported yet; TF_FORCE_GPU_ALLOW_GROWTH=true" in status
    assert 'glibc (the kernel "Python 3 (keras-nbguard, jemalloc)" runs on jemalloc' in status
    assert kernel.value("[m in __import__('sys').modules for m in ('tensorflow', 'keras')]") == [
        False,
        False,
    ]
    assert "kerasrun 'first' #1" in kernel.ok("%%kerasrun --label first\nz = 1\n").display
    (run,) = kernel.runs()
    assert run["kernel"] == kernel.kernel_id and run["notebook"] == NOTEBOOK


@pytest.mark.skipif(
    ctypes.util.find_library("jemalloc") is None,
    reason="jemalloc is not installed here (Debian: apt-get install libjemalloc2)",
)
def test_the_shipped_jemalloc_kernel_runs_on_jemalloc_and_its_runs_read_its_heap(
    start_kernel: StartKernel,
) -> None:
    from keras_nbguard.diagnosis.causes_across import JEMALLOC_KERNEL

    spec = KernelSpecManager().get_kernel_spec(JEMALLOC_SPEC)
    assert spec.display_name == JEMALLOC_KERNEL  # the kernel the summary's note names
    kernel = start_kernel(kernel_name=JEMALLOC_SPEC)
    cell = kernel.ok(FIT_CELL)  # the first cell: the extension is loaded, the run measured
    assert "kerasrun 'mlp' #1" in cell.display and "jemalloc" not in cell.stderr
    kernel.ok(FIT_CELL)  # read as it starts: with TensorFlow loaded
    seen = kernel.value(
        "dict(maps=open('/proc/self/maps').read().count('libjemalloc'), "
        "malloc=__import__('keras_nbguard').runs()[-1].malloc, "
        "heap=__import__('keras_nbguard').runs()[-1].heap_in_use)"
    )
    assert seen["maps"] > 0 and seen["malloc"] == "jemalloc"
    assert "jemalloc (LD_PRELOAD)" in kernel.ok("%nbguard status").display
    assert seen["heap"] > 50 * 2**20  # jemalloc's count, with TensorFlow loaded (glibc's: ~0)


@pytest.mark.parametrize(
    ("config_file", "line"),
    [
        ("ipython_kernel_config.py", 'c.IPKernelApp.extensions = ["keras_nbguard"]'),
        # the base file every IPython app reads, terminal IPython included
        ("ipython_config.py", 'c.InteractiveShellApp.extensions = ["keras_nbguard"]'),
    ],
)
def test_ipython_config_opt_in_loads_the_extension_at_kernel_start(
    start_kernel: StartKernel, tmp_path: Path, config_file: str, line: str
) -> None:
    ipython_dir = tmp_path / "ipython-opt-in"
    (ipython_dir / "profile_default").mkdir(parents=True)
    (ipython_dir / "profile_default" / config_file).write_text(line + "\n")

    kernel = start_kernel(ipython_dir=ipython_dir)  # the plain python3 kernel
    status = kernel.ok("%nbguard status").display
    assert "TensorFlow not imported yet; TF_FORCE_GPU_ALLOW_GROWTH=true" in status
    assert 'glibc (the kernel "Python 3 (keras-nbguard, jemalloc)" runs on jemalloc' in status
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False
    assert "kerasrun 'first' #1" in kernel.ok("%%kerasrun --label first\nz = 1\n").display


def test_a_kernelspec_kernel_after_a_kill_shows_the_died_run_in_its_first_cell(
    start_kernel: StartKernel, history_database: Path
) -> None:
    first = start_kernel(kernel_name=SPEC)
    first.kc.execute("%%kerasrun --label big\nimport time\ntime.sleep(60)\n")
    pid = wait_for_samples(history_database, "big", first)[3]
    kill_unreaped(pid)
    second = start_kernel(kernel_name=SPEC)  # what Jupyter's restarter does after the kill
    # loaded before any cell existed: said at the top of the first cell, and only there
    assert "run 'big' #1 died" in second.ok("1 + 1").text
    assert "died" not in second.ok("2 + 2").text
    assert second.runs()[0]["status"] == "died"
