"""What a diagnosis is made of: a ``Finding``, the ``Findings`` list, the robust ``Trend`` the
causes are judged with, and every threshold they use, in this one place (the README lists them).

Trends across runs and across epochs use a robust slope (Theil–Sen: the median of the pairwise
slopes) and are named only when the rise is large (``RISE_SHARE`` of the median), well beyond
the series' own spread (``NOISE_FACTOR`` × a MAD-based spread of the residuals), and steady (a
Mann–Kendall test, ``TREND_P``): fit times on a shared machine vary ±10% run to run, a burst of
load from elsewhere slows two or three runs in a row, and a clean label must raise no finding.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .records import RunRecord

# -- every threshold, in one place ------------------------------------------------------------
MIN_RUNS = 5  # runs of a label (after its first, a warm-up) before a trend across runs is judged
MIN_EPOCHS = 5  # epochs of a fit (after its first, which traces) before a trend within it
RISE_SHARE = 0.20  # a trend's rise over its window, as a share of the series' median
NOISE_FACTOR = 3.0  # ...and as a multiple of the series' own spread
TREND_P = 0.01  # ...and rising run after run: a Mann–Kendall test's one-sided p-value at most
GROWTH_BYTES_PER_RUN = 2 * 2**20  # RSS after each run, growing this much a run at least
CALLBACK_SHARE = 0.10  # the user's callbacks' share of the fit time
WRITER_BYTES = 64 * 2**10  # a callback method writing this much over a fit is checkpointing
CHECKPOINT_SHARE = 0.10  # ...and named when its share of the fit time is this at least
INPUT_SHARE = 0.50  # making a Python input's batches, as a share of the fit: it waits for them
TRACES_PER_FIT = 4  # tf.function traces per fit beyond which retracing is named
DATASET_RUNS = 3  # runs in a row (after the label's first) that traced a tf.data pipeline anew
GPU_HELD_SHARE = 0.80  # the process holds this share of the GPU's memory...
GPU_USED_SHARE = 0.50  # ...while TensorFlow's peak use is under this share of what it holds
WINDOW = 20  # the latest runs of a label looked at


@dataclass(frozen=True)
class Finding:
    """One cause, in words: ``message`` has the number, ``advice`` one thing to do."""

    kind: str
    message: str
    advice: str
    evidence: tuple[tuple[str, str], ...]  # the figures it rests on, as shown
    runs: tuple[str, ...]  # the runs it is about: "mlp #3"
    weight: float = 1.0  # orders findings: the size of the effect, roughly a share

    def text(self) -> str:
        return f"{self.kind}: {self.message} → {self.advice}"


class Findings(list[Finding]):
    """``diagnose()``'s answer: most important first; shows itself in a notebook."""

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("\n".join(f.text() for f in self) if self else "no finding: nothing stands out")

    def _repr_html_(self) -> str:
        if not self:
            return "<p>keras_nbguard: no finding — nothing stands out.</p>"
        items = "".join(
            f"<li><b>{html.escape(f.kind)}</b>: {html.escape(f.message)}<br>"
            f"<i>{html.escape(f.advice)}</i></li>"
            for f in self
        )
        return f"<ul>{items}</ul>"


class Trend:
    """A robust straight line through ``ys`` (at x = 0, 1, ...)."""

    def __init__(self, ys: Sequence[float]) -> None:
        import statistics  # ~10 ms, and no run needs it before its record: not at %load_ext

        n = len(ys)
        self.slope = statistics.median(
            (ys[j] - ys[i]) / (j - i) for i in range(n) for j in range(i + 1, n)
        )
        intercept = statistics.median(y - self.slope * x for x, y in enumerate(ys))
        residuals = [y - (intercept + self.slope * x) for x, y in enumerate(ys)]
        self.spread = 1.4826 * statistics.median(abs(r) for r in residuals)
        self.median = statistics.median(ys)
        self.rise = self.slope * (n - 1)
        self.share = self.rise / self.median if self.median > 0 else 0.0
        self.p_value = _mann_kendall_p(ys)

    def rises(self) -> bool:
        return (
            self.share >= RISE_SHARE
            and self.rise >= NOISE_FACTOR * self.spread
            and self.p_value <= TREND_P
        )


def _mann_kendall_p(ys: Sequence[float]) -> float:
    """One-sided p-value that ``ys`` rises, by the Mann–Kendall test (normal approximation)."""
    n = len(ys)
    if n < 3:
        return 1.0
    s = sum((ys[j] > ys[i]) - (ys[j] < ys[i]) for i in range(n) for j in range(i + 1, n))
    sigma = math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    z = (s - 1) / sigma if s > 0 else 0.0
    return 0.5 * math.erfc(z / math.sqrt(2))


def name_of(run: RunRecord) -> str:
    return f"{run.label} #{run.run_number}"


def names(runs: Iterable[RunRecord]) -> tuple[str, ...]:
    return tuple(name_of(r) for r in runs)


def span(runs: Sequence[RunRecord]) -> str:
    return f"#{runs[0].run_number}–#{runs[-1].run_number}"
