"""The history page for a notebook with many runs: reading the database and rendering the page,
as the server's worker thread does for each request.

    python bench/bench_history_page.py              # 10,000 runs: about a minute to build
    python bench/bench_history_page.py --runs 2000

Builds a database of its own (a temp dir) with ``--runs`` finished runs of one notebook, each
with a 200-point RSS series and two fits, through the Store a kernel uses; then times
``read_runs`` + ``render`` (median of 5) and prints the page's size. Goal: under a second for
10,000 runs. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_nbguard.records.run import FitRecord, GpuReading, RunRecord
from keras_nbguard.server.history import by_notebook, read_runs
from keras_nbguard.server.page import render
from keras_nbguard.store.history_db import RunKey, Store, start_row

NOTEBOOK = "/home/me/train.ipynb"
MB = 2**20


def record(i: int) -> RunRecord:
    fit = FitRecord(
        seconds=1.2,
        epochs=3,
        epoch_seconds=(0.6, 0.3, 0.3),
        callback_seconds=0.0,
        batch_size=32,
        steps=64,
    )
    return RunRecord(
        label=f"mlp{i % 3}",
        status="ok" if i % 50 else "error",
        started_at=1.7e9 + i * 10,
        wall_seconds=1.5,
        fit_seconds=2.4,
        fits=(fit, fit),
        rss_before=500 * MB + i * 1000,
        rss_after=510 * MB + i * 1000,
        rss_peak=520 * MB,
        gpu=GpuReading(reason="no GPU"),
        cleared=True,
        traces=3,
        run_number=i // 3 + 1,
        notebook=NOTEBOOK,
        kernel_id="k1",
        pid=1,
        rss_samples=tuple((t * 0.01, 500 * MB + t) for t in range(200)),
    )


def build(path: str, runs: int) -> None:
    store = Store(path)
    key = RunKey(NOTEBOOK, None, "k1", 1, 1.0)
    for i in range(runs):
        r = record(i)
        store.run_started(
            start_row(f"run-{i}", key, r.label, r.run_number, r.started_at, r.rss_before)
        )
        store.run_finished(f"run-{i}", r)
    store.flush(600)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "runs.sqlite")
        t0 = time.perf_counter()
        build(path, args.runs)
        print(
            f"built {args.runs:,} runs in {time.perf_counter() - t0:.0f} s "
            f"({os.path.getsize(path) / MB:.0f} MiB)"
        )
        times, size = [], 0
        for _ in range(5):
            t0 = time.perf_counter()
            runs = read_runs(path, alive=lambda pid, started: False, samples=False)
            page = render(by_notebook(runs), db=path, message=None, plotly_url="plotly.min.js")
            times.append(time.perf_counter() - t0)
            size = len(page)
        print(
            f"history page, {args.runs:,} runs of one notebook: median "
            f"{statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f}, max "
            f"{max(times) * 1000:.0f}); page {size / MB:.1f} MiB; goal < 1000 ms"
        )


if __name__ == "__main__":
    main()
