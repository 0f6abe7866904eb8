"""How figures read: "n/a" for what is unknown, never 0; memory in MiB (2**20 bytes), and small
sizes in KiB, so that a small model never reads "0.0 MiB"."""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any

from keras_nbguard.records import unknowns

if TYPE_CHECKING:
    from keras_nbguard.records.calls import FitRecord
    from keras_nbguard.records.run import CleanReport, GpuReading, Growth, HeldModels, RunRecord

NA = "n/a"
_BACKTICKED = re.compile(r"`([^`]+)`")


def html_code(text: str) -> str:
    """``text`` escaped for HTML, with its backticked spans (a name, a call to type) shown as
    code, as a notebook shows Markdown: ``model.predict_on_batch(x)``, not its backticks."""
    escaped = html.escape(text)
    return _BACKTICKED.sub(r"<code>\1</code>", escaped) if "`" in escaped else escaped


def fmt_params(params: dict[str, Any] | None) -> str:
    """A --sweep point as the user wrote it: "units=32, lr=0.001" ("" for none)."""
    return ", ".join(f"{k}={v!r}" for k, v in (params or {}).items())


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    if n is None:
        return NA
    mib = n / 2**20
    if round(mib, 1) == 0:
        mib = 0.0  # a drop under 0.05 MiB read "-0.0 MiB"
    sign = "+" if signed and mib >= 0 else ""
    return f"{sign}{mib:,.1f} MiB"


def fmt_size(n: int | None) -> str:
    """A model's size: KiB below a MiB, so a small model never reads "0.0 MiB"; bytes below a
    KiB (plain SGD's state is its step count and learning rate: 12 B, not "0.0 KiB")."""
    if n is not None and n < 2**10:
        return f"{n:,} B"
    if n is not None and n < 1000 * 2**10:  # from there on MiB: not "1,021.2 KiB"
        return f"{n / 2**10:,.1f} KiB"
    return fmt_bytes(n)


def fmt_seconds(s: float | None, signed: bool = False) -> str:
    if s is None:
        return NA
    sign = "+" if signed and s >= 0 else ""
    return f"{sign}{s * 1000:.0f} ms" if abs(s) < 1 else f"{sign}{s:.2f} s"


LISTED_CALLS = 4  # fits, or evaluate/predict calls, a summary lists one by one; more: totals
LISTED_EPOCHS = 8  # epoch times listed in full; more: the first ones, a count, the last ones


def fmt_fit(record: RunRecord) -> str:
    if not record.fits:
        return f"{NA}: {record.fit_reason}" if record.fit_reason else "no fit in this run"
    if len(record.fits) > LISTED_CALLS:  # fit in a loop: one epoch a call, say
        return _fmt_many_fits(record)
    parts = [fmt_seconds(record.fit_seconds)]
    for i, fit in enumerate(record.fits, 1):
        prefix = f"fit {i}: " if len(record.fits) > 1 else ""
        if not fit.reached_training:
            how = _how_it_ended(record, i)
            parts.append(
                f"{prefix}{how} before its first epoch ended ({fmt_seconds(fit.seconds)} spent)"
            )
            continue
        if not fit.epoch_seconds and record.fit_reason:  # the fit ran, unseen by our callback
            parts.append(f"{prefix}epochs and batch {NA} ({record.fit_reason})")
            continue
        bs = "set by your input" if fit.batch_size is None else str(fit.batch_size)
        cb = fmt_seconds(fit.callback_seconds)
        parts.append(
            f"{prefix}epochs [{_fmt_epochs(fit.epoch_seconds)}]{_outside_epochs(fit)}"
            f"{_cut_short(record, fit, i)}, batch {bs}, your callbacks {cb}"
        )
    return "; ".join(parts)


def _cut_short(record: RunRecord, fit: FitRecord, number: int) -> str:
    """``, stopped after 1 epoch``: where a fit that had ended epochs did not end (its time then
    is no whole fit's)."""
    if fit.completed:
        return ""
    done = len(fit.epoch_seconds)
    return f", {_how_it_ended(record, number)} after {done} epoch{'s' if done != 1 else ''}"


def _how_it_ended(record: RunRecord, number: int) -> str:
    """A fit that did not end: the run's last one was stopped or failed as the run was; an
    earlier one can only have failed (its error caught by the cell, which went on)."""
    return unknowns.stopped_or_failed(record) if number == len(record.fits) else "failed"


OUTSIDE_SHOWN = 0.5  # seconds, and a fifth of the fit: time a fit spent outside its epochs


def _outside_epochs(fit: FitRecord) -> str:
    """`` (+2.05 s outside them)``, where a finished fit spent much of its time before its first
    epoch or after its last: the epochs don't add up. Where most of it came after training
    ended, it says so: TensorFlow's tf.data iterators closing (``FitRecord.closing_seconds``;
    keras.io's bidirectional LSTM: 0-5 s of a 15 s fit, bare as under the magic)."""
    if not fit.completed or not fit.epoch_seconds:
        return ""  # a fit stopped in an epoch: that epoch's time is in no figure
    outside = fit.seconds - sum(fit.epoch_seconds)
    if outside < max(OUTSIDE_SHOWN, 0.2 * fit.seconds):
        return ""
    closing = fit.closing_seconds
    if closing is not None and closing >= outside / 2:
        return (
            f" (+{fmt_seconds(outside)} outside them, {fmt_seconds(closing)} of it after "
            "training ended, as the fit let go of its data)"
        )
    return f" (+{fmt_seconds(outside)} outside them)"


def _fmt_epochs(seconds: tuple[float, ...]) -> str:
    """``839 ms, 512 ms``; past ``LISTED_EPOCHS``, ``839 ms, 512 ms, 498 ms, … 94 more …,
    502 ms, 497 ms``: the first epochs trace, the last ones show where the fit ended up."""
    shown = [fmt_seconds(s) for s in seconds]
    if len(shown) > LISTED_EPOCHS:
        shown = [*shown[:3], f"… {len(shown) - 5} more …", *shown[-2:]]
    return ", ".join(shown) or NA


def _fmt_many_fits(record: RunRecord) -> str:
    """``13.2 s in 40 fits: 1.53 s first, then 258–412 ms each; 40 epochs, batch 128, your
    callbacks 12 ms``."""
    trained = [f for f in record.fits if f.reached_training]
    text = f"{fmt_seconds(record.fit_seconds)} in {len(record.fits)} fits"
    if trained:
        times = [f.seconds for f in trained]
        later = times[1:]
        then = f", then {_fmt_range(min(later), max(later))} each" if later else ""
        epochs = sum(len(f.epoch_seconds) for f in trained)
        sizes = sorted({f.batch_size for f in trained}, key=lambda b: (b is None, b or 0))
        said = ["set by your input" if b is None else str(b) for b in sizes]
        batch = f"batch {said[0]}" if len(said) == 1 else f"batches {', '.join(said)}"
        callbacks = [f.callback_seconds for f in trained if f.callback_seconds is not None]
        text += (
            f": {fmt_seconds(times[0])} first{then}; {epochs} epochs, {batch}, your callbacks "
            f"{fmt_seconds(sum(callbacks)) if callbacks else NA + ' (not timed)'}"
        )
    if failed := len(record.fits) - len(trained):
        text += f"; {failed} failed before their first epoch ended"
    return text


def _fmt_range(low: float, high: float) -> str:
    """``643–693 ms``, ``820 ms–1.20 s``."""
    a, b = fmt_seconds(low), fmt_seconds(high)
    if a == b:
        return a
    (number, unit), (_, high_unit) = a.split(), b.split()
    return f"{number}–{b}" if unit == high_unit else f"{a}–{b}"


def fmt_inference(record: RunRecord) -> str:
    """One line for a run's evaluate and predict calls, beside fit's peak RSS: training needs
    more memory than inference, and this shows by how much. Past ``LISTED_CALLS`` calls, a
    total per kind (``predict 60× 3.11 s``): a predict in a loop."""
    calls = record.inference
    if sum(c.calls for c in calls) <= LISTED_CALLS:
        said = ", ".join(
            f"{call.kind} {fmt_seconds(call.seconds)}" + ("" if call.completed else " (raised)")
            for call in calls
        )
    else:
        kinds = dict.fromkeys(c.kind for c in calls)  # in the order first called
        said = ", ".join(_fmt_kind(kind, [c for c in calls if c.kind == kind]) for kind in kinds)
    peaks = [c.rss_peak for c in calls if c.rss_peak is not None]
    fit_peaks = [f.rss_peak for f in record.fits if f.rss_peak is not None]
    fit = f" vs fit {fmt_bytes(max(fit_peaks))}" if fit_peaks else ""
    return f"{said} (peak RSS {fmt_bytes(max(peaks) if peaks else None)}{fit})"


def _fmt_kind(kind: str, calls: list[Any]) -> str:
    count = sum(c.calls for c in calls)
    seconds = fmt_seconds(sum(c.seconds for c in calls))
    raised = sum(c.calls for c in calls if not c.completed)
    text = f"{kind} {seconds}" if count == 1 else f"{kind} {count}× {seconds}"
    return text + (f" ({raised} raised)" if raised else "")


def fmt_gpu(gpu: GpuReading) -> str:
    if not gpu.known:
        return f"{NA} ({gpu.reason or 'unknown'})"
    text = (
        f"{gpu.allocator} current {fmt_bytes(gpu.tf_current)}, peak {fmt_bytes(gpu.tf_peak)}; "
        f"NVML process {fmt_bytes(gpu.nvml_process_used)}, device "
        f"{fmt_bytes(gpu.nvml_used)} / {fmt_bytes(gpu.nvml_total)}"
    )
    return f"{text} ({gpu.reason})" if gpu.reason else text


def fmt_clean(clean: CleanReport) -> str:
    """What the deep clean did, in words: ``freed what TensorFlow kept of 2 earlier runs (4
    gradient entries, 6 functions); 2 entries kept for runs whose models are alive``."""
    if not clean.available:
        return f"{NA} ({clean.reason})"
    functions = "functions n/a" if clean.functions is None else _count(clean.functions, "function")
    text = (
        f"freed what TensorFlow kept of {_count(clean.runs, 'earlier run')} "
        f"({_count(clean.entries, 'gradient entry', 'gradient entries')}, {functions})"
    )
    if clean.kept:  # entries piling up for live models never hide behind a purge
        # (the last run's model is alive as a run begins: "models are alive" read as stale ones)
        text += (
            f"; {_count(clean.kept, 'entry', 'entries')} kept for runs whose models were alive as "
            "this run began (the last run's too)"
        )
    return text


def clean_worth_showing(clean: CleanReport) -> bool:
    """A summary shows the deep clean when it freed something, or when it can't work where it
    should (TensorFlow's layout changed); not on every run, and not on other backends."""
    if clean.available:
        return clean.entries > 0
    reason = clean.reason or ""
    return not (reason.endswith("backend") or reason == "TensorFlow is not imported")


def fmt_own_time(parts: tuple[tuple[str, float], ...]) -> str:
    """``41 ms: clear 5 ms, gc 12 ms, leak check 20 ms``: what the magic adds to a cell."""
    total = sum(seconds for _, seconds in parts)
    biggest = sorted(parts, key=lambda part: -part[1])
    return f"{fmt_seconds(total)}: " + ", ".join(f"{name} {fmt_seconds(s)}" for name, s in biggest)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _models_from(held: HeldModels) -> str:
    """``2 models from #3, #4``; ``3 models: 1 from #1, 2 built without %%kerasrun``."""
    runs = ", ".join(f"#{n}" for n in held.runs)
    models = f"{held.count} model{'s' if held.count != 1 else ''}"
    if not held.outside:
        return models + (f" from {runs}" if runs else "")
    outside = "built without %%kerasrun"
    if held.outside == held.count:
        return f"{models} {outside}"
    return f"{models}: {held.count - held.outside} from {runs}, {held.outside} {outside}"


def _first_paths(paths: tuple[str, ...], count: int = 3) -> str:
    more = len(paths) - count
    return ", ".join(paths[:count]) + (f" and {more} more" if more > 0 else "")


def fmt_stale(held: HeldModels, with_command: bool = True, keras: str | None = None) -> str:
    """``2 models from #3, #4 still alive (16.4 MiB weights): models[0], models[1] — ...``"""
    command = f" — {held.command}" if held.command and with_command else ""
    # your own names go with them: said before you run it (a walkthrough's `kept` was a
    # NameError after "%nbguard free", which nothing had said would delete it)
    names = [p for p in held.paths if p.isidentifier() and not p.startswith("_")]
    if command and names:
        command += f" (it deletes {', '.join(names[:3])})"
    # no path found (the walk's time ran out): not an empty holder
    where = _first_paths(held.paths) if held.paths else "%nbguard leaks says where"
    return f"{_models_from(held)} still alive ({fmt_stale_size(held, keras)}): {where}{command}"


def fmt_stale_size(held: HeldModels, keras: str | None = None) -> str:
    """``5.5 MiB weights (all in other live models too) + 11.1 MiB optimizer, graphs not
    counted``: what freeing them frees, as the dashboard's list says it (the summary said
    ``5.5 MiB weights`` where those were the setup's teacher, which the current model holds)."""
    weights, shared = held.weight_bytes, held.weights_shared
    if not weights or not shared:
        others = ""
    elif shared >= weights:
        others = "all in other live models too"
    else:
        others = f"{fmt_size(shared)} of them in other live models too"
    return f"{fmt_weights(weights, held.optimizer_bytes, others)}{not_counted(keras)}"


def not_counted(keras: str | None) -> str:
    """What a model pins beyond its weights and optimizer, by the Keras it ran on (``Keras
    3.15.1 (torch)``): TensorFlow's graphs, JAX's compiled steps; torch runs eagerly, and a
    walkthrough on it read "graphs not counted" of models that have none."""
    if keras and "(torch)" in keras:
        return ""
    if keras and "(jax)" in keras:
        return ", compiled steps not counted"
    return ", graphs not counted"


def fmt_weights(weight_bytes: int | None, optimizer_bytes: int | None, shared: str = "") -> str:
    """``5.4 MiB weights (all in gan too) + 10.8 MiB optimizer``: models' sizes as every view
    says them, what other models hold of the weights beside them (after the optimizer it read
    as if the optimizer were shared too), the optimizer only where there is some state."""
    others = f" ({shared})" if shared else ""
    state = f" + {fmt_size(optimizer_bytes)} optimizer" if optimizer_bytes else ""
    return f"{fmt_size(weight_bytes)} weights{others}{state}"


RSS_SHOWN = 2**20 // 20  # below it, fmt_bytes shows a change as "-0.0 MiB"


def fmt_released(held: HeldModels) -> str:
    """``1 model from #5 held by Out[12] (its History): 0.2 MiB weights + 0.4 MiB optimizer, RSS
    -7.9 MiB`` (the optimizer state freed with them, where there was some)"""
    if held.rss_freed is None:
        rss = ""
    elif abs(held.rss_freed) < RSS_SHOWN:  # not "RSS -0.0 MiB" (a small model, on torch)
        rss = ", the RSS the same"
    else:
        rss = f", RSS {fmt_bytes(-held.rss_freed, signed=True)} with its graphs"
    return (
        f"{_models_from(held)} held by {_first_paths(held.paths)}: "
        f"{fmt_weights(held.weight_bytes, held.optimizer_bytes)}{rss}"
    )


def fmt_traces(record: RunRecord) -> str:
    if record.traces is None:
        return f"{NA} ({unknowns.traces_unknown(record)})"
    text = f"{record.traces} {record.trace_kind}"
    if record.trace_kind == "tf.function":
        data = NA if record.dataset_traces is None else str(record.dataset_traces)
        text += f", {data} tf.data of yours"
        if record.dataset_traces and record.dataset_trace_seconds is not None:
            text += f" ({fmt_seconds(record.dataset_trace_seconds)})"
    if record.traced:  # what was traced: a strategy's many steady traces don't read as retracing
        text += "; most: " + ", ".join(
            _traced(record, name, count) for name, count in record.traced
        )
    if record.framework_traces:
        text += f"; {record.framework_traces} more of TensorFlow's own functions"
    return text


def _traced(record: RunRecord, name: str, count: int) -> str:
    """``multi_step_on_iterator 4×``, and whether that is one function traced again and again
    or several of one name (fit's and evaluate's steps, a new model's), each for one input: the
    run's ``signatures`` count each function's distinct inputs. A first call that made variables
    is traced twice for one input (Keras 2's train step): that second trace is no new input."""
    most = max((n for each, n in record.signatures if each == name), default=0)
    twice = dict(record.traced_twice).get(name, 0)
    inputs = count - twice  # the traces that each met an input anew
    if inputs > 1 and most == 1:
        why = "several functions, one input each"
    elif 1 < most <= inputs:
        why = f"one function for {most} inputs"
    elif twice and most == 1:
        why = "one input"
    else:
        return f"{name} {count}×"
    if twice:
        why += "; TensorFlow traces a first call that makes variables twice"
    return f"{name} {count}× ({why})"


def fmt_deltas(record: RunRecord) -> str:
    if record.previous_run is None:
        return "first run of this label"
    fit = fmt_seconds(record.delta_fit_seconds, signed=True)
    if record.delta_fit_note:  # why n/a (a fit cut short), or why not like for like (epochs)
        fit += f" ({record.delta_fit_note})"
    elif record.delta_fit_seconds is None:  # say why: one of the two runs fit nothing
        fit += (
            f" ({record.fit_reason or 'no fit in this run'})"
            if record.fit_seconds is None
            else f" (no fit in #{record.previous_run})"
        )
    rss = fmt_bytes(record.delta_rss_after, signed=True)
    if record.delta_rss_after is None:
        rss += f" ({unknowns.delta_rss_unknown(record)})"
    elif (between := _rss_between_runs(record)) is not None:
        rss += (
            f" ({fmt_bytes(between, signed=True)} of it came after #{record.previous_run} "
            f"ended, before this run began)"
        )
    where = " (in an earlier kernel: a restart between)" if record.previous_elsewhere else ""
    return f"#{record.previous_run}{where}: Δ fit {fit}, Δ RSS after {rss}"


BETWEEN_RUNS_SHOWN = 4 * 2**20


def _rss_between_runs(record: RunRecord) -> int | None:
    """What RSS rose by from the previous run's end to this run's start (after its collection),
    where that is most of a rise of 4 MiB at least: an interrupted run's traceback (IPython
    parses the sources of TensorFlow's frames it shows, +49 MiB after keras.io's VAE was
    stopped mid-fit), or other cells between the runs, is not this run's doing."""
    delta, after, before = record.delta_rss_after, record.rss_after, record.rss_before
    if delta is None or after is None or before is None or record.previous_elsewhere:
        return None
    between = before - (after - delta)
    if delta < BETWEEN_RUNS_SHOWN or between < max(BETWEEN_RUNS_SHOWN, delta / 2):
        return None
    return between


def fmt_growth(growth: Growth) -> str:
    """What one name of the user's grew by over a run: "`histories` (list) +1 item, +38.1 MiB"."""
    items = "" if growth.items is None else f" {growth.items:+,} item{'s' * (growth.items != 1)},"
    return f"`{growth.name}` ({growth.kind}){items} {fmt_bytes(growth.bytes, signed=True)}"
