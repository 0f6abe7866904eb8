"""How figures read: "n/a" for what is unknown, never 0; memory in MiB (2**20 bytes), and small
sizes in KiB, so that a small model never reads "0.0 MiB"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keras_nbguard.records.run import CleanReport, GpuReading, Growth, HeldModels, RunRecord

NA = "n/a"


def fmt_params(params: dict[str, Any] | None) -> str:
    """A --sweep point as the user wrote it: "units=32, lr=0.001" ("" for none)."""
    return ", ".join(f"{k}={v!r}" for k, v in (params or {}).items())


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    if n is None:
        return NA
    sign = "+" if signed and n >= 0 else ""
    return f"{sign}{n / 2**20:,.1f} MiB"


def fmt_size(n: int | None) -> str:
    """A model's size: KiB below a MiB, so a small model never reads "0.0 MiB"; bytes below a
    KiB (plain SGD's state is its step count and learning rate: 12 B, not "0.0 KiB")."""
    if n is not None and n < 2**10:
        return f"{n:,} B"
    if n is not None and n < 2**20:
        return f"{n / 2**10:,.1f} KiB"
    return fmt_bytes(n)


def fmt_seconds(s: float | None, signed: bool = False) -> str:
    if s is None:
        return NA
    sign = "+" if signed and s >= 0 else ""
    return f"{sign}{s * 1000:.0f} ms" if abs(s) < 1 else f"{sign}{s:.2f} s"


def fmt_fit(record: RunRecord) -> str:
    if not record.fits:
        return f"{NA}: {record.fit_reason}" if record.fit_reason else "no fit in this run"
    parts = [fmt_seconds(record.fit_seconds)]
    for i, fit in enumerate(record.fits, 1):
        prefix = f"fit {i}: " if len(record.fits) > 1 else ""
        if not fit.reached_training:
            parts.append(
                f"{prefix}failed before its first epoch ended ({fmt_seconds(fit.seconds)} spent)"
            )
            continue
        epochs = ", ".join(fmt_seconds(s) for s in fit.epoch_seconds) or NA
        bs = "set by your input" if fit.batch_size is None else str(fit.batch_size)
        cb = fmt_seconds(fit.callback_seconds)
        parts.append(f"{prefix}epochs [{epochs}], batch {bs}, your callbacks {cb}")
    return "; ".join(parts)


def fmt_inference(record: RunRecord) -> str:
    """One line for a run's evaluate and predict calls, beside fit's peak RSS: training needs
    more memory than inference, and this shows by how much."""
    calls = ", ".join(
        f"{call.kind} {fmt_seconds(call.seconds)}" + ("" if call.completed else " (raised)")
        for call in record.inference
    )
    peaks = [c.rss_peak for c in record.inference if c.rss_peak is not None]
    fit_peaks = [f.rss_peak for f in record.fits if f.rss_peak is not None]
    fit = f" vs fit {fmt_bytes(max(fit_peaks))}" if fit_peaks else ""
    return f"{calls} (peak RSS {fmt_bytes(max(peaks) if peaks else None)}{fit})"


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
        text += f"; {_count(clean.kept, 'entry', 'entries')} kept for runs whose models are alive"
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


def fmt_stale(held: HeldModels, with_command: bool = True) -> str:
    """``2 models from #3, #4 still alive (16.4 MiB weights): models[0], models[1] — ...``"""
    command = f" — {held.command}" if held.command and with_command else ""
    return (
        f"{_models_from(held)} still alive ({fmt_size(held.weight_bytes)} weights, graphs "
        f"not counted): {_first_paths(held.paths)}{command}"
    )


def fmt_released(held: HeldModels) -> str:
    """``1 model from #5 held by Out[12] (its History): 0.2 MiB weights, RSS -7.9 MiB``"""
    rss = (
        ""
        if held.rss_freed is None
        else f", RSS {fmt_bytes(-held.rss_freed, signed=True)} with its graphs"
    )
    return (
        f"{_models_from(held)} held by {_first_paths(held.paths)}: "
        f"{fmt_size(held.weight_bytes)} weights{rss}"
    )


def fmt_traces(record: RunRecord) -> str:
    if record.traces is None:
        return f"{NA} ({record.trace_reason})" if record.trace_reason else NA
    text = f"{record.traces} {record.trace_kind}"
    if record.trace_kind == "tf.function":
        data = NA if record.dataset_traces is None else str(record.dataset_traces)
        text += f", {data} tf.data of yours"
    if record.traced:  # what was traced: a strategy's many steady traces don't read as retracing
        text += "; most: " + ", ".join(f"{name} {count}×" for name, count in record.traced)
    if record.framework_traces:
        text += f"; {record.framework_traces} more of TensorFlow's own functions"
    return text


def fmt_deltas(record: RunRecord) -> str:
    if record.previous_run is None:
        return "first run of this label"
    fit = fmt_seconds(record.delta_fit_seconds, signed=True)
    if record.delta_fit_seconds is None:  # say why: one of the two runs fit nothing
        fit += (
            " (no fit in this run)"
            if record.fit_seconds is None
            else f" (no fit in #{record.previous_run})"
        )
    rss = fmt_bytes(record.delta_rss_after, signed=True)
    if record.delta_rss_after is None:
        rss += " (RSS unreadable)"
    where = " (in an earlier kernel: a restart between)" if record.previous_elsewhere else ""
    return f"#{record.previous_run}{where}: Δ fit {fit}, Δ RSS after {rss}"


def fmt_growth(growth: Growth) -> str:
    """What one name of the user's grew by over a run: "`histories` (list) +1 item, +38.1 MiB"."""
    items = "" if growth.items is None else f" {growth.items:+,} item{'s' * (growth.items != 1)},"
    return f"`{growth.name}` ({growth.kind}){items} {fmt_bytes(growth.bytes, signed=True)}"
