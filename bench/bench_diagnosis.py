"""What the diagnosis costs a run, and that it stays flat however long the notebook lives.

    .venv/bin/python bench/bench_diagnosis.py

After every run the session diagnoses the run's label (``diagnosis.with_findings``: the trends
across runs, the run's own causes) for the summary's finding lines; the dashboard and
``%nbguard diagnose`` diagnose the whole kernel (``diagnosis.diagnose``) when shown. Both read a
window of recent runs (``findings.WINDOW``), so the cost must not grow with the history. Records
are stand-ins (pure data, no TensorFlow): a label with 5 to 1000 earlier runs whose RSS grows
slowly, as a real label's does. Prints the best of 7 rounds of 200 calls, in ms per call.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keras_nbguard.diagnosis.diagnose import diagnose, with_findings
from keras_nbguard.records.calls import FitRecord
from keras_nbguard.records.run import GpuReading, RunRecord

MiB = 2**20
HISTORY = (5, 20, 100, 1000)


def record(n: int, label: str = "mlp") -> RunRecord:
    fit = 1.0 + (n % 3) / 100
    return RunRecord(
        label=label,
        status="ok",
        started_at=float(n),
        wall_seconds=fit + 0.2,
        fit_seconds=fit,
        fits=(FitRecord(seconds=fit, epochs=2, epoch_seconds=(0.6, fit - 0.6), steps=8),),
        rss_before=(500 + n) * MiB,
        rss_after=(500 + n) * MiB,
        rss_peak=(520 + n) * MiB,
        gpu=GpuReading(reason="no GPU"),
        cleared=True,
        traces=3,
        run_number=n,
        traced=(("one_step_on_iterator", 3),),
        signatures=(("one_step_on_iterator", 2),),
        kernel_id="k",
        pid=1,
    )


def best_ms(call, rounds: int = 7, calls: int = 200) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - t) / calls * 1000)
    return min(times)


def main() -> None:
    print("earlier runs of the label | after each run (with_findings) | diagnose(), 3 labels")
    for n in HISTORY:
        runs = [record(i + 1) for i in range(n)]
        kernel = [record(i + 1, label) for i in range(n) for label in ("mlp", "cnn", "gan")]
        after = best_ms(lambda runs=runs: with_findings(runs[-1], runs[:-1], print))
        shown = best_ms(lambda kernel=kernel: diagnose(kernel), calls=20)
        print(f"{n:>25} | {after:>27.3f} ms | {shown:>8.3f} ms")


if __name__ == "__main__":
    main()
