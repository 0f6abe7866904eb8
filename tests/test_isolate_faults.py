"""``--isolate``, ``--sweep`` and ``--cluster ray`` under faults and bad input (issue 25, and
issue 24's "isolated runs told truly"): the right result or a clear error, no orphan process
(checked by pid after 5 s), no lost run. Real processes, a real shell, real TensorFlow where a
model must come back; the small ``/dev/shm`` in a private mount namespace (``unshare -m``)."""

from __future__ import annotations

import _thread
import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from helpers import one_ray_at_a_time, run, wait_until
from IPython.utils.capture import capture_output

import keras_nbguard
from keras_nbguard.isolation import Isolation, sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gone_after(pids, seconds: float = 5.0) -> list[int]:
    """The pids still running (not a zombie) ``seconds`` from now; killed then, so that a
    failing test leaves no process behind either."""
    time.sleep(seconds)
    alive = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
                process.kill()
        except psutil.NoSuchProcess:
            pass
    return alive


def pids_in(path) -> list[int]:
    with open(path) as f:
        return [int(word) for word in f.read().split()]


def holds_pids(path, count: int) -> bool:
    """Whether ``path`` holds ``count`` pids yet: a cell's ``open(path, 'w')`` creates the file
    before its ``write``, so waiting for the file alone can read it empty."""
    return path.exists() and len(pids_in(path)) >= count


def child_pid(record) -> int:
    return int(re.search(r"pid (\d+)", record.isolated).group(1))


def env_with_path(tmp_path) -> dict[str, str]:
    return {**os.environ, "KERAS_NBGUARD_DB": str(tmp_path / "h.db"), "PYTHONPATH": ROOT}


# -- sweeps: values, size, laziness (no process) -----------------------------------------------


@pytest.mark.parametrize(
    ("spec", "points"),
    [
        ("a=[1,2],(3,4)", [{"a": [1, 2]}, {"a": (3, 4)}]),
        ("s='a,b',\"c;d\"; n=1", [{"s": "a,b", "n": 1}, {"s": "c;d", "n": 1}]),
        ("act=relu,'tanh'; lr=1e-3", [{"act": "relu", "lr": 1e-3}, {"act": "tanh", "lr": 1e-3}]),
        ("d={'k': 1},None", [{"d": {"k": 1}}, {"d": None}]),
    ],
)
def test_sweep_values_are_python_literals(spec, points):
    assert sweep.points(spec) == points


def test_a_sweep_value_that_is_no_literal_is_named(shell):
    with capture_output() as seen:
        assert not run(shell, '%%kerasrun --sweep "a=[1,2"\nx = a\n').success
    out = seen.stdout + seen.stderr
    assert "UsageError" in out and "a='[1,2'" in out and "not a Python value" in out
    assert keras_nbguard.runs() == []


def test_a_million_points_are_made_lazily_and_ask_for_yes(shell):
    spec = "a=" + ",".join(map(str, range(1000))) + "; b=" + ",".join(map(str, range(1000)))
    tracemalloc.start()
    plan = sweep.Sweep.parse(spec)
    first = next(iter(plan))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(plan) == 10**6 and first == {"a": 0, "b": 0}
    assert peak < 5 * 2**20  # a list of a million dicts would be ~270 MiB
    before = set(psutil.Process().children(recursive=True))
    with capture_output() as seen:
        assert not run(shell, f'%%kerasrun --sweep "{spec}"\nx = a\n').success
    out = seen.stdout + seen.stderr
    assert "1,000,000 runs" in out and "--yes" in out
    assert set(psutil.Process().children(recursive=True)) <= before  # nothing started
    assert keras_nbguard.runs() == []


def test_a_parallel_of_zero_is_a_usage_error_before_any_process(shell):
    before = set(psutil.Process().children(recursive=True))
    with capture_output() as seen:
        assert not run(shell, '%%kerasrun --sweep "a=1,2" --parallel 0\nx = a\n').success
    out = seen.stdout + seen.stderr
    assert "UsageError" in out and "--parallel takes a number of processes" in out
    assert set(psutil.Process().children(recursive=True)) <= before
    assert keras_nbguard.runs() == []


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("d=0,0.0", "d=0 and d=0.0 would be one point of the sweep's results"),
        ("flag=1,True", "flag=1 and flag=True would be one point"),
        ("shape=[1,2],(1,2)", "shape=[1, 2] and shape=(1, 2) would be one point"),
        ("units=32,32", "units=32 is given twice"),
    ],
)
def test_sweep_values_equal_as_keys_are_a_usage_error_before_any_process(shell, spec, words):
    """The table and the history would show two runs, the returned mapping one of them."""
    before = set(psutil.Process().children(recursive=True))
    with capture_output() as seen:
        assert not run(shell, f'%%kerasrun --sweep "{spec}"\nx = 1\n').success
    out = seen.stdout + seen.stderr
    assert "UsageError" in out and words in out, out
    assert set(psutil.Process().children(recursive=True)) <= before
    assert keras_nbguard.runs() == []


def test_isolation_options_are_plain_values_checked_without_the_magic():
    assert Isolation(sweep="a=1,2", parallel=2).parallel == 2
    with pytest.raises(ValueError, match="1 or more, not 0"):
        Isolation(parallel=0)
    with pytest.raises(ValueError, match="the one cluster known is ray"):
        Isolation(cluster="dask")


# -- processes ---------------------------------------------------------------------------------

GRANDCHILD = "import subprocess\nkid = subprocess.Popen(['sleep', '300'])\n"


@pytest.mark.slow
def test_stop_button_ends_a_parallel_sweep_at_once(shell, tmp_path):
    """Point 1 ends at once; the others sleep, each with a process of its own started. The stop
    button, once point 1 is recorded: the two running are killed (their processes too) and
    recorded interrupted, point 1 is kept, points 4-6 never start."""
    pids = tmp_path / "pids"
    cell = (
        f'%%kerasrun --sweep "a=1,2,3,4,5,6" --parallel 2 --label stop --quiet\n'
        f"import os, time\n{GRANDCHILD}"
        f"with open({str(pids)!r}, 'a') as f:\n    f.write(f' {{os.getpid()}} {{kid.pid}}')\n"
        "if a != 1:\n    time.sleep(120)\n"
    )

    def stop_when_one_is_in():
        wait_until(lambda: keras_nbguard.runs("stop"), timeout=240)
        wait_until(lambda: holds_pids(pids, 6), timeout=120)
        _thread.interrupt_main()

    threading.Thread(target=stop_when_one_is_in, daemon=True).start()
    with capture_output() as seen:
        result = run(shell, cell)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    records = keras_nbguard.runs("stop")
    assert sorted(r.status for r in records) == ["interrupted", "interrupted", "ok"]
    assert {r.params["a"] for r in records if r.status == "ok"} == {1}
    assert {r.params["a"] for r in records} == {1, 2, 3}  # 4-6 never started
    assert gone_after(pids_in(pids)) == []  # children and what they started
    # one line, wherever the press landed (psutil's try/except showed "During handling ...")
    assert seen.stdout + seen.stderr == (
        "KeyboardInterrupt: the sweep 'stop' was stopped after 1 of 6 points: the running ones "
        "recorded as interrupted, the rest not run\n"
    )


@pytest.mark.slow
def test_stop_button_on_an_isolated_run_takes_its_processes(shell, tmp_path):
    pids = tmp_path / "pids"
    cell = (
        f"%%kerasrun --isolate --label stopped --quiet\nimport os, time\n{GRANDCHILD}"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{kid.pid}}')\n"
        "time.sleep(120)\n"
    )
    stopped_once(shell, cell, lambda: holds_pids(pids, 2))
    (record,) = keras_nbguard.runs("stopped")
    assert record.status == "interrupted"
    assert gone_after(pids_in(pids)) == []


def stopped_once(shell, cell: str, ready: Callable[[], bool]) -> Any:
    """Run ``cell``, pressing the stop button once ``ready()`` (the cell made its file); what it
    showed. The cell must end stopped (KeyboardInterrupt)."""
    threading.Thread(
        target=lambda: (wait_until(ready, timeout=120), _thread.interrupt_main()),
        daemon=True,
    ).start()
    with capture_output() as seen:
        result = run(shell, cell)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    return seen


@pytest.mark.slow
def test_a_stopped_sweep_one_at_a_time_marks_its_running_point_and_says_one_line(shell, tmp_path):
    second = tmp_path / "second"
    cell = (
        f'%%kerasrun --sweep "s=0,60,61" --label stopseq\nimport time\n'
        f"if s:\n    open({str(second)!r}, 'w').close()\ntime.sleep(s)\n"
    )
    seen = stopped_once(shell, cell, second.exists)
    assert [(r.params["s"], r.status) for r in keras_nbguard.runs("stopseq")] == [
        (0, "ok"),
        (60, "interrupted"),
    ]
    table = str(seen.outputs[-1].data["text/plain"])  # as the stop left it
    assert table.startswith("sweep stopseq: 2 done, 0 running, 1 left of 3"), table
    assert "s=60  interrupted" in table
    assert seen.stdout + seen.stderr == (
        "KeyboardInterrupt: the sweep 'stopseq' was stopped after 1 of 3 points: the running "
        "ones recorded as interrupted, the rest not run\n"
    )


@pytest.mark.slow
def test_a_stopped_isolated_run_says_one_line(shell, tmp_path):
    started = tmp_path / "started"
    cell = (
        f"%%kerasrun --isolate --label stopone --quiet\nimport time\n"
        f"open({str(started)!r}, 'w').close()\ntime.sleep(60)\n"
    )
    seen = stopped_once(shell, cell, started.exists)
    assert [r.status for r in keras_nbguard.runs("stopone")] == ["interrupted"]
    assert seen.stdout + seen.stderr == (
        "KeyboardInterrupt: the isolated run 'stopone' was stopped: its process is ended, the "
        "run recorded as interrupted\n"
    )


@pytest.mark.slow
def test_a_stopped_isolated_fit_keeps_its_epochs_as_a_stopped_plain_one(shell, tmp_path):
    """A user's walkthrough: a plain run stopped mid-fit read `fit 9.93 s; … stopped after 281
    epochs`, an isolated one `fit n/a: the isolated process ended first`: the child was killed
    at once. Its cell is stopped as the kernel's is, and its run comes back with the epochs it
    fit."""
    started = tmp_path / "started"
    cell = (
        "%%kerasrun --isolate --label stopfit --quiet\n"
        "import numpy as np, keras\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "model.compile('sgd', 'mse')\n"
        f"mark = keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: e == 2 and "
        f"open({str(started)!r}, 'w').close())\n"
        "model.fit(np.zeros((64, 4)), np.zeros(64), epochs=100000, verbose=0, callbacks=[mark])\n"
    )
    seen = stopped_once(shell, cell, started.exists)
    (record,) = keras_nbguard.runs("stopfit")
    assert record.status == "interrupted"
    (fit,) = record.fits
    assert not fit.completed and len(fit.epoch_seconds) >= 3 and record.fit_seconds
    assert seen.stdout + seen.stderr == (
        "KeyboardInterrupt: the isolated run 'stopfit' was stopped: its process is ended, the "
        "run recorded as interrupted\n"
    )


KILLED_KERNEL = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("%load_ext keras_nbguard")
shell.run_cell('''%%kerasrun --isolate --label doomed
import os, subprocess, time
kid = subprocess.Popen(['sleep', '300'])
open(PIDS, 'w').write(f'{os.getpid()} {kid.pid}')
time.sleep(300)
'''.replace("PIDS", repr(sys.argv[1])))
"""


@pytest.mark.slow
def test_a_kernel_killed_mid_run_leaves_no_child_or_grandchild(tmp_path):
    pids = tmp_path / "pids"
    kernel = subprocess.Popen(
        [sys.executable, "-c", KILLED_KERNEL, str(pids)],
        env=env_with_path(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: holds_pids(pids, 2), timeout=180)
        child, grandchild = pids_in(pids)
        assert psutil.Process(child).ppid() == kernel.pid
        kernel.kill()  # SIGKILL: the kernel can do nothing
        kernel.wait()
        assert gone_after([child, grandchild]) == []
    finally:
        kernel.kill()


@pytest.mark.slow
def test_a_stray_thread_gets_a_short_grace_and_a_word(shell):
    cell = (
        "%%kerasrun --isolate --label threads --quiet\nimport threading, time\n"
        "threading.Thread(target=time.sleep, args=(120,), name='poller').start()\n"
        "answer = 42\n"
    )
    assert run(shell, cell).success
    assert shell.user_ns["answer"] == 42  # the result came before the wait for the thread
    (record,) = keras_nbguard.runs("threads")
    assert "1 thread still running at the end (poller): ended" in record.isolated
    assert gone_after([child_pid(record)]) == []


def test_a_process_the_cell_left_running_is_named_and_ours_are_not(shell):
    """A ``sleep`` the cell started and left is ended and said; a cell that starts nothing says
    nothing, though the child's own RSS helper (ours) may still be in its group, or a zombie."""
    cell = (
        "%%kerasrun --isolate --label left --quiet\nimport subprocess\n"
        "kid = subprocess.Popen(['sleep', '300']).pid\n"
    )
    assert run(shell, cell).success
    (record,) = keras_nbguard.runs("left")
    assert "1 process its cell started still running: ended" in record.isolated
    assert gone_after([shell.user_ns["kid"]]) == []
    quiet = "%%kerasrun --isolate --label none --quiet\nimport time\ntime.sleep(0.6)\n"
    assert run(shell, quiet).success
    (record,) = keras_nbguard.runs("none")
    assert "its cell started" not in record.isolated, record.isolated
    # an array the cell only reads goes in shared memory: attaching it must start no process
    # (Python's resource tracker) that is then called the cell's
    assert run(shell, "import numpy as np\nbig = np.ones(2**19)\n").success
    reads = "%%kerasrun --isolate --label reads --quiet\ntotal = float(big.sum())\n"
    assert run(shell, reads).success and shell.user_ns["total"] == 2**19
    (record,) = keras_nbguard.runs("reads")
    assert "big (shared memory" in record.isolated, record.isolated
    assert "its cell started" not in record.isolated, record.isolated


PRESTART = "%%kerasrun --isolate --prestart --label warm --quiet\nimport os\nwhere = os.getcwd()\n"


@pytest.mark.slow
@pytest.mark.parametrize("change", ["cd", "env", "path"])
def test_a_spare_is_not_used_once_the_kernel_changed(shell, tmp_path, monkeypatch, change):
    assert run(shell, PRESTART).success
    from keras_nbguard.isolation import _SPARES

    spare = _SPARES[keras_nbguard.get_session()].child
    assert spare is not None and spare.alive()
    if change == "cd":
        monkeypatch.chdir(tmp_path)
    elif change == "env":
        monkeypatch.setenv("NBGUARD_TEST_NEW", "1")
    else:
        monkeypatch.syspath_prepend(str(tmp_path))
    cell = PRESTART + "seen = os.environ.get('NBGUARD_TEST_NEW')\nimport sys\npath = sys.path\n"
    assert run(shell, cell).success
    ns = shell.user_ns
    second = keras_nbguard.runs("warm")[-1]
    assert child_pid(second) != spare.popen.pid  # a fresh process, not the spare
    assert "the pre-started process was not used" in second.isolated
    assert ns["where"] == os.getcwd()
    assert ns["seen"] == os.environ.get("NBGUARD_TEST_NEW")
    assert ns["path"][: len(sys.path)] == sys.path
    assert gone_after([spare.popen.pid], 1) == []


@pytest.mark.slow
def test_reloading_the_extension_closes_the_spare(shell):
    spares = []
    for _ in range(4):
        assert run(shell, PRESTART).success
        from keras_nbguard.isolation import _SPARES

        spares.append(_SPARES[keras_nbguard.get_session()].child.popen.pid)
        shell.run_line_magic("reload_ext", "keras_nbguard")
    assert gone_after([*spares, *our_children()], 1) == []


def our_children() -> list[int]:
    """This process's isolated children, zombies included."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "keras_nbguard.isolation.child" in " ".join(process.cmdline()):
                found.append(process.pid)
        except psutil.Error:  # a zombie, or gone already
            found.append(process.pid)
    return found


@pytest.mark.slow
def test_a_big_array_with_a_small_dev_shm_goes_another_way(tmp_path):
    """Docker's /dev/shm is 64 MiB; here an 8 MiB one, in a mount namespace of this test's own."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command here")
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs -o size=8m tmpfs /dev/shm",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.strip()[:200]}")
    script = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("%load_ext keras_nbguard")
        shell.run_cell("import numpy as np\\nbig = np.arange(20 * 2**17, dtype='float64')\\n"
                       "small = np.arange(2**17, dtype='float64')")
        result = shell.run_cell('''%%kerasrun --isolate --label shm --quiet
        total = float(big.sum()) + float(small.sum())
        mapped = (not big.flags.writeable, not small.flags.owndata)
        ''')
        assert result.success, result.error_in_exec
        import keras_nbguard
        (record,) = keras_nbguard.runs("shm")
        ns = shell.user_ns
        print("TOTAL", ns["total"] == float(ns["big"].sum()) + float(ns["small"].sum()))
        print("MAPPED", ns["mapped"])
        print("NOTE", record.isolated)
    """)
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=8m tmpfs /dev/shm && exec {sys.executable} -c "$0"',
            script,
        ],
        env=env_with_path(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]  # not -7: no SIGBUS
    out = done.stdout
    assert "TOTAL True" in out and "MAPPED (True, True)" in out
    assert "sent through a temporary file: /dev/shm has" in out  # the 20 MiB one


# -- issue 24 item 6: an isolated run told truly --------------------------------------------

FIT = """%%kerasrun --isolate --label iso --quiet
import keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
hist = model.fit(np.ones((32, 4)), np.ones((32, 1)), epochs=1, verbose=0)
print("the user's own line")
"""


@pytest.mark.slow
def test_an_isolated_run_is_told_truly(shell):
    assert run(shell, "import numpy as np").success
    with capture_output() as seen:
        assert run(shell, FIT).success
    out = seen.stdout + seen.stderr
    assert "the user's own line" in out
    assert "cpu_feature_guard" not in out and "oneDNN" not in out  # TensorFlow's own banners
    (record,) = keras_nbguard.runs("iso")
    note = record.isolated
    assert re.search(
        r"start-up \d+\.\d\d s, sent 1 name [\d.,]+ (?:B|KiB|MiB), made there \d+\.\d\d s, "
        r"the cell \d+\.\d\d s, saved there \d+\.\d\d s, "
        r"back 1 model \+ 1 name [\d.,]+ (?:B|KiB|MiB) in \d+\.\d\d s",
        note,
    ), note
    # the kernel's wall, all of it, told in parts: a part nobody names was 3.3 s of 5.2 on
    # Keras' text example (the replayed setup lines and their imports, in the child)
    parts = [float(s) for s in re.findall(r"(\d+\.\d\d) s", note.split(";")[0])]
    assert 0.7 * record.wall_seconds <= sum(parts) <= record.wall_seconds + 0.01, (note, record)
    rows = dict(record.summary_rows())
    assert rows["wall"].endswith("the kernel's, in parts on the isolated line")
    ns = shell.user_ns
    assert ns["hist"].model is ns["model"]  # one model came back, the History holds it
    leaks = keras_nbguard.get_session().leaks()
    mine = [leak for leak in leaks.leaks if leak.run_label == "iso"]
    assert len(mine) == 1 and mine[0].run_number == record.run_number
    assert any(path.startswith("model") for path in mine[0].paths)


# -- Ray ---------------------------------------------------------------------------------------


def test_an_unreachable_ray_cluster_is_a_clear_error(shell, monkeypatch):
    pytest.importorskip("ray", reason="Ray is not installed (the test extra installs it)")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with capture_output() as seen:
        assert not run(shell, '%%kerasrun --cluster ray --sweep "a=1,2"\nb = a\n').success
    out = seen.stdout + seen.stderr
    assert "can't reach the Ray cluster at 127.0.0.1:1 (RAY_ADDRESS)" in out
    assert keras_nbguard.runs() == []


RAY_KERNEL = """
import keras_nbguard
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("%load_ext keras_nbguard")
result = shell.run_cell('''%%kerasrun --cluster ray --sweep "units=2,4" --label apart --quiet
import os
width = units * 2
pid = os.getpid()
''')
print("RUNS", sorted((r.params["units"], r.status) for r in keras_nbguard.runs("apart")))
print("VALUES", sorted(v["width"] for v in (result.result or {}).values()))
print("ERROR", result.error_in_exec)
"""


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, IPv4 through IPv6
    return (mapped or address).is_loopback


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_processes(temp: str, port: int | None = None) -> list[psutil.Process]:
    """The cluster's processes: named by its temp dir, or (Ray's client server) by its port."""
    found = []
    for process in psutil.process_iter():
        try:
            line = " ".join(process.cmdline())
            if temp in line or (port is not None and f"--address=127.0.0.1:{port}" in line):
                found.append(process)
                found.extend(process.children(recursive=True))
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def ray_apart(tmp_path_factory):
    """A Ray cluster started apart from any kernel (``ray start --head``) on 127.0.0.1, with
    Ray's default token authentication; only its own processes are ended after (``ray stop``
    would end every Ray on the machine)."""
    pytest.importorskip("ray", reason="Ray is not installed (the test extra installs it)")
    import tempfile

    home = tmp_path_factory.mktemp("ray_home")
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's sockets are made in it
    port = _free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }  # else Ray turns 127.0.0.1 into outside
    env.pop("RAY_ADDRESS", None)
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    # Ray >= 2.60 turns token authentication on and no longer makes the token at `ray start`
    # ("no authentication token was found"): made first, as its message says (older Rays have no
    # such command and make their own, or none)
    subprocess.run([ray, "get-auth-token", "--generate"], env=env, capture_output=True, timeout=120)
    with one_ray_at_a_time():  # not beside another test's Ray (helpers.py)
        try:
            started = subprocess.run(
                [
                    ray,
                    "start",
                    "--head",
                    "--node-ip-address",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--num-cpus",
                    "2",
                    "--include-dashboard=false",
                    "--disable-usage-stats",
                    "--temp-dir",
                    temp,
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=400,
            )
            if started.returncode != 0:
                last = (started.stderr or started.stdout).strip().splitlines()[-1:]
                pytest.skip(f"`ray start` failed on this machine: {last}")
            token = home / ".ray" / "auth_token"
            yield f"127.0.0.1:{port}", token.read_text().strip() if token.exists() else None, temp
        finally:
            for process in _cluster_processes(temp, port):
                with contextlib.suppress(psutil.Error):
                    process.kill()
            shutil.rmtree(temp, ignore_errors=True)


def _ray_kernel(tmp_path, address: str, token: str | None) -> subprocess.CompletedProcess:
    env = {
        **env_with_path(tmp_path),
        "RAY_ADDRESS": address,
        "RAY_USAGE_STATS_ENABLED": "0",
        "HOME": str(tmp_path),
    }  # not the cluster's home: the token comes from the variable
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-c", RAY_KERNEL], env=env, capture_output=True, text=True, timeout=400
    )


@pytest.mark.slow
def test_a_sweep_on_a_ray_cluster_started_apart(ray_apart, tmp_path):
    address, token, temp = ray_apart
    done = _ray_kernel(tmp_path, address, token)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RUNS [(2, 'ok'), (4, 'ok')]" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "VALUES [4, 8]" in done.stdout
    listening = {
        c.laddr.ip
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.pid in {p.pid for p in _cluster_processes(temp)}
    }
    assert all(_loopback(ip) for ip in listening), listening  # nothing on the outside address


@pytest.mark.slow
def test_a_ray_cluster_that_refuses_the_token_is_a_clear_error(ray_apart, tmp_path):
    address, token, _ = ray_apart
    if token is None:
        pytest.skip("this Ray cluster started without token authentication")
    done = _ray_kernel(tmp_path, address, "0" * len(token))
    said = done.stdout + done.stderr
    # Ray <= 2.59 raised at once; 2.60 retries a refused token until our limit
    assert "refused this kernel" in said and "token" in said, done.stdout[-2000:]
    assert "RUNS []" in done.stdout
