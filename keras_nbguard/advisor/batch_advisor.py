"""The largest batch that fits, predicted before the out-of-memory, not found by crashing into it.

``batch_advice(model, x, y)`` trains a copy of the model for a few steps at two or three small
batch sizes (batch_probe.py), fits peak = fixed + per-sample x batch, and names the largest batch
predicted to stay under the limit with a stated margin. Probes stay under half of the limit, so
probing itself never runs out of memory; a third probe checks that memory is linear in the batch,
and where it is not the advice is a range and says so.
"""

from __future__ import annotations

import gc
import html
import itertools
import math
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keras_nbguard.advisor import batch_probe
from keras_nbguard.advisor.batch_probe import MIB, OUTPUTS_IN_GUESS, Probe
from keras_nbguard.records.notices import warn

if TYPE_CHECKING:
    from keras_nbguard.records.options import RunOptions
    from keras_nbguard.session.core import Session

MARGIN = 0.05  # of the limit, kept free on a GPU: the allocator's rounding
HOST_MARGIN = 0.10  # on the host: a fresh fit's peak RSS varies by ~6% run to run (the bench)


@dataclass(frozen=True)
class BatchAdvice:
    """What ``batch_advice`` found. Figures in MiB; unknown ones None, with ``reason``."""

    batch_size: int | None  # the largest batch predicted to fit; None: see reason
    limit_mib: float | None
    limit_source: str  # where the limit comes from ("--host-limit", "free GPU memory", ...)
    where: str  # what was measured: "host (VmHWM)", "GPU (TF allocator)"
    probes: tuple[Probe, ...] = ()
    fixed_mib: float | None = None  # the line's intercept: weights, optimizer, workspace
    per_sample_mib: float | None = None  # its slope
    predicted: dict[int, float] = field(default_factory=dict)  # batch -> MiB
    breakdown: dict[str, float | None] = field(default_factory=dict)
    seconds: float = 0.0
    margin: float = MARGIN
    linear: bool = True
    batch_range: tuple[int, int] | None = None  # where memory is not linear in the batch
    user_batch: int | None = None  # the batch the caller wants (batch_size=...)
    accumulation: tuple[int, int] | None = None  # (batch, k): k x batch keeps user_batch
    reason: str | None = None
    model_params: int | None = None  # the model's weight count: an OOM of the same model quotes it

    def predict(self, batch: int) -> float | None:
        """The peak, in MiB over the memory in use before, that a fit at ``batch`` should reach."""
        if self.fixed_mib is None or self.per_sample_mib is None:
            return None
        return self.fixed_mib + self.per_sample_mib * batch

    @property
    def usable_mib(self) -> float | None:
        return None if self.limit_mib is None else self.limit_mib * (1 - self.margin)

    def text(self) -> str:
        """The advice in one line."""
        if self.batch_size is None:
            return f"batch advice: n/a ({self.reason})"
        probed = ", ".join(str(p.batch) for p in self.probes)
        fits = (
            f"batch_size={self.batch_size:,}"
            if self.batch_range is None
            else f"batch_size between {self.batch_range[0]:,} and {self.batch_range[1]:,} "
            f"(memory is not linear in the batch: {self.batch_size:,} is the safe end)"
        )
        line = (
            f"batch advice: {fits} fits under {self.limit_mib:,.0f} MiB ({self.limit_source}, "
            f"{self.margin:.0%} kept free) on the {self.where}: peak ≈ {self.fixed_mib:,.1f} "
            f"+ {self.per_sample_mib:.3f} MiB x batch; probed {probed} in {self.seconds:.1f} s"
        )
        if self.accumulation is not None and self.user_batch is not None:
            need = self.predict(self.user_batch)
            batch, k = self.accumulation
            line += (
                f". Batch {self.user_batch:,} needs ~{need:,.0f} MiB: keep it as "
                f"{k} x {batch:,} with batch_size={batch:,} and the optimizer's "
                f"gradient_accumulation_steps={k} (Keras 3)"
            )
        if self.reason:
            line += f" ({self.reason})"
        return line

    def quote(self, batch: int) -> str | None:
        """One line for a fit that ran out of memory at ``batch``: what that batch needs and
        what fits (None: no advice to quote)."""
        need = self.predict(batch)
        if self.batch_size is None or need is None or self.limit_mib is None:
            return None
        k = math.ceil(batch / self.batch_size)
        return (
            f"batch_advice: batch {batch:,} needs ~{need:,.0f} MiB; {self.batch_size:,} fits "
            f"under {self.limit_mib:,.0f} MiB ({self.limit_source}): fit with "
            f"batch_size={self.batch_size:,}, or keep {batch:,} as {k} x {self.batch_size:,} "
            f"with the optimizer's gradient_accumulation_steps={k} (Keras 3)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def _repr_html_(self) -> str:
        return f"<div style='font-size:90%'>{html.escape(self.text())}</div>{chart(self)}"


def chart(advice: BatchAdvice, width: int = 360, height: int = 140) -> str:
    """Probes as dots, the fitted line, the limit and the advised batch: one small SVG."""
    if not advice.probes or advice.predict(1) is None:
        return ""
    top_batch = max([p.batch for p in advice.probes] + [advice.batch_size or 0]) * 1.2
    top_mib = max([p.peak_mib for p in advice.probes] + [advice.limit_mib or 0]) * 1.1
    pad = 30

    def sx(b: float) -> float:
        return pad + b / top_batch * (width - pad - 8)

    def sy(m: float) -> float:
        return height - 20 - max(0.0, m) / (top_mib or 1) * (height - 28)

    parts = [
        f"<line x1='{sx(0):.1f}' y1='{sy(advice.predict(0) or 0):.1f}' "
        f"x2='{sx(top_batch):.1f}' y2='{sy(advice.predict(int(top_batch)) or 0):.1f}' "
        "stroke='#1f77b4' stroke-width='1.5'/>"
    ]
    parts += [
        f"<circle cx='{sx(p.batch):.1f}' cy='{sy(p.peak_mib):.1f}' r='3' fill='#ff7f0e'>"
        f"<title>batch {p.batch}: {p.peak_mib:.1f} MiB</title></circle>"
        for p in advice.probes
    ]
    if advice.limit_mib is not None:
        y = sy(advice.limit_mib)
        parts.append(
            f"<line x1='{pad}' y1='{y:.1f}' x2='{width - 8}' y2='{y:.1f}' "
            "stroke='#d62728' stroke-dasharray='4 3'/>"
            f"<text x='{pad + 2}' y='{y - 3:.1f}' font-size='10' fill='#d62728'>"
            f"limit {advice.limit_mib:,.0f} MiB</text>"
        )
    if advice.batch_size:
        x = sx(advice.batch_size)
        parts.append(
            f"<line x1='{x:.1f}' y1='{height - 20}' x2='{x:.1f}' y2='8' "
            "stroke='#2ca02c' stroke-dasharray='2 2'/>"
            f"<text x='{x + 3:.1f}' y='{height - 24}' font-size='10' fill='#2ca02c'>"
            f"{advice.batch_size:,}</text>"
        )
    parts.append(
        f"<text x='{pad}' y='{height - 6}' font-size='10'>batch size →</text>"
        f"<text x='2' y='12' font-size='10'>MiB</text>"
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"role='img' aria-label='peak memory by batch size'>{''.join(parts)}</svg>"
    )


def fit_line(probes: list[Probe]) -> tuple[float, float]:
    """Least squares: (intercept, slope) in MiB and MiB per sample."""
    n = len(probes)
    mx = sum(p.batch for p in probes) / n
    my = sum(p.peak_mib for p in probes) / n
    sxx = sum((p.batch - mx) ** 2 for p in probes)
    slope = sum((p.batch - mx) * (p.peak_mib - my) for p in probes) / sxx if sxx else 0.0
    return my - slope * mx, slope


def _size_mib(variables: Any) -> float:
    import numpy as np

    total = 0
    for v in variables:
        try:
            itemsize = np.dtype(str(getattr(v.dtype, "name", v.dtype))).itemsize
        except TypeError:
            itemsize = 4
        total += math.prod(int(d) for d in v.shape) * itemsize
    return total / MIB


def _largest(fixed: float, slope: float, usable: float) -> int:
    return max(0, int((usable - fixed) / slope)) if slope > 0 else 0


def batch_advice(
    model: Any,
    x: Any,
    y: Any = None,
    *,
    limit_mib: float | None = None,
    batch_sizes: list[int] | None = None,
    steps: int = 2,
    batch_size: int | None = None,
    margin: float | None = None,
    options: RunOptions | None = None,
) -> BatchAdvice:
    """The largest batch predicted to fit, from a few short steps on a copy of ``model``.

    ``limit_mib``: what a fit may add (default: free GPU memory, or ``--host-limit`` /
    available memory on the host); ``batch_sizes``: the probes (default: chosen, rising, each
    under half the limit); ``batch_size``: the batch you want, for the accumulation advice;
    ``margin``: the share of the limit kept free (5% on a GPU, 10% on the host); ``options``: a
    run's own (its --host-limit, --gpu-limit), else the kernel's.
    """
    started = time.perf_counter()
    source = batch_probe.peak_source()
    if margin is None:
        margin = HOST_MARGIN if isinstance(source, batch_probe.HostPeaks) else MARGIN
    source_of_limit = "given"
    if limit_mib is None:
        limit_mib, source_of_limit = batch_probe.default_limit(source, options)
    why = source.unavailable()
    if why or limit_mib is None or limit_mib <= 0:
        return BatchAdvice(
            None,
            limit_mib,
            source_of_limit,
            source.where,
            reason=why or source_of_limit
            if limit_mib is None
            else why or f"no memory left under the limit ({limit_mib:,.0f} MiB)",
        )
    copy = batch_probe.copy_of(model)  # a model that can't be copied is the caller's error
    try:
        most = batch_probe.rows(x)
        first = min(8, most or 8)
        # the first step traces (and compiles): its own peak, apart from the probes'
        warmup = batch_probe.measure(copy, x, y, first, 1, source)
        guess = batch_probe.activations_guess(copy)
        probes = batch_probe.schedule(
            lambda b: batch_probe.measure(copy, x, y, b, steps, source),
            first=first,
            limit_mib=limit_mib,
            most=most,
            batch_sizes=batch_sizes,
            guess_mib=guess,
        )
        weights = _size_mib(copy.weights)
        optimizer = _size_mib(copy.optimizer.variables)
    except Exception as exc:  # ours to report, never the cell's to break
        warn(f"keras_nbguard: batch_advice could not probe: {type(exc).__name__}: {exc}")
        return BatchAdvice(
            None,
            limit_mib,
            source_of_limit,
            source.where,
            seconds=time.perf_counter() - started,
            reason=f"probing failed: {type(exc).__name__}: {exc}",
        )
    finally:
        copy = None  # the copy's weights, optimizer state and functions go with it
        gc.collect()
    advice = advise(
        probes,
        limit_mib,
        source_of_limit,
        source.where,
        weights,
        optimizer,
        time.perf_counter() - started,
        margin,
        batch_size,
        warmup,
        # a GPU allocator's peak counts the tensors in use, reset before each probe: nothing
        # covers a rise there, and its outputs may be narrower (mixed precision) than guessed
        guess if isinstance(source, batch_probe.HostPeaks) else None,
    )
    if most and advice.batch_size and advice.batch_size > most:  # no batch is larger than x
        advice = _replace(
            advice,
            batch_size=most,
            reason=f"the whole dataset ({most:,} samples) fits in one batch",
        )
    advice = _replace(advice, model_params=batch_probe.params_of(model))
    from keras_nbguard.session.core import get_session

    get_session().remember_batch_advice(advice)  # an OOM of this model quotes it
    return advice


def advice_for_label(session: Session, label: str, options: RunOptions) -> str:
    """``%%kerasrun --batch-advice``: the advice, in one line, for the model that ``label``'s
    latest run fit, on the data it fit, at its batch size (for the accumulation advice)."""
    last = session.last_fit(label)
    if last is None:
        return f"batch advice: n/a (no earlier run of {label!r} in this kernel fit a model)"
    if not last.referable:
        return (
            f"batch advice: n/a ({label!r} fit on data that can't be held weakly, such as a "
            f"list: keras_nbguard.batch_advice(model, x, y) takes it directly)"
        )
    gc.collect()  # a model let go of may still sit in a cycle (model <-> History)
    found = last.get(session.live.namespace())
    if found is None:
        return (
            f"batch advice: n/a (the model or the data {label!r} last fit is gone, and no name "
            f"of yours holds it now)"
        )
    model, x, y = found
    return batch_advice(model, x, y, batch_size=last.batch_size, options=options).text()


def advise(
    probes: list[Probe],
    limit_mib: float,
    limit_source: str,
    where: str,
    weights_mib: float | None,
    optimizer_mib: float | None,
    seconds: float,
    margin: float = MARGIN,
    user_batch: int | None = None,
    warmup: Probe | None = None,
    guess_mib: float | None = None,
) -> BatchAdvice:
    """The advice from the probes: the line, its linearity, the largest batch, accumulation.
    ``warmup``: the first step alone, at the first probe's batch; a fit's first step traces
    and compiles too, so the line starts no lower than it. ``guess_mib``: the layers' estimate
    of a sample's training memory (``batch_probe.activations_guess``), the floor of the slope."""
    usable = limit_mib * (1 - margin)
    common: dict[str, Any] = dict(
        limit_mib=limit_mib,
        limit_source=limit_source,
        where=where,
        probes=tuple(probes),
        seconds=seconds,
        margin=margin,
        user_batch=user_batch,
    )
    if len(probes) < 2 or probes[-1].batch == probes[0].batch:
        took = (
            f": batch {probes[0].batch} took {probes[0].peak_mib:,.0f} MiB of {limit_mib:,.0f}"
            if probes
            else ""
        )
        return BatchAdvice(
            None,
            **common,
            reason=f"fewer than two batch sizes could be probed under half of the limit{took}",
        )
    fixed, slope = fit_line(probes)
    span = probes[-1].peak_mib - probes[0].peak_mib
    reason = None
    if slope <= 0 or span < max(2.0, 0.01 * limit_mib):
        slope = max(slope, max(span, 2.0) / (probes[-1].batch - probes[0].batch))
        reason = (
            f"memory barely grows with the batch up to {probes[-1].batch:,}: the slope is "
            f"an upper bound"
        )
    linear, batch_range = True, None
    estimate = guess_mib if guess_mib and slope < guess_mib / OUTPUTS_IN_GUESS else None
    if estimate is not None:
        # a training step keeps every layer's output for the backward pass: probes that rose
        # less than that were covered by memory an earlier step left (an allocator's pool, the
        # last fit's data), so the layers' guess stands in, through the highest probe
        measured, slope = slope, estimate
        fixed = probes[-1].peak_mib - slope * probes[-1].batch
        reason = (
            f"the probes rose {measured:.3f} MiB a sample, less than the layers' outputs alone "
            f"({slope / OUTPUTS_IN_GUESS:.3f}): memory left by the first steps covered them; "
            f"the layers' estimate ({slope:.3f} MiB a sample) is used"
        )
    batch = _largest(fixed, slope, usable)
    if len(probes) >= 3 and estimate is None:
        # the line misses a probe by more than noise, or the first and last steps' slopes
        # (each a clear rise) differ by more than 30%: the third probe says "not linear"
        worst = max(abs(p.peak_mib - (fixed + slope * p.batch)) for p in probes)
        steps = [
            (b.peak_mib - a.peak_mib, b.batch - a.batch) for a, b in itertools.pairwise(probes)
        ]
        (rise0, n0), (rise1, n1) = steps[0], steps[-1]
        first, last = rise0 / n0, rise1 / n1
        bent = min(rise0, rise1) >= max(8.0, 0.05 * limit_mib) and abs(last - first) > 0.3 * max(
            first, last
        )
        if bent or worst > max(0.15 * span, 4.0):
            linear = False
            ends = [batch] + [
                _largest(probes[-1].peak_mib - s * probes[-1].batch, s, usable)
                for s in (first, last)
                if s > 0
            ]
            batch_range = (min(ends), max(ends))
            batch = batch_range[0]
    first_step = 0.0
    if warmup is not None:
        first_step = max(0.0, warmup.peak_mib - (fixed + slope * warmup.batch))
        fixed += first_step
        batch = _largest(fixed, slope, usable) if batch_range is None else batch
    breakdown = {
        "weights_mib": weights_mib,
        "optimizer_mib": optimizer_mib,
        "activations_per_sample_mib": slope,
        "fixed_mib": fixed,
        "first_step_mib": first_step,
    }  # what tracing and compiling add, once
    shown = sorted(
        {p.batch for p in probes}
        | {batch, max(1, batch // 2), 2 * batch}
        | ({user_batch} if user_batch else set())
    )
    advice = BatchAdvice(
        batch or None,
        **common,
        fixed_mib=fixed,
        per_sample_mib=slope,
        predicted={b: fixed + slope * b for b in shown if b > 0},
        breakdown=breakdown,
        linear=linear,
        batch_range=batch_range,
        reason=reason if batch else (reason or "the fixed part alone is over the limit"),
    )
    if batch and user_batch and user_batch > batch:
        accumulators = weights_mib or 0.0  # Keras 3: one accumulator per trainable weight
        k = math.ceil(user_batch / batch)
        while k < user_batch and fixed + slope * math.ceil(user_batch / k) + accumulators > usable:
            k += 1
        advice = _replace(advice, accumulation=(math.ceil(user_batch / k), k))
    return advice


def _replace(advice: BatchAdvice, **changes: Any) -> BatchAdvice:
    import dataclasses

    return dataclasses.replace(advice, **changes)


def batch_line_magic(shell: Any, line: str) -> BatchAdvice:
    """``%nbguard batch MODEL X [Y] [--limit MiB] [--batch N] [--steps N]``: names are looked up
    in the user's namespace. A bad line raises ValueError, in words."""
    words = shlex.split(line)
    if words and words[0] == "batch":
        words = words[1:]
    options: dict[str, int] = {}
    names: list[str] = []
    flags = {"--limit": "limit_mib", "--batch": "batch_size", "--steps": "steps"}
    i = 0
    while i < len(words):
        word = words[i]
        key, _, value = word.partition("=")
        if key in flags:
            if not value:
                i += 1
                value = words[i] if i < len(words) else ""
            if not value.isdigit() or int(value) <= 0:
                raise ValueError(
                    f"%nbguard batch: {key} takes a positive whole number, not {value!r}"
                )
            options[flags[key]] = int(value)
        elif word.startswith("-"):
            raise ValueError(f"%nbguard batch: unknown option {word} (--limit, --batch, --steps)")
        else:
            names.append(word)
        i += 1
    if not 2 <= len(names) <= 3:
        raise ValueError("usage: %nbguard batch MODEL X [Y] [--limit MiB] [--batch N]")
    missing = [n for n in names if n not in shell.user_ns]
    if missing:
        raise ValueError(f"%nbguard batch: no name {', '.join(missing)} in the notebook")
    model, x, *rest = (shell.user_ns[n] for n in names)
    return batch_advice(
        model,
        x,
        rest[0] if rest else None,
        limit_mib=options.get("limit_mib"),
        steps=options.get("steps", 2),
        batch_size=options.get("batch_size"),
    )
