"""Dashboard cost: adding a run to the widget with 500 runs of history. Prints figures.

    python bench/bench_dashboard.py           # about 10 s (most of it importing plotly)

No kernel is needed: widget messages go to a comm that JSON-encodes them the way ipykernel does
(so serialization is counted, and their size reported), then drops them. Budget: ≤20 ms a run.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import comm

SENT: list[int] = []


class EncodingComm(comm.DummyComm):
    """What ipykernel's comm costs us on top of a no-op: encoding each message to JSON."""

    def publish_msg(self, msg_type: str, data: dict | None = None, metadata: dict | None = None,
                    buffers: list | None = None, **keys: object) -> None:
        SENT.append(len(json.dumps(data, default=str, ensure_ascii=False)))


comm.create_comm = EncodingComm  # before ipywidgets makes any widget

from keras_nbguard.figures import figure_data  # noqa: E402
from keras_nbguard.records import FitRecord, GpuReading, RunRecord  # noqa: E402
from keras_nbguard.session import Session  # noqa: E402
from keras_nbguard.widget import Dashboard  # noqa: E402

MB = 2**20
LABELS = ("mlp", "cnn", "mlp wide")


def record(i: int) -> RunRecord:
    """A plausible run: a few labels, RSS creeping up, every 25th run failed."""
    label = LABELS[i % len(LABELS)]
    rss = 500 * MB + i * 4 * MB
    return RunRecord(
        label=label, status="error" if i % 25 == 24 else "ok", started_at=time.time() + i,
        wall_seconds=0.7, fit_seconds=0.6 + 0.001 * i,
        fits=(FitRecord(0.6, 3, (0.4, 0.1, 0.1), 0.0, 32, 8, "sequential"),),
        rss_before=rss, rss_after=rss + 4 * MB, rss_peak=rss + 6 * MB,
        gpu=GpuReading(reason="no GPU: TensorFlow sees none"), cleared=True, traces=1,
        run_number=i // len(LABELS) + 1,
        rss_samples=tuple((t / 100, rss + t * 1000) for t in range(200)),
    )


def timed(fn: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    history = [record(i) for i in range(500)]
    session = Session()
    session.past.mine.extend(history)
    t0 = time.perf_counter()
    board = Dashboard(session, mode="widget")
    built = time.perf_counter() - t0

    fd = timed(lambda: figure_data(session.history), 20)
    memo: dict = {}
    figure_data(session.history, memo)
    fd_memo = timed(lambda: figure_data(session.history, memo), 20)
    adds, sizes = [], []
    for i in range(500, 540):  # what Session.finish does: append, then notify the listeners
        rec = record(i)
        SENT.clear()
        t0 = time.perf_counter()
        session.past.add(rec)
        board._on_record(rec)
        adds.append((time.perf_counter() - t0) * 1000)
        sizes.append(sum(SENT))
    board._live = ([t / 20 for t in range(1200)], [500.0 + t for t in range(1200)], [0.1] * 30)
    live = timed(board._push_live, 20)

    def med(xs: list[float]) -> str:
        return f"median {statistics.median(xs):.1f} ms, max {max(xs):.1f} ms"

    print(f"python {sys.version.split()[0]}; build widget (imports plotly) {built:.2f} s")
    print(f"figure_data, 500 runs:          {med(fd)}; with hover texts memoized {med(fd_memo)}")
    print(f"add one run, 500-540 runs:      {med(adds)} "
          f"(budget 20 ms); {statistics.median(sizes) / 1024:.0f} KiB of widget messages")
    print(f"live push, 1200 RSS points:     {med(live)} (at most 4 a second)")


if __name__ == "__main__":
    main()
