"""Diagnosis in words: the cause of a slower or fatter run, with the number behind it and one
thing to do, from the runs' records alone (pure: no model, no TensorFlow).

Trends across runs and across epochs use a robust slope (Theil–Sen: the median of the pairwise
slopes) and are named only when the rise is both large (``RISE_SHARE`` of the median) and well
beyond the series' own spread (``NOISE_FACTOR`` × a MAD-based spread of the residuals): fit
times on a shared machine vary ±10% run to run, and a clean label must raise no finding. Every
threshold is here, and the README lists them.
"""

from __future__ import annotations

import dataclasses
import html
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .formatting import fmt_bytes, fmt_seconds, fmt_stale
from .records import RunRecord

# -- every threshold, in one place ------------------------------------------------------------
MIN_RUNS = 5  # runs of a label (after its first, a warm-up) before a trend across runs is judged
MIN_EPOCHS = 5  # epochs of a fit (after its first, which traces) before a trend within it
RISE_SHARE = 0.20  # a trend's rise over its window, as a share of the series' median
NOISE_FACTOR = 3.0  # ...and as a multiple of the series' own spread
GROWTH_BYTES_PER_RUN = 2 * 2**20  # RSS after each run, growing this much a run at least
CALLBACK_SHARE = 0.10  # the user's callbacks' share of the fit time
TRACES_PER_FIT = 4  # tf.function traces per fit beyond which retracing is named
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


def diagnose(records: Sequence[RunRecord]) -> Findings:
    """Findings for ``records`` (one kernel's runs, oldest first; any labels), most important
    first."""
    findings: list[Finding] = []
    by_label: dict[str, list[RunRecord]] = {}
    for record in records:
        by_label.setdefault(record.label, []).append(record)
    for runs in by_label.values():
        runs = runs[-WINDOW:]
        findings += _across_runs(runs)
        findings += _within_last_run(runs[-1])
    return Findings(sorted(findings, key=lambda f: -f.weight))


def with_findings(
    record: RunRecord, earlier: Sequence[RunRecord], warn: Callable[[str], object]
) -> RunRecord:
    """``record`` with the top findings about its label after it (``earlier``: the label's runs
    before it in this kernel)."""
    try:
        return dataclasses.replace(record, findings=summary_lines([*earlier, record]))
    except Exception as exc:  # a bug of ours must not lose the run
        warn(f"the run was not diagnosed: {type(exc).__name__}: {exc}")
        return record


def summary_lines(runs: Sequence[RunRecord], count: int = 2) -> tuple[str, ...]:
    """The top findings about the label of ``runs[-1]``, a line each, for its run summary (not
    the stale models: the summary has its own line for them)."""
    findings = [f for f in diagnose(runs) if f.kind != "stale_models"][:count]
    return tuple(f"{f.kind}: {f.message} — %nbguard diagnose" for f in findings)


# -- across a label's runs ----------------------------------------------------------------------
def _across_runs(runs: list[RunRecord]) -> list[Finding]:
    found = []
    timed = [r for r in runs if r.status == "ok" and r.fit_seconds is not None][1:]
    if len(timed) >= MIN_RUNS:
        trend = Trend([r.fit_seconds or 0.0 for r in timed])
        if trend.rises():
            first, last = timed[0], timed[-1]
            found.append(
                Finding(
                    "run_slowdown",
                    f"fit time rose {fmt_seconds(trend.rise)} over runs {_span(timed)} "
                    f"({trend.share:.0%} of the median {fmt_seconds(trend.median)}), beyond the "
                    f"runs' own spread of ±{fmt_seconds(trend.spread)}",
                    "something piles up between runs: see the other findings; a restarted kernel's "
                    "first run tells state from data",
                    (
                        (
                            "fit time",
                            f"{fmt_seconds(first.fit_seconds)} → {fmt_seconds(last.fit_seconds)}",
                        ),
                        ("slope", f"{fmt_seconds(trend.slope, signed=True)} a run"),
                    ),
                    _names(timed),
                    trend.share,
                )
            )
    measured = [r for r in runs if r.status == "ok" and r.rss_after is not None][1:]
    if len(measured) >= MIN_RUNS:
        trend = Trend([float(r.rss_after or 0) for r in measured])
        if trend.slope >= GROWTH_BYTES_PER_RUN and trend.rise >= NOISE_FACTOR * trend.spread:
            found.append(
                Finding(
                    "state_growth",
                    f"RSS after each run grows {fmt_bytes(int(trend.slope))} a run over runs "
                    f"{_span(measured)} ({fmt_bytes(int(trend.rise))} in all)",
                    "something keeps objects across runs: `%nbguard leaks` lists the models still "
                    "held; lists or dicts you append to every run hold the rest",
                    (
                        (
                            "RSS after",
                            f"{fmt_bytes(measured[0].rss_after)} → "
                            f"{fmt_bytes(measured[-1].rss_after)}",
                        ),
                    ),
                    _names(measured),
                    trend.share,
                )
            )
    return found


# -- within the latest run ------------------------------------------------------------------
def _within_last_run(run: RunRecord) -> list[Finding]:
    found = []
    name = (f"{run.label} #{run.run_number}",)
    if run.stale_models is not None and run.stale_models.count:
        found.append(
            Finding(
                "stale_models",
                fmt_stale(run.stale_models),
                run.stale_models.command or "%nbguard free --containers, or del the names",
                (
                    ("models", str(run.stale_models.count)),
                    ("weights", fmt_bytes(run.stale_models.weight_bytes)),
                ),
                name,
                0.5,
            )
        )
    fit_total = sum(f.seconds for f in run.fits)
    callbacks = sum(f.callback_seconds or 0.0 for f in run.fits)
    if fit_total > 0 and callbacks / fit_total >= CALLBACK_SHARE:
        found.append(
            Finding(
                "callbacks",
                f"your callbacks took {fmt_seconds(callbacks)} of the {fmt_seconds(fit_total)} fit "
                f"({callbacks / fit_total:.0%}) in {name[0]}",
                "make them do less per epoch: log or checkpoint every few epochs, save "
                "weights only",
                (("callbacks", fmt_seconds(callbacks)), ("fit", fmt_seconds(fit_total))),
                name,
                callbacks / fit_total,
            )
        )
    fits = max(1, len(run.fits))
    if run.traces is not None and run.traces > TRACES_PER_FIT * fits:
        found.append(
            Finding(
                "retracing",
                f"{run.traces} tf.function traces in {name[0]} ({run.traces / fits:.0f} per fit): "
                f"functions are traced again and again",
                "pass tensors, not Python numbers, to your tf.function (or give it an "
                "input_signature), and keep shapes fixed (drop_remainder=True)",
                (("tf.function traces", str(run.traces)), ("fits", str(len(run.fits)))),
                name,
                min(1.0, run.traces / (10 * fits)),
            )
        )
    for fit in run.fits:
        epochs = list(fit.epoch_seconds[1:])
        if len(epochs) < MIN_EPOCHS:
            continue
        trend = Trend(epochs)
        if trend.rises():
            found.append(
                Finding(
                    "epoch_slowdown",
                    f"epoch time rose {fmt_seconds(trend.rise)} within a fit of {name[0]} "
                    f"({fmt_seconds(epochs[0])} → {fmt_seconds(epochs[-1])}, {trend.share:.0%})",
                    "something grows each epoch: a callback that keeps more every epoch, or an "
                    "input pipeline without cache/prefetch",
                    (
                        ("epochs", str(len(fit.epoch_seconds))),
                        ("slope", f"{fmt_seconds(trend.slope, signed=True)} an epoch"),
                    ),
                    name,
                    trend.share,
                )
            )
            break
    if run.status == "oom":
        found.append(
            Finding(
                "oom_batch",
                f"{name[0]} ran out of memory: {run.error or 'no detail'}",
                run.advice[0] if run.advice else "halve the batch size",
                tuple(("advice", a) for a in run.advice[1:3]),
                name,
                2.0,
            )
        )
    return found


class Trend:
    """A robust straight line through ``ys`` (at x = 0, 1, ...)."""

    def __init__(self, ys: Sequence[float]) -> None:
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

    def rises(self) -> bool:
        return self.share >= RISE_SHARE and self.rise >= NOISE_FACTOR * self.spread


def _names(runs: Iterable[RunRecord]) -> tuple[str, ...]:
    return tuple(f"{r.label} #{r.run_number}" for r in runs)


def _span(runs: Sequence[RunRecord]) -> str:
    return f"#{runs[0].run_number}–#{runs[-1].run_number}"
