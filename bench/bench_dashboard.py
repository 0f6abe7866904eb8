"""Dashboard cost: what making it costs a fresh kernel, and adding a run with 500 runs of history.

    python bench/bench_dashboard.py             # about 30 s
    python bench/bench_dashboard.py --browser   # + JupyterLab in Chromium: ~2 min

1. Making the dashboard, each in a fresh process (as a fresh kernel would): our widget (ipywidgets
   + anywidget, plotly.js drawn in the page) side by side with what it replaced, plotly's
   ``go.FigureWidget`` of the same five panels (its import chain: plotly.io → nbformat →
   jsonschema → rfc3987_syntax), and the state each sends to the page. Goal: ≤ 25 MiB.
2. Adding a run to a dashboard with 500 runs: time, and the bytes of the messages sent (encoded
   to JSON as ipykernel does, then dropped). Budget: ≤ 20 ms a run, a few KiB.
3. ``--browser``: a fresh kernel in JupyterLab (headless Chromium): the time from running the
   dashboard cell to the interactive figure on screen, and when the next queued cell ran.
   Goal: ≤ 1.5 s, the next cell at once. This machine's load is printed beside it (the goal is
   for an idle 2-CPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 2**20

MAKE = r"""
import json, os, sys, time, psutil
sys.path.insert(0, {root!r})
import comm
import ipykernel.ipkernel  # what a kernel has loaded before any cell
import keras_nbguard  # and %load_ext keras_nbguard: its session
from keras_nbguard.session.core import Session
session = Session()
process = psutil.Process()
rss, t0 = process.memory_info().rss, time.perf_counter()
if {which!r} == "ours":
    from keras_nbguard.board.widget import Dashboard
    board = Dashboard(session, mode="widget")
    state = [w.get_state() for w in (board.chart, board.widget)]
else:
    import ipywidgets
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    specs = [[{{}}, {{}}], [{{}}, {{}}], [{{"colspan": 2}}, None]]
    fig = make_subplots(rows=3, cols=2, specs=specs)
    widget = go.FigureWidget(fig)
    state = [widget.get_state()]
seconds = time.perf_counter() - t0
size = len(json.dumps(state, default=str))
print(json.dumps({{"seconds": seconds, "mib": (process.memory_info().rss - rss) / 2**20,
                  "state": size,
                  "modules": sorted({{m.split(".")[0] for m in sys.modules}} & {{
                      "plotly", "nbformat", "jsonschema", "rfc3987_syntax", "anywidget"}})}}))
"""


def make_in_a_fresh_process(which: str) -> dict:
    code = MAKE.format(root=ROOT, which=which)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def adding_runs() -> tuple[list[float], list[int]]:
    import comm

    sent: list[int] = []

    class EncodingComm(comm.DummyComm):  # what ipykernel's comm costs on top of a no-op
        def publish_msg(
            self,
            msg_type: str,
            data: dict | None = None,
            metadata: dict | None = None,
            buffers: list | None = None,
            **keys: object,
        ) -> None:
            sent.append(len(json.dumps(data, default=str, ensure_ascii=False)))

    comm.create_comm = EncodingComm  # before ipywidgets makes any widget
    sys.path.insert(0, ROOT)
    from keras_nbguard.board.widget import Dashboard
    from keras_nbguard.records.run import FitRecord, GpuReading, RunRecord
    from keras_nbguard.session.core import Session

    labels = ("mlp", "cnn", "mlp wide")

    def record(i: int) -> RunRecord:
        rss = 500 * MB + i * 4 * MB
        return RunRecord(
            label=labels[i % 3],
            status="error" if i % 25 == 24 else "ok",
            started_at=time.time() + i,
            wall_seconds=0.7,
            fit_seconds=0.6 + 0.001 * i,
            fits=(FitRecord(0.6, 3, (0.4, 0.1, 0.1), 0.0, 32, 8, "sequential"),),
            rss_before=rss,
            rss_after=rss + 4 * MB,
            rss_peak=rss + 6 * MB,
            gpu=GpuReading(reason="no GPU: TensorFlow sees none"),
            cleared=True,
            traces=1,
            run_number=i // 3 + 1,
            rss_samples=tuple((t / 100, rss + t * 1000) for t in range(200)),
        )

    session = Session()
    session.past.mine.extend(record(i) for i in range(500))
    board = Dashboard(session, mode="widget")
    times, sizes = [], []
    for i in range(500, 540):  # what Session.finish does: add, then tell the listeners
        rec = record(i)
        sent.clear()
        t0 = time.perf_counter()
        session.past.add(rec)
        board._on_record(rec)
        times.append((time.perf_counter() - t0) * 1000)
        sizes.append(sum(sent))
    return times, sizes


def in_the_browser() -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import tempfile
    from pathlib import Path

    from jupyter_lab import chromium_page, jupyter_server, kernel_eval, wait_idle

    cells = (
        "%load_ext keras_nbguard\nimport keras_nbguard, time",
        "shown_at = time.time()\nkeras_nbguard.dashboard()",
        "probe_at = time.time()",
    )
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": s,
            }
            for i, s in enumerate(cells)
        ],
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        jupyter_server(Path(tmp)) as server,
        chromium_page() as page,
    ):
        (server.root / "b.ipynb").write_text(json.dumps(notebook))
        page.goto(server.page_url("b.ipynb"))
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        wait_idle(page, 120)
        nb = "window.jupyterapp.shell.currentWidget"
        page.evaluate(f"{nb}.content.activeCellIndex = 0")
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
        wait_idle(page, 60)
        page.evaluate(f"{nb}.content.activeCellIndex = 1")
        t0 = time.perf_counter()
        page.evaluate(
            "() => { const run = c => window.jupyterapp.commands.execute(c); "
            "run('notebook:run-cell-and-select-next'); run('notebook:run-cell'); }"
        )
        page.wait_for_function(
            "() => !!document.querySelector('.jp-OutputArea-output .js-plotly-plot .main-svg')",
            timeout=120_000,
            polling=20,
        )
        figure = time.perf_counter() - t0
        wait_idle(page, 60)
        t1 = time.perf_counter()
        next_cell = float(kernel_eval(page, "print(probe_at - shown_at)"))
        idle = time.perf_counter() - t1
        # the same browser, a blank page: plotly.js alone (what no front end can go under)
        page.goto(
            server.page_url("b.ipynb").split("/lab/")[0] + "/keras-nbguard/static/"
            f"plotly.min.js?token={server.token}"
        )
        alone = page.evaluate("""async () => {
            const t0 = performance.now();
            document.open(); document.write('<html><body><div id=p></div></body></html>');
            document.close();
            await new Promise((ok, no) => { const s = document.createElement('script');
                s.onload = ok; s.onerror = no; s.src = location.href;
                document.head.appendChild(s); });
            await Plotly.newPlot('p', [{y: [1, 2, 3]}]);
            return (performance.now() - t0) / 1000; }""")
    return {"figure": figure, "next_cell": next_cell, "idle": idle, "alone": alone}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--browser", action="store_true")
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print("making the dashboard in a fresh process     time     RSS added  state sent  imports")
    for which, name in (
        ("ours", "ours (anywidget + plotly.js in the page)"),
        ("plotly", "plotly go.FigureWidget (before)"),
    ):
        runs = [make_in_a_fresh_process(which) for _ in range(3)]
        best = min(runs, key=lambda r: r["seconds"])
        mib = statistics.median(r["mib"] for r in runs)
        print(
            f"  {name:42s} {best['seconds']:5.2f} s  {mib:6.1f} MiB  "
            f"{best['state'] / 1024:7.0f} KiB  {', '.join(best['modules'])}"
        )
    times, sizes = adding_runs()
    print(
        f"add one run, 500-540 runs:   median {statistics.median(times):.1f} ms, max "
        f"{max(times):.1f} ms (budget 20 ms); messages {statistics.median(sizes) / 1024:.1f} "
        f"KiB a run"
    )
    if args.browser:
        seen = in_the_browser()
        print(
            f"browser (fresh kernel, JupyterLab, Chromium): interactive figure "
            f"{seen['figure']:.2f} s after the click (goal 1.5 s on an idle machine); next cell "
            f"{seen['next_cell']:.2f} s after the dashboard cell began; a request at Idle "
            f"answered in {seen['idle']:.2f} s; load average now {os.getloadavg()[0]:.1f}"
        )
        print(
            f"  plotly.js alone in a blank page of the same browser: {seen['alone']:.2f} s "
            f"(loading it and a first plot)"
        )


if __name__ == "__main__":
    main()
