"""Causes read across a label's runs: slower runs, state that piles up, datasets rebuilt."""

from __future__ import annotations

from .findings import (
    DATASET_RUNS,
    GROWTH_BYTES_PER_RUN,
    MIN_RUNS,
    NOISE_FACTOR,
    Finding,
    Trend,
    name_of,
    names,
    span,
)
from .formatting import fmt_bytes, fmt_growth, fmt_seconds
from .records import RunRecord


def across_runs(runs: list[RunRecord]) -> list[Finding]:
    """``runs``: one label's latest runs, oldest first."""
    return [f for f in (_slowdown(runs), state_growth(runs), _dataset_rebuilt(runs)) if f]


def _slowdown(runs: list[RunRecord]) -> Finding | None:
    timed = [r for r in runs if r.status == "ok" and r.fit_seconds is not None][1:]
    if len(timed) < MIN_RUNS:
        return None
    trend = Trend([r.fit_seconds or 0.0 for r in timed])
    if not trend.rises():
        return None
    first, last = timed[0], timed[-1]
    return Finding(
        "run_slowdown",
        f"fit time rose {fmt_seconds(trend.rise)} over runs {span(timed)} ({trend.share:.0%} of "
        f"the median {fmt_seconds(trend.median)}), beyond the runs' own spread of "
        f"±{fmt_seconds(trend.spread)}",
        "something piles up between runs: see the other findings; a restarted kernel's first "
        "run tells state from data",
        (
            ("fit time", f"{fmt_seconds(first.fit_seconds)} → {fmt_seconds(last.fit_seconds)}"),
            ("slope", f"{fmt_seconds(trend.slope, signed=True)} a run"),
        ),
        names(timed),
        trend.share,
    )


def state_growth(runs: list[RunRecord]) -> Finding | None:
    measured = [r for r in runs if r.status == "ok" and r.rss_after is not None][1:]
    if len(measured) < MIN_RUNS:
        return None
    trend = Trend([float(r.rss_after or 0) for r in measured])
    if trend.slope < GROWTH_BYTES_PER_RUN or trend.rise < NOISE_FACTOR * trend.spread:
        return None
    grown = measured[-1].growth
    what = (
        f": {fmt_growth(grown[0])} in the last run"
        if grown
        else ": not in your notebook's names (see `%nbguard leaks` for models)"
    )
    evidence = [
        ("RSS after", f"{fmt_bytes(measured[0].rss_after)} → {fmt_bytes(measured[-1].rss_after)}")
    ]
    evidence += [("grows", fmt_growth(g)) for g in grown]
    return Finding(
        "state_growth",
        f"RSS after each run grows {fmt_bytes(int(trend.slope))} a run over runs "
        f"{span(measured)} ({fmt_bytes(int(trend.rise))} in all){what}",
        f"stop keeping every run's objects: clear or bound `{grown[0].name}`"
        if grown
        else "something keeps objects across runs: `%nbguard leaks` lists the models still held",
        tuple(evidence),
        names(measured),
        trend.share,
    )


def _dataset_rebuilt(runs: list[RunRecord]) -> Finding | None:
    later = [r for r in runs if r.status == "ok"][1:]
    latest = later[-DATASET_RUNS:]
    if len(latest) < DATASET_RUNS or not all(r.dataset_traces for r in latest):
        return None
    per_run = sorted(r.dataset_traces or 0 for r in latest)[len(latest) // 2]
    return Finding(
        "dataset_rebuilt",
        f"a tf.data pipeline of yours is built anew every run: {per_run} of its functions "
        f"traced again in each of runs {span(latest)}",
        "build the dataset once, in a cell of its own, and pass it to fit: every rebuild traces "
        "its map functions again and keeps another pipeline's graph",
        tuple((name_of(r), f"{r.dataset_traces} tf.data traces") for r in latest),
        names(latest),
        0.3,
    )
