"""Causes read across a label's runs: slower runs, state that piles up, datasets rebuilt, a run
that traced more than the runs before it."""

from __future__ import annotations

from collections.abc import Sequence

from keras_nbguard.collectors.allocated import DEBIAN_PACKAGES, JEMALLOC, installed
from keras_nbguard.diagnosis.findings import (
    DATASET_RUNS,
    FREE_IT,
    MIN_RUNS,
    NOT_YOURS,
    RECENT,
    Finding,
    allocators_slack,
    fit_trend,
    glibc_slack,
    grown_enough,
    kept_in_the_rise,
    name_of,
    names,
    native_growth,
    rise_in_steps,
    rss_trend,
    span,
    swings,
)
from keras_nbguard.records.formatting import fmt_bytes, fmt_growth, fmt_seconds
from keras_nbguard.records.run import RunRecord

EARLIER_TRACED = 2  # earlier runs of a label (in this kernel) a run's traces are compared with


def across_runs(runs: list[RunRecord]) -> list[Finding]:
    """``runs``: one label's latest runs in this kernel, oldest first."""
    found = (_slowdown(runs), state_growth(runs), _dataset_rebuilt(runs), _traced_more(runs))
    return [f for f in found if f]


def _slowdown(runs: list[RunRecord]) -> Finding | None:
    trend = fit_trend(runs)
    if not trend.flagged or trend.trend is None:
        return None
    timed, line = trend.runs, trend.trend
    first, last = timed[0], timed[-1]
    return Finding(
        "run_slowdown",
        f"fit time rose {fmt_seconds(line.rise)} over {span(timed)} ({line.share:.0%} of "
        f"the median {fmt_seconds(line.median)}), beyond the runs' own spread of "
        f"±{fmt_seconds(line.spread)}",
        "something piles up between runs: see the other findings; a restarted kernel's first "
        "run tells state from data",
        (
            ("fit time", f"{fmt_seconds(first.fit_seconds)} → {fmt_seconds(last.fit_seconds)}"),
            ("slope", f"{fmt_seconds(line.slope, signed=True)} a run over {trend.span}"),
        ),
        names(timed),
        line.share,
    )


# what the kernel keeps a run with --isolate, Keras' 34 examples (README: bench_examples.py)
ISOLATED_FIGURE = "+0.03 to +0.23 MiB a run on Keras' own examples"
# What stays after clear, deep clean and release is memory the framework's native code keeps
# (bench/bench_examples.py: keras.io's convnet); a fresh process per run gives it back.
NATIVE_ADVICE = (
    "`%%kerasrun --isolate` runs each in a fresh process: the kernel stays flat "
    f"({ISOLATED_FIGURE})"
)
# TensorFlow has no way to free the programs XLA compiled (clear_session, the deep clean and
# its kernel cache's clear leave them): a Dense(64) MLP fit with jit_compile=True, +8 MiB a run
XLA_KEPT = (
    "XLA compiled your models' training steps (jit_compile, Keras' default on a GPU), and "
    "TensorFlow keeps every program it compiles until the process ends"
)
XLA_ADVICE = f"{NATIVE_ADVICE}; or `model.compile(..., jit_compile=False)` compiles none"


def xla_kept(runs: Sequence[RunRecord]) -> str | None:
    """Why memory nothing of the user's holds rises run after run: the runs' fits ran programs
    XLA compiled on TensorFlow, each run's new model a new program. None: none did."""
    return XLA_KEPT if any(fit.xla for run in runs for fit in run.fits) else None


def state_growth(runs: list[RunRecord]) -> Finding | None:
    trend = rss_trend(runs)
    if not trend.flagged or trend.trend is None:
        return None
    measured, line = trend.runs, trend.trend
    grown = grown_enough(measured[-1])
    native = native_growth(measured)  # (named only once it is clear: findings.rss_trend)
    if grown:
        what = f": {fmt_growth(grown[0])} in the last run"
    elif native and (xla := xla_kept(measured)):
        what = f": not in your names, and {_models_alive(measured[-1])}: {xla}"
    elif native:  # no name of yours grew, no model piled up: TensorFlow's own memory
        what = (
            f": not in your names, and {_models_alive(measured[-1])} (native memory kept "
            "by the framework)"
        )
    else:
        what = ": not in your notebook's names (see `%nbguard leaks` for models)"
    evidence = [
        ("RSS after", f"{fmt_bytes(measured[0].rss_after)} → {fmt_bytes(measured[-1].rss_after)}")
    ]
    evidence += [("grows", fmt_growth(g)) for g in grown]
    return Finding(
        "state_growth",
        f"the RSS each run leaves grows {fmt_bytes(int(line.slope))} a run over "
        f"{span(measured)} ({fmt_bytes(int(line.rise))} in all){what}",
        f"stop keeping every run's objects: clear or bound `{grown[0].name}`"
        if grown
        else (XLA_ADVICE if xla_kept(measured) else NATIVE_ADVICE)
        if native
        else "something keeps objects across runs: `%nbguard leaks` lists the models still held",
        tuple(evidence),
        names(measured),
        line.share,
    )


def _models_alive(run: RunRecord) -> str:
    """Which earlier runs' models are alive, for a rise they don't explain: none, or one run's
    (a model you kept), which is no more each run."""
    stale = run.stale_models
    if stale is None or not stale.count:
        return "no earlier run's model is alive"
    if not stale.runs:  # made outside %%kerasrun: they are no run's
        return "no earlier run's model is alive (only models made outside %%kerasrun)"
    return f"of earlier runs' models only #{stale.runs[0]}'s are alive, not more each run"


# The kernel jupyter-config/kernels/python3-keras-nbguard-jemalloc installs: glibc keeps pages
# TensorFlow's threads freed partly used; of twelve of Keras' examples over 1 MiB a run under the
# magic in some bench, seven were over on glibc and two on jemalloc side by side, oneDNN off (the
# GAN +5.25 -> +0.41: bench_examples.py --modes kerasrun,kerasrun+jemalloc; docs/benchmarks.md).
# With oneDNN on it helped some and hurt others: the note points to it only with oneDNN off
# (findings.glibc_slack).
JEMALLOC_KERNEL = "Python 3 (keras-nbguard, jemalloc)"
ON_JEMALLOC = f'a kernel on jemalloc keeps glibc\'s slack out (the kernel "{JEMALLOC_KERNEL}"'
JEMALLOC_FIRST = f"once jemalloc is installed: `apt-get install {DEBIAN_PACKAGES[JEMALLOC]}`"
SHAPES = ("in steps", "slowing")  # the shapes of a rise findings._why_not_rss may give
KEPT_IN_CHECK = 2**20  # what a run may leave under the magic (issue 23's goal: <= 1 MiB a run)


def memory_note(runs: list[RunRecord]) -> str | None:
    """For the run summary: the RSS the label's runs leave rises by more than ``KEPT_IN_CHECK``
    a run and no finding names it because nothing of the user's explains it (TensorFlow's own
    memory: a warm-up, an allocator's steps). Said with the number and the way out, so a
    summary that shows ``Δ RSS after +9 MiB`` says whose it is; None otherwise."""
    trend = rss_trend(runs)
    line = trend.trend if len(trend.runs) >= MIN_RUNS else None
    if line is None or line.slope < KEPT_IN_CHECK or trend.flagged:
        return None
    if not native_growth(trend.runs):  # a name or a model of yours: %nbguard leaks says which
        return None
    rate = f"{fmt_bytes(int(line.slope), signed=True)} a run"
    swing = swings(line)
    if swing:  # then that slope is no rate at which runs leave memory: the swing comes first
        head = (
            f"what runs leave swings by {fmt_bytes(int(line.spread))} around {rate} over "
            f"{trend.span}: not a steady rise"
        )
    else:
        head = f"{rate} left over {trend.span}"
    # whose it is, why it is no leak, the way out: a sentence each (in one nest of brackets
    # "the framework's own memory" sat beside "not memory kept")
    head = f"{head}, {_whose(trend.runs, trend.values)}"
    if xla := xla_kept(trend.runs):
        return (
            f"{head}. {_sentence(xla)}. %%kerasrun --isolate keeps the kernel flat, "
            "jit_compile=False compiles nothing to keep"
        )
    why: list[str] = []
    # the allocators first (a rise under 2 MiB a run gets no shape from the trend), then the
    # shape: a warm-up, steps (or what _why_not_rss says first); a swing has no shape
    pool = allocators_slack(trend.runs, line.rise)
    shape = None if swing else trend.unflagged_because()
    # where the rise sat, when an allocator's reason came before the shape in unflagged_because
    steps = None if swing or (shape and shape.startswith(SHAPES)) else rise_in_steps(trend)
    reasons = (pool, steps, shape)
    why += [reason for reason in reasons if reason and not reason.startswith(NOT_YOURS)]
    why = list(dict.fromkeys(why))
    way_out = f"%%kerasrun --isolate keeps the kernel flat ({ISOLATED_FIGURE})"
    if glibc_slack(trend.runs):  # (a kernel the loader can run, or how to get one)
        way_out += f"; {ON_JEMALLOC}" + (")" if installed(JEMALLOC) else f", {JEMALLOC_FIRST})")
    return ". ".join([head, *(_sentence(reason) for reason in why), way_out])


def _whose(runs: Sequence[RunRecord], values: Sequence[float]) -> str:
    """Whose the rise is: part of it the earlier run's model you kept meanwhile (its graphs and
    optimizer: more than its weights); else none of it your code's, or, beside a model you kept
    before these runs, not more each run. "none of it held by your code" sat beside a model a
    walkthrough kept (`kept = model`)."""
    if kept := kept_in_the_rise(runs, values):
        return f"part of it {kept}, its graphs and optimizer with it ({FREE_IT})"
    stale = runs[-1].stale_models
    if stale is None or not stale.count:
        return f"none of it held by your code ({NOT_YOURS})"
    kept = f"#{stale.runs[0]}'s" if stale.runs else "one made outside %%kerasrun"
    return (
        f"not more each run by your code (no name of yours grew; of earlier runs' models only "
        f"{kept}, which you keep, is alive)"
    )


def _sentence(words: str) -> str:
    return words[:1].upper() + words[1:]


def _dataset_rebuilt(runs: list[RunRecord]) -> Finding | None:
    later = [r for r in runs if r.status == "ok"][1:]
    latest = later[-DATASET_RUNS:]
    if len(latest) < DATASET_RUNS or not all(r.dataset_traces for r in latest):
        return None
    per_run = sorted(r.dataset_traces or 0 for r in latest)[len(latest) // 2]
    timed = [r.dataset_trace_seconds for r in latest if r.dataset_trace_seconds is not None]
    cost = ""
    if timed:
        took = sorted(timed)[len(timed) // 2]
        walls = sorted(r.wall_seconds for r in latest if r.wall_seconds)
        # its share says how much it matters: keras.io's Oxford pets cell, 28 ms of 12.6 s
        share = f" ({took / walls[len(walls) // 2]:.1%} of it)" if walls else ""
        cost = f", {fmt_seconds(took)} a run{share}"
    return Finding(
        "dataset_rebuilt",
        f"a tf.data pipeline of yours is built anew every run: {per_run} of its functions "
        f"traced again in each of {span(latest)}{cost}",
        "build the dataset once, in a cell of its own, and pass it to fit: every rebuild traces "
        "its map functions again and keeps another pipeline's graph",
        tuple((name_of(r), _dataset_evidence(r)) for r in latest),
        names(latest),
        0.3,
    )


def _dataset_evidence(run: RunRecord) -> str:
    took = run.dataset_trace_seconds
    return f"{run.dataset_traces} tf.data traces" + (
        f" in {fmt_seconds(took)}" if took is not None else ""
    )


def _traced_more(runs: list[RunRecord]) -> Finding | None:
    """The latest of the recent runs that traced more than every earlier run of its label (in
    this window, ``EARLIER_TRACED`` of them at least, that ran to the end): the same cell, a new
    Python value or shape each run — the cell retraces where the earlier runs found their traces
    cached (or traced less)."""
    for i in range(len(runs) - 1, max(0, len(runs) - RECENT) - 1, -1):
        run = runs[i]
        if not run.traces:  # (before the list of earlier runs: most runs trace nothing)
            continue
        earlier = [r for r in runs[:i] if r.status == "ok" and r.traces is not None]
        if len(earlier) < EARLIER_TRACED:
            continue
        most = max(r.traces or 0 for r in earlier)
        if run.traces > most:
            return _traced_more_finding(run, earlier, most)
    return None


def _traced_more_finding(run: RunRecord, earlier: list[RunRecord], most: int) -> Finding:
    before: dict[str, int] = {}
    for r in earlier:
        for name, count in r.traced:
            before[name] = max(before.get(name, 0), count)
    grew = [
        f"{name} {count}× ({before.get(name, 0)} at most before)"
        for name, count in run.traced
        if count > before.get(name, 0)
    ]
    which = f": {', '.join(grew)}" if grew else ""
    what = "tf.function traces" if run.trace_kind == "tf.function" else run.trace_kind
    return Finding(
        "retracing",
        f"{name_of(run)} made {run.traces} {what}, more than any earlier run of "
        f"{run.label!r} in this kernel ({most} at most in {span(earlier)}){which}",
        "a tf.function of yours is traced again for new Python values or shapes: pass tensors "
        "(tf.constant), give it an input_signature, or keep shapes fixed (drop_remainder=True)",
        (
            (name_of(run), f"{run.traces} {what}"),
            *((name_of(r), f"{r.traces} {what}") for r in earlier[-3:]),
        ),
        (name_of(run),),
        0.4,
    )
