"""What a diagnosis is made of: a ``Finding``, the ``Findings`` list, the robust ``Trend`` the
causes are judged with, the one trend of a label's runs (``RunTrend``: the number the dashboard
shows, its span and its flag, all from the test the diagnosis names causes with), and every
threshold they use, in this one place (docs/diagnosis.md lists them).

Trends across runs and across epochs use a robust slope (Theil–Sen: the median of the pairwise
slopes) and are named only when the rise is large (``RISE_SHARE`` of the median), well beyond
the series' own spread (``NOISE_FACTOR`` × a MAD-based spread of the residuals), and steady (a
Mann–Kendall test, ``TREND_P``): fit times on a shared machine vary ±10% run to run, a burst of
load from elsewhere slows two or three runs in a row, and a clean label must raise no finding.
A trend across runs looks at the current kernel's runs of a label after its first (a warm-up:
imports, first traces), the latest ``WINDOW`` of them.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from keras_nbguard.records.run import Growth, RunRecord

# -- every threshold, in one place ------------------------------------------------------------
MIN_RUNS = 5  # runs of a label (after its first, a warm-up) before a trend across runs is judged
MIN_EPOCHS = 5  # epochs of a fit (after its first, which traces) before a trend within it
EPOCH_RISE_SECONDS = 0.05  # ...and a rise over the fit of this much at least: CI saw epochs of
# 56 ms rise 15 ms (24%) run after run while the machine's load grew, in a fit with no cause
RISE_SHARE = 0.20  # a trend's rise over its window, as a share of the series' median
NOISE_FACTOR = 3.0  # ...and as a multiple of the series' own spread
TREND_P = 0.01  # ...and rising run after run: a Mann–Kendall test's one-sided p-value at most
GROWTH_BYTES_PER_RUN = 2 * 2**20  # the RSS each run leaves, growing this much a run at least
OWN_SHARE = 0.5  # ...of which a label's runs themselves add this share (their median RSS change)
NAMED_GROWTH = 2**20  # a name's growth over a run that can explain 2 MiB left a run (half)
STEP_SHARE = 0.6  # of a rise, in one step: the rise is that step's, not a rate's
CALLBACK_SHARE = 0.10  # the user's callbacks' share of the fit time
WRITER_BYTES = 64 * 2**10  # a callback method writing this much over a fit is checkpointing
CHECKPOINT_SHARE = 0.10  # ...and named when its share of the fit time is this at least
INPUT_SHARE = 0.50  # making a Python input's batches, as a share of the fit: it waits for them
TRACES_PER_FIT = 4  # JAX: compilations of Keras' steps per fit beyond which retracing is named
LOOP_CALLS = 10  # predict (evaluate, fit) calls of one batch each in a run, at least...
LOOP_SECONDS = 0.5  # ...taking this long in all...
LOOP_SHARE = 0.20  # ...and this share of the run: named inference_loop (fit_loop)
# TensorFlow warns "5 out of the last N calls to <f> triggered tf.function retracing" once one
# function traced this often (tf 2.21: polymorphic_function.FREQUENT_TRACING_WARNING_THRESHOLD):
# a tf.function traced for this many distinct inputs (Python values, shapes) within a run is
# retracing. A step traced once, plus once for a last partial batch, is not.
RETRACE_THRESHOLD = 5
DATASET_RUNS = 3  # runs in a row (after the label's first) that traced a tf.data pipeline anew
GPU_HELD_SHARE = 0.80  # the process holds this share of the GPU's memory...
GPU_USED_SHARE = 0.50  # ...while TensorFlow's peak use is under this share of what it holds
WINDOW = 20  # the latest runs of a label looked at
HALF_RUNS = 3  # runs in each half of a series, at least, to tell a rise that slows
CPU_BOUND = 0.5  # fits whose CPU time is this share of their wall time at least keep a core busy
CPU_KEPT_PACE = 0.5  # ...and a slowdown of theirs raises their CPU time this share of the rise
# Runs (after the first) before a rise nothing of yours explains is named: Keras' own examples
# warm the framework's memory up 3-10 MiB a run until run 7 or 8, then level off
# (bench_examples.py); a leak of the framework's keeps rising and is named then.
NATIVE_RUNS = 10
NOT_YOURS = "no name or model of yours grew"  # (native_growth)
FREE_IT = "`%nbguard free` gives back what it holds"
# TensorFlow's CPU pool (oneDNN) reaching higher peaks explains a native rise when its peak rose
# by this share of the RSS's rise at least while what it had in use between runs did not rise
# (by half of GROWTH_BYTES_PER_RUN a run): Keras' text example, 40-80% (bench_examples.py, ``p``)
POOL_SHARE = 1 / 3
# What the allocators have in use between runs must rise by this much a run (the median of the
# changes) for a native rise to be memory kept; under it, the rise is freed memory they keep
# resident (Keras' GAN under the magic: RSS +14 MiB over runs 4-12, 9 of it in TensorFlow's
# pool's regions, while glibc's heap in use rose 0.02 MiB a run and Python's blocks ~300)
HEAP_KEPT = GROWTH_BYTES_PER_RUN // 4  # glibc's heap, TensorFlow's CPU pool
BLOCKS_KEPT = 2048  # Python's blocks (2 MiB of objects of up to 512 bytes is 4,096 of them)
RECENT = 5  # the latest runs of a label whose own causes (within a run) are still shown


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
    """``diagnose()``'s answer: most important first; shows itself in a notebook. ``notes``: what
    the runs' summaries say on their ``rss trend`` row (memory the framework keeps, no cause of
    the user's), a line per label, so that asking why never contradicts the summary."""

    def __init__(self, findings: Iterable[Finding] = (), notes: Sequence[str] = ()) -> None:
        super().__init__(findings)
        self.notes = tuple(notes)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        lines = [f.text() for f in self] or [f"no finding{self._none_words()}"]
        p.text("\n".join(lines + [f"note: {note}" for note in self.notes]))

    def _repr_html_(self) -> str:
        from keras_nbguard.records.formatting import html_code  # formatting imports records

        notes = "".join(f"<p><i>note</i>: {html_code(note)}</p>" for note in self.notes)
        if not self:
            return f"<p>keras_nbguard: no finding{self._none_words()}.</p>{notes}"
        items = "".join(
            f"<li><b>{html.escape(f.kind)}</b>: {html_code(f.message)}<br>"
            f"<i>{html_code(f.advice)}</i></li>"
            for f in self
        )
        return f"<ul>{items}</ul>{notes}"

    def _none_words(self) -> str:
        # "nothing stands out" above a note saying the RSS rises read as a contradiction
        return " in your code" if self.notes else ": nothing stands out"


class Trend:
    """A robust straight line through ``ys`` at ``xs`` (rising; default 0, 1, ...)."""

    def __init__(self, ys: Sequence[float], xs: Sequence[float] | None = None) -> None:
        import statistics  # ~10 ms, and no run needs it before its record: not at %load_ext

        n = len(ys)
        xs = range(n) if xs is None else xs
        self._ys = ys
        self.slope = statistics.median(
            [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(n) for j in range(i + 1, n)]
        )
        intercept = statistics.median([y - self.slope * x for x, y in zip(xs, ys, strict=True)])
        self.spread = 1.4826 * statistics.median(
            [abs(y - (intercept + self.slope * x)) for x, y in zip(xs, ys, strict=True)]
        )
        self.median = statistics.median(ys)
        self.rise = self.slope * (xs[-1] - xs[0])
        self.share = self.rise / self.median if self.median > 0 else 0.0
        self._p_value: float | None = None

    @property
    def p_value(self) -> float:
        """Mann–Kendall's one-sided p-value that the series rises (made when first asked for:
        most series fail the cheaper tests before)."""
        if self._p_value is None:
            self._p_value = _mann_kendall_p(self._ys)
        return self._p_value

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
    """``mlp #2–#5``: the label and the first and last run."""
    if runs[0].run_number == runs[-1].run_number:
        return name_of(runs[0])
    return f"{runs[0].label} #{runs[0].run_number}–#{runs[-1].run_number}"


def this_kernel(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """The runs since the latest start of a kernel process (a new kernel id, the same id in a new
    process — "Restart kernel" keeps the id — or run numbers that went back: an old history), of
    the latest run's kind: an isolated run's figures are its own fresh process's, which beside
    the kernel's say nothing (a label run now here, now with --isolate is two series)."""
    if runs and any(bool(r.isolated) != bool(runs[-1].isolated) for r in runs):
        runs = [r for r in runs if bool(r.isolated) == bool(runs[-1].isolated)]
    for i in range(len(runs) - 1, 0, -1):
        a, b = runs[i - 1], runs[i]
        if b.run_number <= a.run_number or (
            a.kernel_id != b.kernel_id
            or (a.pid is not None and b.pid is not None and a.pid != b.pid)
        ):
            return list(runs[i:])
    return list(runs)


def after_warmup(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """One label's runs (oldest first) that a trend across runs looks at: this kernel's, after
    its first (which warms up: imports, first traces, allocator pools), the latest ``WINDOW``."""
    return this_kernel(runs)[1:][-WINDOW:]


def _numbers(numbers: Sequence[int]) -> str:
    """``#4, #5, #6``; past three, the first three and "…"."""
    return ", ".join(f"#{n}" for n in numbers[:3]) + ("…" if len(numbers) > 3 else "")


class RunTrend:
    """One series over a label's runs after the warm-up: the slope shown, the runs it spans and
    whether the diagnosis names it (``flagged``) — one computation for the dashboard, the
    summary and the diagnosis. The line is fitted when first asked for (a run's own diagnosis
    asks only once there are ``MIN_RUNS`` runs)."""

    def __init__(
        self,
        series: str,
        runs: Sequence[RunRecord],
        values: Sequence[float],
        test: Callable[[Trend], bool],
        may_pass: Callable[[Sequence[float]], bool] = lambda values: True,
        unflagged_because: Callable[[Trend], str | None] = lambda trend: None,
        other_work: frozenset[int] = frozenset(),
    ) -> None:
        self.series = series  # "RSS left" (what each run leaves) or "fit time"
        self.runs = tuple(runs)  # the runs it is computed over, oldest first
        self.other_work = other_work  # runs left out for doing other work (other epochs)
        self._values = values
        self._test = test
        self._may_pass = may_pass  # a cheap look at the values that rules the test out
        self._unflagged_because = unflagged_because  # why a line that looks it is no finding
        self._trend: Trend | None = None

    @property
    def trend(self) -> Trend | None:
        """The robust line, per run by the runs' numbers (a run the series leaves out, stopped
        or failed, still counts as a run: what it left is in the next one's figure); None with
        fewer than 2 runs."""
        if self._trend is None and len(self._values) >= 2:
            numbers = [r.run_number for r in self.runs]
            rising = all(a < b for a, b in itertools.pairwise(numbers))  # (one kernel's: they do)
            self._trend = Trend(self._values, numbers if rising else None)
        return self._trend

    @property
    def flagged(self) -> bool:
        """Whether the diagnosis names this trend: ``MIN_RUNS`` runs at least, and its test."""
        return (
            len(self.runs) >= MIN_RUNS
            and self._may_pass(self._values)
            and self.trend is not None
            and self._test(self.trend)
        )

    @property
    def slope(self) -> float | None:
        return None if self.trend is None else self.trend.slope

    @property
    def values(self) -> tuple[float, ...]:
        """The series, one value a run of ``runs``."""
        return tuple(self._values)

    @property
    def span(self) -> str:
        """``runs 2–5`` (the label's run numbers)."""
        if not self.runs:
            return "no runs"
        first, last = self.runs[0].run_number, self.runs[-1].run_number
        if first == last:
            return f"run {first}"
        # runs between that the series leaves out: stopped or failed (no fit to time), or that
        # ran other epochs ("except #4, #5, #6" alone read as three failed runs)
        within = {r.run_number for r in self.runs}
        left_out = [n for n in range(first + 1, last) if n not in within]
        failed = [n for n in left_out if n not in self.other_work]
        other = [n for n in left_out if n in self.other_work]
        parts = [_numbers(failed)] if failed else []
        parts += [f"{_numbers(other)} of other epochs"] if other else []
        # the runs kept in a fit series may differ in epochs (within 2×): said, not hidden
        # (a walkthrough read "-100 ms per run" over runs of 2 epochs and one of 3)
        epochs = {r.epochs_run for r in self.runs} if self.series == "fit time" else set()
        ran = f", {min(epochs)}–{max(epochs)} epochs" if len(epochs) > 1 else ""
        return f"runs {first}–{last}{ran}" + (f" except {', and '.join(parts)}" if parts else "")

    def unflagged_because(self) -> str | None:
        """Why a line that looks it is no finding (None: flagged, or no reason to give)."""
        if self.trend is None or self.flagged:
            return None
        if len(self.runs) < MIN_RUNS and self._may_pass(self._values) and self._test(self.trend):
            return _needs_runs(len(self.runs))  # it would be: no ⚠ yet, and why
        return self._unflagged_because(self.trend)

    def text(self) -> str:
        """``⚠ RSS +1.9 MiB per run over runs 2–5``, or what the trend still needs."""
        from keras_nbguard.records.formatting import (  # formatting imports records
            fmt_bytes,
            fmt_seconds,
        )

        if self.trend is None:
            return f"{self.series}: a trend needs 2 runs after the first ({len(self.runs)} so far)"
        slope = self.trend.slope
        rate = (
            fmt_bytes(round(slope), signed=True)
            if self.series == "RSS left"
            else fmt_seconds(slope, signed=True)
        )
        if rate == fmt_bytes(GROWTH_BYTES_PER_RUN, signed=True) and slope < GROWTH_BYTES_PER_RUN:
            rate = f"+{slope / 2**20:.2f} MiB"  # under the ⚠'s 2 MiB, not rounded up to it
        flagged = self.flagged
        why = self.unflagged_because()
        return (
            f"{'⚠ ' if flagged else ''}{self.series} {rate} per run over {self.span}"
            f"{f' ({why})' if why else ''}"
        )


def _needs_runs(runs: int) -> str:
    return f"a finding needs {MIN_RUNS} runs after the first; {runs} so far"


def _grows(trend: Trend) -> bool:
    return trend.slope >= GROWTH_BYTES_PER_RUN and trend.rise >= NOISE_FACTOR * trend.spread


def swings(trend: Trend) -> bool:
    """A steep line no steadier than the runs' own swing (a run or two far off tilt it): its
    slope is no rate at which the runs leave memory."""
    return trend.slope >= GROWTH_BYTES_PER_RUN and not _grows(trend)


def _grows_in_its_runs(runs: Sequence[RunRecord]) -> Callable[[Trend], bool]:
    """``_grows``, and the runs' own RSS change (after less before, the median) makes at least
    ``OWN_SHARE`` of the slope: the RSS left after a trivial label's runs rises with another
    label's growth in between, and that is not the trivial label's to fix."""

    def test(trend: Trend) -> bool:
        if not _grows(trend):
            return False  # (first: the runs' changes are looked at only for a growing line)
        own = _own_change(runs)
        return own is None or own >= OWN_SHARE * trend.slope

    return test


def _own_change(runs: Sequence[RunRecord]) -> int | None:
    """The median RSS change within the runs (after less before)."""
    own = sorted(
        r.rss_after - r.rss_before
        for r in runs
        if r.rss_after is not None and r.rss_before is not None
    )
    return own[len(own) // 2] if own else None


def _grown_between(runs: Sequence[RunRecord]) -> Callable[[Trend], str | None]:
    """Why a growing RSS line is not the label's (the dashboard shows the line with it)."""

    def why(trend: Trend) -> str | None:
        own = _own_change(runs)
        if not _grows(trend) or own is None or own >= OWN_SHARE * trend.slope:
            return None
        from keras_nbguard.records.formatting import fmt_bytes  # formatting imports records

        return f"grown between its runs: each run itself {fmt_bytes(own, signed=True)}"

    return why


def slowing(values: Sequence[float]) -> tuple[float, float] | None:
    """(earlier, later) slopes when the series' later half rises at half the pace of its
    earlier half or less: memory warming up, not a leak (which goes on at its pace). Keras' own
    examples leave 3–9 MiB a run over runs 2–7, under 1 after, and level off by run 13
    (bench_examples.py). The halves share their middle run; ``HALF_RUNS`` runs each at least."""
    if len(values) < 2 * HALF_RUNS - 1:
        return None
    middle = len(values) // 2
    earlier, later = Trend(values[: middle + 1]).slope, Trend(values[middle:]).slope
    return (earlier, later) if earlier > 0 and later <= earlier / 2 else None


def _rss_test(
    runs: Sequence[RunRecord], settled: Sequence[float], native: bool
) -> Callable[[Trend], bool]:
    """``settled``: the values of the runs a next run has followed (see rss_trend)."""
    grows = _grows_in_its_runs(runs)

    def test(trend: Trend) -> bool:
        if not grows(trend) or slowing(settled) is not None:
            return False
        # Nothing of yours explains it: only a rise run after run, for long enough and about
        # as much every run, tells memory kept from the ±15 MiB TensorFlow's thread arenas
        # swing by, from a warm-up, and from the one-time steps of an allocator
        return not native or (
            len(runs) >= NATIVE_RUNS
            and trend.p_value <= TREND_P
            and steady_increase(settled) >= GROWTH_BYTES_PER_RUN
            and allocators_slack(runs, trend.rise) is None
            and peaks_level(runs, trend.slope) is None
        )

    return test


def _why_not_rss(
    runs: Sequence[RunRecord], settled: Sequence[float], native: bool
) -> Callable[[Trend], str | None]:
    """Why a growing RSS line is no finding (the dashboard shows the line with it)."""
    between = _grown_between(runs)

    def why(trend: Trend) -> str | None:
        from keras_nbguard.records.formatting import fmt_bytes  # formatting imports records

        if swings(trend):
            return (
                f"the runs swing by {fmt_bytes(int(trend.spread))} around the line: "
                f"not a steady rise"
            )
        if not _grows(trend):
            return None

        if reason := between(trend):
            return reason
        if len(runs) < MIN_RUNS:  # a growing line the diagnosis does not judge yet
            return _needs_runs(len(runs))
        if native and (kept := kept_in_the_rise(runs, settled)):
            return f"part of it is {kept}: its graphs and optimizer stay with it ({FREE_IT})"
        if native and (slack := allocators_slack(runs, trend.rise)):
            return slack
        if native and (level := peaks_level(runs, trend.slope)):
            return level
        if native and median_increase(settled) < GROWTH_BYTES_PER_RUN:
            return _in_steps(runs, settled)
        if slopes := slowing(settled):
            return (
                f"slowing: {fmt_bytes(int(slopes[0]), signed=True)} then "
                f"{fmt_bytes(int(slopes[1]), signed=True)} a run, warming up"
            )
        if native and steady_increase(settled) < GROWTH_BYTES_PER_RUN:
            return _in_steps(runs, settled)  # a warm-up, then a step
        if native and len(runs) < NATIVE_RUNS:
            return (
                f"{NOT_YOURS}: the framework's memory, named if it still "
                f"rises after {NATIVE_RUNS} runs, when a warm-up has levelled off"
            )
        if native and trend.p_value > TREND_P:
            return "not rising run after run: TensorFlow's thread arenas swing by ±15 MiB"
        return None

    return why


def median_increase(values: Sequence[float]) -> float:
    """The median of what each run added to the one before: a leak adds about as much every
    run; the steps of an allocator (Keras' examples: +12 to +25 MiB at one run, flat around
    it, glibc's heap in use flat: bench_examples.py) leave it near zero."""
    import statistics  # (imported already: the trend asking for this fitted a Trend first)

    steps = [b - a for a, b in itertools.pairwise(values)]
    return statistics.median(steps) if steps else 0.0


def steady_increase(values: Sequence[float]) -> float:
    """What a run adds to the one before, as a leak adds it: the median step over all the runs
    and over their later half, whichever is less. A warm-up's first steps (+3 to +9 MiB) with a
    one-time step of the allocator after them (+40, or +132 in the heap, at any later run) put
    the median of all steps at +2 MiB where the runs since add ~1 (Keras' text example, runs
    2-11: a false ``state_growth``); a leak adds as much in the later half."""
    later = values[(len(values) - 1) // 2 :]  # the halves share their middle run (``slowing``)
    return min(median_increase(values), median_increase(later))


def rise_in_steps(trend: RunTrend) -> str | None:
    """Where a rise sat when most runs added little of it: the line's slope alone ("+2.8 MiB a
    run") reads as a rate every run pays (Keras' convnet on JAX: +20 MiB at run 4 and +6 at
    run 3, the four runs after it +3 in all). None where the median run adds half the slope or
    more: a rate says it."""
    if trend.trend is None or len(trend.values) < 3:
        return None
    values = trend.values
    biggest = max(b - a for a, b in itertools.pairwise(values))
    # one step that is most of the rise is no rate either, whatever the median run: around a
    # stopped run, +21.7 of +24.4 MiB read "+4.4 MiB a run" (the median run +2.6)
    one_step = biggest >= STEP_SHARE * (values[-1] - values[0]) > 0
    if median_increase(values) >= trend.trend.slope / 2 and not one_step:
        return None
    return _in_steps(trend.runs, values)


def _in_steps(runs: Sequence[RunRecord], values: Sequence[float]) -> str:
    from keras_nbguard.records.formatting import fmt_bytes  # formatting imports records

    # the latest run's value, where there, is its RSS after less what the runs before gave back
    # at the next start (``_as_if_settled``): its step is an estimate until the next run ends (a
    # walkthrough read #7 +9.0 MiB, then +26.5 in the summary after)
    latest = runs[-1] if len(values) == len(runs) else None
    steps = sorted(
        (
            (b - a, _who_left(before, run), " so far" if run is latest else "")
            # values: of runs[0], runs[1], ... (the settled ones: all but the latest, maybe)
            for (a, b), (before, run) in zip(
                itertools.pairwise(values), itertools.pairwise(runs[: len(values)]), strict=True
            )
        ),
        key=lambda step: step[0],
        reverse=True,
    )
    # the second only where it is a step too (`#4 +6.5 MiB, #6 +0.1 MiB` named a flat run)
    shown = steps[:1] + [s for s in steps[1:2] if s[0] >= max(2**20, steps[0][0] / 4)]
    biggest = ", ".join(
        f"{who} {fmt_bytes(int(step), signed=True)}{estimate}" for step, who, estimate in shown
    )
    # the steps are of what each run left, not of "Δ RSS after": a walkthrough could not find
    # `#4 +7.3 MiB` in the table (the rise showed in #5's RSS before)
    return (
        f"in steps, not every run: {biggest}; the median run "
        f"{fmt_bytes(int(steady_increase(values)), signed=True)} (what each run left: its RSS "
        f"after, or the next run's start where lower)"
    )


def _who_left(before: RunRecord, run: RunRecord) -> str:
    """The run a step in what runs left belongs to: ``#9``; ``#8–#9`` where a run left out of
    the series (stopped, failed) came between, and may have left it (a stopped fit's traceback,
    shown, keeps ~30 MiB: JupyterLab read ``#9 +34.1 MiB`` of a run that added 4)."""
    first = before.run_number + 1
    return f"#{run.run_number}" if first >= run.run_number else f"#{first}–#{run.run_number}"


def allocators_slack(runs: Sequence[RunRecord], rss_rise: float) -> str | None:
    """Why a rise nothing of the user's explains is the allocators' slack, not memory kept:
    TensorFlow's CPU pool reaching higher peaks, what the allocators had in use between runs
    flat, or both. The pool's peak accounts for its own part only, so where it rose by less
    than the RSS the rest is said too (Keras 2's functional API guide: the pool's peak +4.1 MiB
    of a rise of ~11, 6.8 of it in the threads' arenas: bench_examples.py). None: neither."""
    pool = pool_high_water(runs, rss_rise)
    if pool is None:
        return allocators_keep(runs)
    if _pool_peak_rise(runs) >= rss_rise:
        return pool
    rest = allocators_keep(runs, pool_named=True)
    return f"{pool}; {rest}" if rest else pool


def glibc_slack(runs: Sequence[RunRecord]) -> bool:
    """Whether the runs ran on glibc's malloc, its heap in use was read (and ``allocators_keep``
    found it flat) and TensorFlow kept no CPU pool of its own (oneDNN off): the rise sat in
    glibc's arenas, pages it keeps partly used, which jemalloc gives back (bench_examples.py
    ``--modes kerasrun,kerasrun+jemalloc``: 7 of 12 examples over 1 MiB a run on glibc, 2 on
    jemalloc). With oneDNN on, the pool takes its regions with ``malloc``: glibc maps them
    apart and unmaps them, jemalloc keeps them in its arenas, and side by side jemalloc left
    more on 3 of the 12 (image classification +2.1 -> +18.0 MiB a run, the text example +1.2
    -> +3.1): no kernel to point to there."""
    on_glibc = all((r.malloc or "glibc") == "glibc" for r in runs)
    no_pool = all(r.host_pool_peak is None for r in runs)
    return on_glibc and no_pool and allocators_keep(runs) is not None


def _pool_peak_rise(runs: Sequence[RunRecord]) -> int:
    return (runs[-1].host_pool_peak or 0) - (runs[0].host_pool_peak or 0)


def pool_high_water(runs: Sequence[RunRecord], rss_rise: float) -> str | None:
    """Why a rise nothing of the user's explains is TensorFlow's CPU pool, not a leak: its peak
    rose by ``POOL_SHARE`` of ``rss_rise`` at least, while what it had in use between runs (as
    each started, after its collection) did not rise. With oneDNN the pool keeps every page it
    touched and reuses them (the text example: 17.6 of 22.0 MiB of its RSS rise in the pool's
    regions); tensors kept run after run would raise its use between runs as well. None: not
    so, or not read (oneDNN off)."""
    pool = [(r.host_pool_in_use, r.host_pool_peak) for r in runs]
    if len(pool) < 2 or any(use is None or peak is None for use, peak in pool):
        return None
    in_use = [float(use or 0) for use, _ in pool]
    peak_rise = _pool_peak_rise(runs)
    if peak_rise < max(GROWTH_BYTES_PER_RUN, POOL_SHARE * rss_rise):
        return None
    if Trend(in_use).slope >= GROWTH_BYTES_PER_RUN / 2:
        return None
    from keras_nbguard.records.formatting import fmt_bytes  # formatting imports records

    low, high = fmt_bytes(int(min(in_use))), fmt_bytes(int(max(in_use)))
    held = "at nothing" if max(in_use) == 0 else low if low == high else f"{low}–{high}"
    return (
        f"TensorFlow's CPU pool reached a higher peak, {fmt_bytes(peak_rise, signed=True)}, "
        f"while what it had in use between runs stayed {held}: it keeps the pages it touched "
        f"and reuses them"
    )


def peaks_level(runs: Sequence[RunRecord], rss_slope: float) -> str | None:
    """Why a rise nothing of the user's explains is no leak: how high each run's RSS went (its
    own peak, reset at its start) rose less than half as fast as what the runs left (a line of
    ``rss_slope``). Memory kept raises a run's floor and its peak alike, as does a warm-up; an
    allocator that hands less back to the system after each collection raises the floor only
    (Keras' timeseries transformer: RSS left +2.6 MiB a run over runs 2-12 with Python's blocks
    +2,800 a run, its runs' peaks +0.4: a false ``state_growth``). Where glibc's heap in use
    rose all the same, something native was kept, and that is said instead. None: not so, or
    not read."""
    heights = [(r.rss_peak, r.rss_before, r.rss_after) for r in runs]
    if len(runs) < MIN_RUNS or any(None in height for height in heights):
        return None
    # (a run went as high as its ends at least, whatever a coarse sampler saw)
    peaks = Trend([float(max(h or 0 for h in height)) for height in heights])
    if peaks.slope >= rss_slope / 2:
        return None
    from keras_nbguard.records.formatting import fmt_bytes  # formatting imports records

    rose = f"each run's peak rose only {fmt_bytes(int(peaks.slope), signed=True)} a run"
    heap = [r.heap_in_use for r in runs]
    heap_step = median_increase([float(h or 0) for h in heap]) if None not in heap else 0.0
    if heap_step >= HEAP_KEPT:  # keras.io's fine-tuning cell: +0.75 MiB a run, Python's flat
        return (
            f"{rose}, but {heap_of(runs)} in use rose {fmt_bytes(int(heap_step), signed=True)} "
            f"a run: memory the framework keeps natively"
        )
    return f"{rose}: less was handed back to the system after each collection, nothing was kept"


def heap_of(runs: Sequence[RunRecord]) -> str:
    """Whose C heap the runs' ``heap_in_use`` counts, in words ("glibc's heap": records kept
    before ``malloc`` was recorded ran on it)."""
    names = {r.malloc or "glibc" for r in runs}
    return f"{names.pop()}'s heap" if len(names) == 1 else "the C heap"


def allocators_keep(runs: Sequence[RunRecord], pool_named: bool = False) -> str | None:
    """Why a rise nothing of the user's explains is no leak: what the allocators had in use
    between runs (read as each started, after its collection and trim) stayed flat — the C
    heap (``heap_of``), Python's blocks and TensorFlow's CPU pool where it keeps one — so the
    rise is freed memory they keep resident for reuse (pages a pool touched, arenas' slack), not
    memory kept: a leak through any of them raises its use run after run. ``pool_named``: the
    pool's use was said already, and is left out of the words. None: not so, or not read."""
    heap = [r.heap_in_use for r in runs]
    blocks = [r.python_blocks for r in runs]
    if len(runs) < MIN_RUNS or None in heap or None in blocks:
        return None
    heap_step = median_increase([float(h or 0) for h in heap])
    blocks_step = median_increase([float(b or 0) for b in blocks])
    if heap_step >= HEAP_KEPT or blocks_step >= BLOCKS_KEPT:
        return None
    from keras_nbguard.records.formatting import fmt_size  # formatting imports records

    sign = "+" if heap_step >= 0 else "-"
    once = _kept_once(runs)
    parts = [
        f"{heap_of(runs)} {sign}{fmt_size(int(abs(heap_step)))} a run{once}",
        f"Python's objects {blocks_step:+,.0f} blocks a run",
    ]
    pool = [r.host_pool_in_use for r in runs]
    if None not in pool:
        used = [int(p or 0) for p in pool]
        if _rises_every_run([float(u) for u in used]) >= HEAP_KEPT:
            return None
        if not pool_named:
            low, high = fmt_size(min(used)), fmt_size(max(used))
            held = "held nothing" if max(used) == 0 else low if low == high else f"{low}–{high}"
            parts.append(f"TensorFlow's CPU pool {held}")
    # a step kept once is memory kept: the rest of the rise is what the words say
    rest = "besides that step, the rise" if once else "the rise"
    return (
        f"what the allocators had in use between runs stayed flat ({', '.join(parts)}): "
        f"{rest} is freed memory they keep resident and reuse, not memory kept"
    )


def _kept_once(runs: Sequence[RunRecord]) -> str:
    """The heap's one big step, where a run kept far more than the median run: an allocation
    kept from then on (keras.io's fine-tuning cell: +33 MiB once in three benches, +42 KiB a run
    otherwise), which "stayed flat" alone would hide. Each run's figure is read as it starts,
    so a step shows in the next run's: it belongs to the run before."""
    from keras_nbguard.records.formatting import fmt_bytes  # formatting imports records

    heap = [float(r.heap_in_use or 0) for r in runs]
    if len(heap) < 2:
        return ""
    i = max(range(len(heap) - 1), key=lambda j: heap[j + 1] - heap[j])
    step = heap[i + 1] - heap[i]
    # given back later (a stopped fit's buffers, held one run longer): not kept
    if step < GROWTH_BYTES_PER_RUN or min(heap[i + 1 :]) - heap[i] < step / 2:
        return ""
    # the runs between two of the series' (a stopped one, left out of it) may have kept it
    first, after = runs[i].run_number, runs[i + 1].run_number
    by = f"#{first}" if after == first + 1 else f"#{first}–#{after - 1}"
    # since, not by: a model of yours kept past its run shows in the next run's figure
    return f" but for {fmt_bytes(int(step), signed=True)} kept since {by}"


def _rises_every_run(values: Sequence[float]) -> float:
    """What a run adds, as memory kept adds it: in the median step and in the line alike. The
    pool's use as runs begin swings by up to 20 MiB (Keras' text example), up as often as down,
    and either figure alone can read a swing as a rise (its steps' median +1.6 MiB a run where
    its line fell: a false ``state_growth``); tensors kept raise both."""
    return min(median_increase(values), Trend(values).slope)


def native_growth(runs: Sequence[RunRecord]) -> bool:
    """Nothing of the user's explains what the runs leave, run after run: no name grew by
    ``NAMED_GROWTH`` in the last run, and no two earlier runs' models are alive. One model you
    kept (``kept = model``, 408 B) or ``Out`` gaining 0.1 MiB can't explain a rise of 2 MiB a
    run: beside them, a one-time step after a stopped run read as a leak of yours
    (``state_growth … something keeps objects across runs``; keras.io's custom train_step in
    JupyterLab), where the steps of the native reading say what it was."""
    if not runs:
        return False
    stale = runs[-1].stale_models
    piling = stale is not None and len(set(stale.runs)) >= 2
    return not grown_enough(runs[-1]) and not piling


def kept_in_the_rise(runs: Sequence[RunRecord], values: Sequence[float]) -> str | None:
    """The earlier run's model you keep, in words, where its keeping is the rise: most of it one
    step beside that run (``values``: what each run left, ``runs``' first ones). It holds more
    than its weights (its graphs, its optimizer's state); beside it "no name or model of yours
    grew: the framework's memory" misled (keras.io's weather forecasting in JupyterLab: "Free
    flagged" gave back all of a +12.4 MiB-a-run rise). A steady rise is not one model's."""
    stale = runs[-1].stale_models if runs else None
    if stale is None or not stale.count or not stale.runs or len(values) < 2:
        return None
    steps = [b - a for a, b in itertools.pairwise(values)]
    biggest = max(range(len(steps)), key=steps.__getitem__)
    if not steps[biggest] >= STEP_SHARE * (values[-1] - values[0]) > 0:
        return None
    kept, stepped = stale.runs[0], runs[biggest + 1].run_number  # the run that left it higher
    if not kept - 1 <= stepped <= kept + 1:
        return None
    where = f" (`{stale.paths[0]}`)" if stale.paths else ""
    return f"#{kept}'s model you keep{where}"


def grown_enough(run: RunRecord) -> tuple[Growth, ...]:
    """The names that grew over ``run`` by enough to explain a rise (a size not read counts)."""
    return tuple(g for g in run.growth if g.bytes is None or g.bytes >= NAMED_GROWTH)


def _may_grow(values: Sequence[float]) -> bool:
    """False when no two runs differ by ``GROWTH_BYTES_PER_RUN``: then no pair's slope, nor
    their median, reaches it (every run's diagnosis asks; the line costs ~20 µs)."""
    return max(values) - min(values) >= GROWTH_BYTES_PER_RUN


def rss_trend(runs: Sequence[RunRecord]) -> RunTrend:
    """What each run left behind in RSS: flagged when it grows ``GROWTH_BYTES_PER_RUN`` a run at
    least, beyond ``NOISE_FACTOR`` × its own spread, over ``MIN_RUNS`` runs at least, and does
    not slow down by half; when nothing of the user's explains it, over ``NATIVE_RUNS`` runs
    and rising run after run (``state_growth``)."""
    kernel = this_kernel(runs)
    following = {id(run): later for run, later in itertools.pairwise(kernel)}
    after_first = kernel[1:][-WINDOW:]  # after_warmup(), without a second look for the kernel
    measured = [r for r in after_first if r.status == "ok" and r.rss_after is not None]
    values = [float(left_behind(r, following.get(id(r)))) for r in measured]
    # The shape of the rise (slowing, in steps) is read on the runs a next run has settled: the
    # latest run's value is its RSS after, with what the next run's collection would give back
    settled = [v for r, v in zip(measured, values, strict=True) if id(r) in following]
    if values and len(settled) == len(values) - 1:
        values[-1] = _as_if_settled(measured, values)
    native = native_growth(measured)
    return RunTrend(
        "RSS left",
        measured,
        values,
        _rss_test(measured, settled, native),
        _may_grow,
        _why_not_rss(measured, settled, native),
    )


def _as_if_settled(measured: Sequence[RunRecord], values: Sequence[float]) -> float:
    """The latest run's RSS after, less what the next collection and trim gave back after the
    runs before it (their median): its after still holds that (4-15 MiB), and beside settled
    values it alone read as growth over a few runs (FeatureSpace, 6 runs: "+2.3 MiB a run"
    where the settled runs rose 0.9). Memory really kept is in both, and still shows."""
    gave_back = [(r.rss_after or 0) - v for r, v in zip(measured[:-1], values[:-1], strict=True)]
    return values[-1] - (sorted(gave_back)[len(gave_back) // 2] if gave_back else 0.0)


def left_behind(run: RunRecord, following: RunRecord | None) -> int:
    """RSS after ``run``, or the RSS its label's next run started from when lower (same
    process): what stayed once the next run had collected and given the free heap back. RSS
    after alone swings ±15 MiB with TensorFlow's thread arenas, and such a swing must not read
    as growth; memory really kept is in both."""
    after = run.rss_after or 0
    if following is None or following.rss_before is None or following.pid != run.pid:
        return after
    return min(after, following.rss_before)


def fit_trend(runs: Sequence[RunRecord]) -> RunTrend:
    """Fit time of each run: flagged when it rises steadily and beyond the noise
    (``Trend.rises``) over ``MIN_RUNS`` runs at least, where the fits keep a core busy their
    CPU time rises with it, and something of the runs piles up with it (``run_slowdown``)."""
    timed = [r for r in after_warmup(runs) if r.status == "ok" and r.fit_seconds is not None]
    # only runs that did about the latest's work: a 300-epoch run beside 3-epoch ones is no
    # slowdown (a walkthrough's `fit time -33 ms per run`); an early stop's 3 to 5 epochs are
    # (left out, they left trends of two runs and "except #4, #5, #6")
    latest = timed[-1].epochs_run if timed else 0
    other = frozenset(r.run_number for r in timed if not _about_as_many(r.epochs_run, latest))
    timed = [r for r in timed if r.run_number not in other]
    busier = _busier_machine(timed)

    def why_not(trend: Trend) -> str | None:
        return busier(trend) or _nothing_piles_up(runs, timed, trend)

    return RunTrend(
        "fit time",
        timed,
        [r.fit_seconds or 0.0 for r in timed],
        lambda trend: trend.rises() and why_not(trend) is None,
        unflagged_because=lambda trend: why_not(trend) if trend.rises() else _fit_swings(trend),
        other_work=other,
    )


def _about_as_many(epochs: int, latest: int) -> bool:
    """Within a factor of two of the latest run's epochs (more steps each run is a cause the
    trend names, data piling up: not other work)."""
    return epochs == latest or (
        min(epochs, latest) > 0 and max(epochs, latest) <= 2 * min(epochs, latest)
    )


def _fit_swings(trend: Trend) -> str | None:
    """Why a fit time rising (or falling) by ``RISE_SHARE`` of its median over the runs is no
    rate they slow (or speed up) by: they swing around the line by more than a third of that
    change (keras.io's transfer learning in JupyterLab, fits 3.04, 2.17, 3.16, 3.64 s: "+341 ms
    per run", a V, not a rise), as the RSS line says of its own swing (``swings``)."""
    change = abs(trend.rise)
    if not trend.slope or abs(trend.share) < RISE_SHARE or change >= NOISE_FACTOR * trend.spread:
        return None
    from keras_nbguard.records.formatting import fmt_seconds  # formatting imports records

    steady = "rise" if trend.slope > 0 else "fall"
    return f"the runs swing by {fmt_seconds(trend.spread)} around the line: not a steady {steady}"


def _nothing_piles_up(
    runs: Sequence[RunRecord], timed: Sequence[RunRecord], trend: Trend
) -> str | None:
    """Why a rising fit time is no finding: none of the causes a slowdown across runs has in
    Keras grew over the same runs — traces (retracing, a graph rebuilt), tf.data pipelines
    traced (more of them rebuilt), more steps, the user's callbacks or Python input taking
    longer (by a quarter of the rise at least), memory kept (a name or model of the user's, an
    RSS rise a finding names). Then it is the machine's pace: on a shared VM a neighbour slows
    every instruction, CPU time included (Keras' convnet under the magic, fits 0.9 -> 1.4 s over
    12 runs with nothing else changed: bench_examples.py). None: something piles up, or traces
    unknown."""
    half = len(timed) // 2
    if half < HALF_RUNS or any(r.traces is None for r in timed):
        return None
    import statistics  # (imported already by the Trend being judged)

    early, late = timed[:half], timed[-half:]

    def rise(value: Callable[[RunRecord], float]) -> float:
        return statistics.median(map(value, late)) - statistics.median(map(value, early))

    def steps(run: RunRecord) -> float:
        return float(sum((f.steps or 0) * (f.epochs or 1) for f in run.fits))

    def callbacks(run: RunRecord) -> float:
        return sum(f.callback_seconds or 0.0 for f in run.fits)

    def making_input(run: RunRecord) -> float:
        return sum(f.input_seconds or 0.0 for f in run.fits)

    latest = timed[-1]
    piles_up = (
        rise(lambda r: float(r.traces or 0)) > 0
        or rise(lambda r: float(r.dataset_traces or 0)) > 0
        or rise(steps) > 0
        or rise(callbacks) >= trend.rise / 4
        or rise(making_input) >= trend.rise / 4
        or any(grown_enough(r) for r in timed)
        or (latest.stale_models is not None and latest.stale_models.count > 0)
        or rss_trend(runs).flagged
    )
    if piles_up:
        return None
    return (
        "nothing of the runs piles up with it (traces, steps, your callbacks' and input's "
        "time, names, models and RSS flat): the machine's pace, most likely; a restarted "
        "kernel's first run tells"
    )


def _busier_machine(runs: Sequence[RunRecord]) -> Callable[[Trend], str | None]:
    """Why a rising fit time is the machine's, not the runs': the fits keep a core busy (CPU
    time at least ``CPU_BOUND`` of their wall time), and their CPU time rose by less than
    ``CPU_KEPT_PACE`` of what the wall time rose: as much work, waiting for a busier machine
    (other processes, a colleague's job). Two busy loops beside a Dense(512) fit here took its
    time from 0.8 to 1.3-2.1 s while its CPU time stayed at 0.6-1.1 s. None: judged on time
    alone (a GPU-bound fit, or records from before CPU time was kept)."""
    cpu = [r.fit_cpu_seconds for r in runs]
    wall = [r.fit_seconds or 0.0 for r in runs]

    def why(trend: Trend) -> str | None:
        if not runs or any(c is None for c in cpu):
            return None
        import statistics  # (imported already by the Trend being judged)

        known = [c or 0.0 for c in cpu]
        shares = [c / w for c, w in zip(known, wall, strict=True) if w > 0]
        if not shares or statistics.median(shares) < CPU_BOUND:
            return None
        cpu_rise = Trend(known).rise
        if cpu_rise >= CPU_KEPT_PACE * trend.rise:
            return None
        from keras_nbguard.records.formatting import fmt_seconds  # formatting imports records

        return (
            f"a busier machine: the fits' CPU time {fmt_seconds(cpu_rise, signed=True)} over "
            f"the same runs, as much work waiting longer"
        )

    return why


def label_trends(runs: Sequence[RunRecord]) -> tuple[RunTrend, RunTrend]:
    """RSS and fit-time trends of one label's runs (any kernels, oldest first)."""
    return rss_trend(runs), fit_trend(runs)


def trends_text(name: str, runs: Sequence[RunRecord]) -> str:
    """``mlp: ⚠ RSS +4.0 MiB per run over runs 2–8; fit time +1 ms per run over runs 2–8``: the
    dashboard's trend line of one label (``runs``: its runs, any kernels, oldest first)."""
    rss, fit = label_trends(runs)
    parts = [t.text() for t in (rss, fit) if t.trend is not None]
    if not parts:
        return (
            f"{name}: a trend needs 3 runs in this kernel, the first a warm-up "
            f"({len(this_kernel(runs))} so far)"
        )
    return f"{name}: " + "; ".join(parts)
