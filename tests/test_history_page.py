"""The history page in a real browser, over runs a real kernel wrote.

A kernel (jupyter_client, ``JPY_SESSION_NAME`` naming the notebook) loads keras_nbguard and runs
a small ``%%kerasrun --label mlp`` cell, then a long ``--label big`` fit that is SIGKILLed once the
database shows it running with RSS samples. A Jupyter server then serves ``/keras-nbguard/`` to
headless Chromium (Playwright): the mlp run is there and the killed run reads "died". The kernel
is then restarted (same kernel id, a new process) and runs mlp again: the page marks the restart.
Skipped only when ``/usr/bin/chromium`` or Playwright is missing. About 20 s.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from jupyter_lab import CHROMIUM, chromium_page, jupyter_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="playwright is not installed (pip install -e '.[test]')",
    ),
]
NOTEBOOK = "experiments/history demo.ipynb"
SETUP = """
%load_ext keras_nbguard
import time
import numpy as np
import keras
x = np.random.default_rng(0).random((300, 8), dtype="float32")
y = np.random.default_rng(1).random((300, 1), dtype="float32")
def make_model():
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
"""
MLP = """%%kerasrun --label mlp --quiet
make_model().fit(x, y, epochs=2, verbose=0)
"""
BIG = """%%kerasrun --label big --quiet
class Slow(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.2)
make_model().fit(x, y, epochs=10_000, verbose=0, callbacks=[Slow()])
"""
ROWS = "() => [...document.querySelectorAll('tr.nbguard-run')].map(r => r.innerText)"
TRACES = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => p.data.map(t =>
    ({meta: t.meta, y: Array.from(t.y || []).filter(v => v !== null)})))"""


def run(client, code: str, timeout: float = 90) -> None:
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]


def running_with_samples(db: Path, label: str, timeout: float = 60) -> int:
    """The pid of ``label``'s run once the database shows it running with RSS samples."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                row = con.execute(
                    "SELECT pid, (SELECT COUNT(*) FROM samples WHERE run_id = id) "
                    "FROM runs WHERE label = ? AND status = 'running'",
                    (label,),
                ).fetchone()
            if row and row[1] > 0:
                return int(row[0])
        except sqlite3.OperationalError:  # not created yet
            pass
        time.sleep(0.2)
    raise AssertionError(f"no running {label!r} run with samples in {db} after {timeout} s")


def ended(db: Path, label: str, count: int, timeout: float = 10) -> None:
    """Until ``count`` runs of ``label`` have ended on disk: a kernel writes a run's end right
    after the cell's reply (session/later.py), so a reader as quick as this one can come first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            sql = "SELECT count(*) FROM runs WHERE label = ? AND status != 'running'"
            if con.execute(sql, (label,)).fetchone()[0] >= count:
                return
        time.sleep(0.05)
    raise AssertionError(f"{count} run(s) of {label!r} not ended in {db} after {timeout} s")


def start_kernel(tmp: Path, db: Path):
    from jupyter_client.manager import KernelManager

    env = {
        **os.environ,
        "KERAS_NBGUARD_DB": str(db),
        "JPY_SESSION_NAME": NOTEBOOK,
        "IPYTHONDIR": str(tmp / "ipython"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_NBGUARD_DASHBOARD": "static",
    }
    kernel_id = str(uuid.uuid4())  # the kernel reads its id from the connection file's name
    manager = KernelManager(
        kernel_name="python3",
        kernel_id=kernel_id,
        connection_file=str(tmp / f"kernel-{kernel_id}.json"),
        # sockets in files: a TCP port picked free can be taken before the kernel binds it
        # (a parallel test's kernel did: "Address already in use", the kernel died at start)
        transport="ipc",
        ip=str(tmp / "kernel"),
    )
    manager.start_kernel(env=env, cwd=str(tmp))
    return manager


def connect(manager):
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return client


def check_page(page, server, restarted: bool) -> list[str]:
    page.goto(f"{server.url}/keras-nbguard/?token={server.token}")
    page.wait_for_function(
        f"() => ({TRACES})().some(t => t.meta === 'fit:fit:mlp')", timeout=20_000
    )
    assert NOTEBOOK in page.inner_text("h2")
    rows = page.evaluate(ROWS)
    mlp = [r for r in rows if "\tmlp\t" in r]
    big = [r for r in rows if "\tbig\t" in r]
    assert len(mlp) == (2 if restarted else 1) and all("\tok\t" in r for r in mlp), rows
    assert len(big) == 1 and "died" in big[0], rows
    fit_points = sum(len(t["y"]) for t in page.evaluate(TRACES) if t["meta"] == "fit:fit:mlp")
    assert fit_points == len(mlp)
    assert any(t["meta"] == "rss:not ok" and t["y"] for t in page.evaluate(TRACES))  # big, died
    return rows


def test_history_page_shows_runs_of_a_killed_and_restarted_kernel(tmp_path):
    db = tmp_path / "history" / "runs.sqlite"
    manager = start_kernel(tmp_path, db)
    client = connect(manager)
    try:
        run(client, SETUP)
        run(client, MLP)
        ended(db, "mlp", 1)
        client.execute(BIG)  # not waited for: killed mid-fit
        pid = running_with_samples(db, "big")
        assert pid == manager.provisioner.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while manager.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not manager.is_alive()
        client.stop_channels()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KERAS_NBGUARD_DB", str(db))  # the server reads what the kernels wrote
            with jupyter_server(tmp_path / "server", "server") as server, chromium_page() as page:
                try:
                    rows = check_page(page, server, restarted=False)
                    assert "died (process gone)" in next(r for r in rows if "\tbig\t" in r)
                    # the same kernel id, a new process: its %load_ext marks 'big' died for good
                    manager.restart_kernel(now=True)
                    client = connect(manager)
                    run(client, SETUP)
                    run(client, MLP)
                    ended(db, "mlp", 2)
                    rows = check_page(page, server, restarted=True)
                    big = next(r for r in rows if "\tbig\t" in r)
                    assert "died" in big and "process gone" not in big  # now in the database
                    assert all(f"\t{manager.kernel_id[:8]}\t" in r for r in rows)
                    assert "kernel restarted" in page.inner_text("table.nbguard-runs")
                    assert page.errors == []
                except Exception:
                    page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
                    print(server.log_tail())
                    raise
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
