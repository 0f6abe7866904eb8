"""The history page's server extension in a real Jupyter server: the server's own authentication,
the JSON API, the page, and a database that is missing, empty or corrupt.

The database is written with ``keras_nbguard.store.history_db.Store`` as kernels write it: notebook
a.ipynb has three runs, a restart of the same kernel id (a new process), then a run in another
kernel left 'running' by a process that is gone (a killed kernel); b <x>.ipynb has a failed run
(and a name to escape); live.ipynb has a run still going in a live process (this test's). Decided
here: a run left 'running' whose process is gone is *reported* as died (``died`` and
``died_inferred`` true, ``stored_status`` 'running') and not written back; the notebook's next
kernel marks it died in the database (``Store.mark_dead_runs``). About 10 s (two servers)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_lab import jupyter_server

from keras_nbguard.records.run import GpuReading, RunRecord
from keras_nbguard.server.history import read_runs
from keras_nbguard.store.history_db import RunKey, Store, start_row

pytestmark = pytest.mark.kernel

MB = 2**20
NOTEBOOK_B = "dir/b <x>.ipynb"


def record(
    label: str,
    number: int,
    notebook: str,
    kernel: str,
    started: float,
    status: str = "ok",
    fit: float | None = 1.0,
) -> RunRecord:
    return RunRecord(
        label=label,
        status=status,
        started_at=started,
        wall_seconds=2.0,
        fit_seconds=fit,
        fits=(),
        rss_before=190 * MB,
        rss_after=200 * MB,
        rss_peak=205 * MB,
        gpu=GpuReading(reason="no GPU: NVML not found"),
        cleared=True,
        traces=3,
        run_number=number,
        notebook=notebook,
        kernel_id=kernel,
        error="ValueError: bad shape" if status == "error" else None,
    )


def fill(path: Path) -> None:
    """Runs as kernels leave them: finished, restarted, killed mid-run, still going."""
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    gone_started = psutil.Process(gone.pid).create_time()
    gone.wait()  # its pid and start time: a kernel that was killed
    store = Store(str(path))
    t0 = time.time() - 100
    first = RunKey("a.ipynb", "cell-1", "kernel-a", 1111, 1.0)
    for i in range(3):
        store.run_started(start_row(f"a{i}", first, "mlp", i + 1, t0 + i, None))
        store.add_samples(f"a{i}", [(0.1, 150 * MB), (0.2, 200 * MB)])
        store.run_finished(
            f"a{i}", record("mlp", i + 1, "a.ipynb", "kernel-a", t0 + i, fit=1.0 + i / 10)
        )
    restarted = RunKey("a.ipynb", "cell-1", "kernel-a", 2222, 2.0)  # same id, new process
    store.run_started(start_row("a3", restarted, "mlp", 1, t0 + 10, None))
    store.run_finished("a3", record("mlp", 1, "a.ipynb", "kernel-a", t0 + 10, fit=None))
    killed = RunKey("a.ipynb", "cell-2", "kernel-b", gone.pid, gone_started)
    store.run_started(start_row("a4", killed, "big", 1, t0 + 20, 100 * MB))
    store.add_samples("a4", [(0.5, 300 * MB), (1.0, 900 * MB)])
    failed = RunKey(NOTEBOOK_B, "cell-1", "kernel-c", 3333, 3.0)
    store.run_started(start_row("b0", failed, "cnn", 1, t0 + 5, None))
    store.run_finished(
        "b0",
        dataclasses.replace(
            record("cnn", 1, NOTEBOOK_B, "kernel-c", t0 + 5, status="error"),
            findings=("retracing: 40 tf.function traces in cnn #1 <b> — %nbguard diagnose",),
        ),
    )
    going = RunKey("live.ipynb", "cell-1", "kernel-d", os.getpid(), psutil.Process().create_time())
    store.run_started(start_row("c0", going, "slow", 1, t0 + 30, 50 * MB))
    store.add_samples("c0", [(0.5, 60 * MB)])
    store.flush()
    store.close()


def get(url: str, token: str | None = None, header: bool = False) -> tuple[int, str, Any]:
    """(status, body, headers) without following redirects; the token in the URL or a header."""
    headers = {}
    if token and header:
        headers["Authorization"] = f"token {token}"
    elif token:
        url += ("&" if "?" in url else "?") + f"token={token}"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as reply:
            return reply.status, reply.read().decode(), reply.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace"), error.headers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server whose config (``KerasNbguard.db_path``) names the filled database; the env var
    names a file that does not exist, so the page shows runs only if the option wins."""
    tmp = tmp_path_factory.mktemp("server")
    db = tmp / "history" / "runs.sqlite"
    db.parent.mkdir()
    fill(db)
    config = tmp / "home" / "config"
    config.mkdir(parents=True)
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"KerasNbguard": {"db_path": str(db)}})
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KERAS_NBGUARD_DB", str(tmp / "not-this.sqlite"))
        with jupyter_server(tmp, "server") as running:
            yield running


def test_every_route_needs_the_servers_token(server):
    for path in ("keras-nbguard/api/notebooks", "keras-nbguard/api/runs?notebook=a.ipynb"):
        for token in (None, "wrong-token"):
            status, body, _ = get(f"{server.url}/{path}", token)
            assert status == 403, (path, token, status)  # the API: forbidden
            assert "a.ipynb" not in body and "mlp" not in body
    for path in ("keras-nbguard/", "keras-nbguard", "keras-nbguard/static/plotly.min.js"):
        for token in (None, "wrong-token"):
            status, body, headers = get(f"{server.url}/{path}", token)
            assert status == 302 and "/login" in headers["Location"], (path, token, status)
            assert "a.ipynb" not in body and "Plotly" not in body  # pages: off to the login


def test_notebooks_api(server):
    status, body, headers = get(
        f"{server.url}/keras-nbguard/api/notebooks", server.token, header=True
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["message"] is None
    notebooks = {n["notebook"]: n for n in reply["notebooks"]}
    assert set(notebooks) == {"a.ipynb", NOTEBOOK_B, "live.ipynb"}
    a = notebooks["a.ipynb"]
    assert (a["runs"], a["died"], a["running"], a["kernels"], a["restarts"]) == (5, 1, 0, 2, 1)
    assert a["labels"] == ["mlp", "big"]
    assert notebooks["live.ipynb"]["running"] == 1


def test_runs_api(server):
    status, body, _ = get(f"{server.url}/keras-nbguard/api/runs?notebook=a.ipynb", server.token)
    assert status == 200
    runs = json.loads(body)["runs"]
    assert [(r["label"], r["run_number"], r["status"]) for r in runs] == [
        ("mlp", 1, "ok"),
        ("mlp", 2, "ok"),
        ("mlp", 3, "ok"),
        ("mlp", 1, "ok"),
        ("big", 1, "died"),
    ]
    assert [r["change"] for r in runs] == [None, None, None, "kernel restarted", "new kernel"]
    assert [r["kernel_id"] for r in runs] == ["kernel-a"] * 4 + ["kernel-b"]
    killed = runs[-1]
    assert killed["died"] and killed["died_inferred"] and killed["stored_status"] == "running"
    assert (killed["rss_before"], killed["rss_after"], killed["rss_peak"]) == (
        300 * MB,
        900 * MB,
        900 * MB,
    )
    assert killed["fit_seconds"] is None and killed["gpu"]["tf_peak"] is None  # unknown: null
    assert runs[3]["fit_seconds"] is None
    assert runs[0]["fit_seconds"] == 1.0 and "rss_samples" not in runs[0]
    for key in ("started_at", "wall_seconds", "rss_before", "gpu", "label", "run_number"):
        assert key in runs[0]
    _, body, _ = get(
        f"{server.url}/keras-nbguard/api/runs?notebook=live.ipynb&samples=1", server.token
    )
    (going,) = json.loads(body)["runs"]
    assert going["status"] == "running" and not going["died"]
    assert going["rss_samples"] == [[0.5, 60 * MB]]
    _, body, _ = get(f"{server.url}/keras-nbguard/api/runs", server.token)  # every notebook
    every = json.loads(body)["runs"]
    assert len(every) == 7
    assert [r["change"] for r in every if r["notebook"] == "a.ipynb"] == [
        r["change"] for r in runs
    ]  # restarts are per notebook, whatever ran in between


def test_page_lists_notebooks_runs_and_restarts(server):
    status, page, headers = get(f"{server.url}/keras-nbguard/", server.token)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "a.ipynb" in page and "live.ipynb" in page
    assert "dir/b &lt;x&gt;.ipynb" in page and "<x>" not in page  # escaped
    assert "died (process gone)" in page and "kernel restarted" in page and "new kernel" in page
    assert ">n/a<" in page  # unknown fit time and GPU: n/a, never 0
    assert "ValueError: bad shape" in page  # the failed run's error, as the status's tooltip
    # its causes by kind, in words on hovering; escaped
    assert (
        "title='retracing: 40 tf.function traces in cnn #1 &lt;b&gt; — %nbguard diagnose'>"
        "retracing</td>"
    ) in page
    assert "RSS per run [MiB]" in page and "[MB]" not in page  # the units of the figures
    # a.ipynb's runs span a restart and a new kernel: the line breaks (a None) at each, marked
    section = page.split("data-notebook='a.ipynb'")[1]
    data = json.loads(section.split("class='nbguard-data'>")[1].split("</script>")[0])
    rss = next(t for t in data["traces"] if t["uid"] == "rss:after:mlp")
    assert rss["y"][3] is None and [m["label"] for m in data["restarts"]] == ["mlp"]
    assert "https://" not in page and "http://" not in page  # nothing from a CDN
    src = page.split("<script src='")[1].split("'")[0].replace("&amp;", "&")
    assert src.startswith("/keras-nbguard/static/plotly.min.js")
    status, script, _ = get(f"{server.url}{src}", server.token)
    assert status == 200 and "plotly.js" in script[:2000] and len(script) > 1_000_000
    status, _, _ = get(f"{server.url}/keras-nbguard", server.token)  # no trailing slash
    assert status == 200


def test_read_runs_asks_whether_the_process_lives(tmp_path):
    fill(tmp_path / "runs.sqlite")
    runs = read_runs(str(tmp_path / "runs.sqlite"), "a.ipynb", alive=lambda pid, started: True)
    assert runs[-1].record.status == "running" and not runs[-1].died


def test_missing_empty_and_corrupt_databases_are_messages(tmp_path):
    db = tmp_path / "nowhere" / "runs.sqlite"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KERAS_NBGUARD_DB", str(db))
        with jupyter_server(tmp_path, "server") as server:
            status, page, _ = get(f"{server.url}/keras-nbguard/", server.token)
            assert status == 200 and "No run history yet" in page and str(db) in page
            status, body, _ = get(f"{server.url}/keras-nbguard/api/runs", server.token)
            assert status == 200 and json.loads(body)["runs"] == []
            assert "does not exist" in json.loads(body)["message"]
            assert not db.parent.exists()  # viewing never creates the database
            db.parent.mkdir()
            db.write_bytes(b"")
            status, page, _ = get(f"{server.url}/keras-nbguard/", server.token)
            assert status == 200 and "No runs recorded yet" in page
            garbage = os.urandom(4096)
            db.write_bytes(garbage)
            status, page, _ = get(f"{server.url}/keras-nbguard/", server.token)
            assert status == 200 and "can&#x27;t be read" in page and "not a database" in page
            status, body, _ = get(f"{server.url}/keras-nbguard/api/notebooks", server.token)
            assert status == 200 and "not a database" in json.loads(body)["message"]
            assert db.read_bytes() == garbage  # left as it was: kernels move it aside
            assert sorted(p.name for p in db.parent.iterdir()) == ["runs.sqlite"]
            assert "Traceback" not in server.log_tail(20_000)
