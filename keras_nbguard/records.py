"""Pure data: what one tracked run measured. Stdlib only, no references to live objects."""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "error", "interrupted", "oom", "died")  # died: the kernel was killed mid-run
NA = "n/a"


@dataclass(frozen=True)
class FitRecord:
    """One call to ``Model.fit`` inside a run."""

    seconds: float
    epochs: int | None
    epoch_seconds: tuple[float, ...] = ()
    callback_seconds: float | None = None
    batch_size: int | None = None
    steps: int | None = None
    model_name: str | None = None
    completed: bool = True


@dataclass(frozen=True)
class GpuReading:
    """GPU memory for one run: a figure is None when it could not be read; ``reason`` says why."""

    tf_current: int | None = None
    tf_peak: int | None = None
    nvml_used: int | None = None
    nvml_total: int | None = None
    nvml_process_used: int | None = None
    reason: str | None = None

    @property
    def known(self) -> bool:
        return any(
            v is not None
            for v in (self.tf_current, self.tf_peak, self.nvml_used, self.nvml_process_used)
        )


@dataclass(frozen=True)
class CleanReport:
    """What one deep clean reclaimed. Unknown figures are None, never 0."""

    available: bool
    entries: int = 0  # gradient-registry entries purged
    runs: int = 0  # earlier runs whose entries were purged
    kept: int = 0  # entries still held for runs whose models are alive (or unknown)
    functions: int | None = None  # eager-context functions released; None: not counted
    rss_before: int | None = None  # bytes
    rss_after: int | None = None
    seconds: float = 0.0
    reason: str | None = None  # why nothing was attempted (unavailable, TensorFlow not imported)

    @property
    def rss_freed(self) -> int | None:
        if self.rss_before is None or self.rss_after is None:
            return None
        return self.rss_before - self.rss_after


@dataclass(frozen=True)
class HeldModels:
    """Models of earlier runs of a run's label: those released around the run (``paths``: the
    holders they were released from), or those still alive after it (``paths``: where they are
    held, as the user would type it). Pure data: never a model."""

    count: int
    runs: tuple[int, ...] = ()  # the run numbers they came from
    weight_bytes: int | None = None  # their weights; None when a size is unknown
    paths: tuple[str, ...] = ()
    command: str | None = None  # stale: what frees them
    rss_freed: int | None = None  # released: RSS drop once gone, graphs included (None: unknown)


@dataclass(frozen=True)
class RunRecord:
    """Everything measured about one ``%%kerasrun`` cell or ``track()`` block."""

    label: str
    status: str
    started_at: float
    wall_seconds: float
    fit_seconds: float | None
    fits: tuple[FitRecord, ...]
    rss_before: int | None
    rss_after: int | None
    rss_peak: int | None
    gpu: GpuReading
    cleared: bool
    traces: int | None  # tf.function traces (train steps etc.)
    warnings: tuple[str, ...] = ()
    run_number: int = 1
    dataset_traces: int | None = None  # tf.data pipeline functions traced (rebuilt datasets)
    prepare_seconds: float | None = None  # gc, clear_session and GPU setup before the cell
    error: str | None = None
    advice: tuple[str, ...] = ()
    # (seconds since start, rss bytes), downsampled for display and storage
    rss_samples: tuple[tuple[float, int], ...] = field(default=(), repr=False)
    # against the previous run of the same label; None for a first run or an unknown figure
    delta_fit_seconds: float | None = None
    delta_rss_after: int | None = None
    previous_run: int | None = None
    # where the run happened, so history can span kernel restarts
    notebook: str | None = None
    cell_id: str | None = None
    kernel_id: str | None = None
    # the kernel's process: "Restart kernel" in Jupyter keeps the kernel id, not the process
    pid: int | None = None
    deep_clean: CleanReport | None = None  # what the clean before this run reclaimed
    # earlier runs' models of this label: released from IPython's and Keras' caches around the
    # run, and those still held by the user's own names and containers after it
    released_models: HeldModels | None = None
    stale_models: HeldModels | None = None

    # -- derived figures ---------------------------------------------------------------------
    @property
    def rss_delta(self) -> int | None:
        """RSS change over this run (after - before)."""
        if self.rss_before is None or self.rss_after is None:
            return None
        return self.rss_after - self.rss_before

    def compared_to(self, previous: RunRecord | None) -> RunRecord:
        """This record with its deltas against ``previous`` (the last run of the same label)."""
        if previous is None:
            return self
        return dataclasses.replace(
            self,
            previous_run=previous.run_number,
            delta_fit_seconds=_diff(self.fit_seconds, previous.fit_seconds),
            delta_rss_after=_diff(self.rss_after, previous.rss_after),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}  # a newer writer's extras: ignored
        data["fits"] = tuple(
            FitRecord(**{**f, "epoch_seconds": tuple(f.get("epoch_seconds", ()))})
            for f in data.get("fits", ())
        )
        data["gpu"] = GpuReading(**(data.get("gpu") or {}))
        for key in ("warnings", "advice"):
            data[key] = tuple(data.get(key, ()))
        data["rss_samples"] = tuple(tuple(s) for s in data.get("rss_samples", ()))
        if data.get("deep_clean"):
            data["deep_clean"] = CleanReport(**data["deep_clean"])
        for key in ("released_models", "stale_models"):
            if data.get(key):
                held = data[key]
                data[key] = HeldModels(**{**held, "runs": tuple(held.get("runs", ())),
                                          "paths": tuple(held.get("paths", ()))})
        return cls(**data)

    # -- display -------------------------------------------------------------------------------
    def summary_rows(self) -> list[tuple[str, str]]:
        """(name, value) rows shared by the text and HTML summaries."""
        rows = [
            ("status", self.status),
            ("wall", fmt_seconds(self.wall_seconds)),
            ("fit", fmt_fit(self)),
            ("rss", f"{fmt_bytes(self.rss_before)} → {fmt_bytes(self.rss_after)} "
                    f"(peak {fmt_bytes(self.rss_peak)})"),
            ("gpu", fmt_gpu(self.gpu)),
            ("traces", fmt_traces(self)),
            ("vs previous", fmt_deltas(self)),
        ]
        if self.stale_models is not None:
            rows.append(("stale", fmt_stale(self.stale_models)))
        if self.released_models is not None:
            rows.append(("released", fmt_released(self.released_models)))
        if self.deep_clean is not None:
            rows.append(("deep clean", fmt_clean(self.deep_clean)))
        if not self.cleared:
            rows.append(("cleared", "no (--no-clear, or Keras not imported yet)"))
        if self.error:
            rows.append(("error", self.error))
        rows.extend(("advice", a) for a in self.advice)
        rows.extend(("warning", w) for w in self.warnings)
        return rows

    def title(self) -> str:
        return f"kerasrun {self.label!r} #{self.run_number}"

    def summary_text(self, rows: list[tuple[str, str]] | None = None) -> str:
        rows = self.summary_rows() if rows is None else rows
        return "\n".join([self.title(), *(f"  {name:<12} {value}" for name, value in rows)])

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        if cycle:
            p.text(f"RunRecord({self.label!r}, ...)")
            return
        p.text(self.title())
        for name, value in self.summary_rows():
            p.break_()
            p.text(f"  {name:<12} {value}")

    def summary_bundle(self) -> dict[str, str]:
        """The summary as a display bundle, built once (the magic shows it after every run)."""
        rows = self.summary_rows()
        return {"text/plain": self.summary_text(rows), "text/html": self._repr_html_(rows)}

    def _repr_html_(self, rows: list[tuple[str, str]] | None = None) -> str:
        rows = self.summary_rows() if rows is None else rows
        colour = {"ok": "#2e7d32", "error": "#c62828", "oom": "#c62828"}.get(self.status, "#ef6c00")
        cells = "".join(
            f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(name)}</th>"
            f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
            for name, value in rows[1:]
        )
        return (
            f"<div class='keras-nbguard-run'><b>{html.escape(self.title())}</b> "
            f"<span style='color:{colour};font-weight:bold'>{html.escape(self.status)}</span>"
            f"<table style='font-size:90%'>{cells}</table></div>"
        )


def _diff(a: float | None, b: float | None) -> Any:
    return None if a is None or b is None else a - b


# -- formatting helpers: "n/a" for unknown, never 0 ------------------------------------------
def fmt_bytes(n: int | None, signed: bool = False) -> str:
    if n is None:
        return NA
    sign = "+" if signed and n >= 0 else ""
    return f"{sign}{n / 2**20:,.1f} MB"


def fmt_size(n: int | None) -> str:
    """A model's size: KB below a MB, so a small model never reads "0.0 MB"."""
    if n is not None and n < 2**20:
        return f"{n / 2**10:,.1f} KB"
    return fmt_bytes(n)


def fmt_seconds(s: float | None, signed: bool = False) -> str:
    if s is None:
        return NA
    sign = "+" if signed and s >= 0 else ""
    return f"{sign}{s * 1000:.0f} ms" if abs(s) < 1 else f"{sign}{s:.2f} s"


def fmt_fit(record: RunRecord) -> str:
    if not record.fits:
        return "no fit in this run"
    parts = [fmt_seconds(record.fit_seconds)]
    for i, fit in enumerate(record.fits, 1):
        epochs = ", ".join(fmt_seconds(s) for s in fit.epoch_seconds) or NA
        prefix = f"fit {i}: " if len(record.fits) > 1 else ""
        bs = NA if fit.batch_size is None else str(fit.batch_size)
        cb = fmt_seconds(fit.callback_seconds)
        parts.append(f"{prefix}epochs [{epochs}], batch {bs}, your callbacks {cb}")
    return "; ".join(parts)


def fmt_gpu(gpu: GpuReading) -> str:
    if not gpu.known:
        return f"{NA} ({gpu.reason or 'unknown'})"
    text = (f"TF current {fmt_bytes(gpu.tf_current)}, peak {fmt_bytes(gpu.tf_peak)}; "
            f"NVML process {fmt_bytes(gpu.nvml_process_used)}, device "
            f"{fmt_bytes(gpu.nvml_used)} / {fmt_bytes(gpu.nvml_total)}")
    return f"{text} ({gpu.reason})" if gpu.reason else text


def fmt_clean(clean: CleanReport) -> str:
    if not clean.available:
        return f"{NA} ({clean.reason})"
    functions = NA if clean.functions is None else str(clean.functions)
    freed = clean.rss_freed
    # what is still held too: entries piling up for live models never hide behind "0 purged"
    return (f"{clean.entries} gradient entries of {clean.runs} earlier run(s) purged, "
            f"{clean.kept} held for runs whose models live; {functions} functions released, "
            f"RSS {fmt_bytes(None if freed is None else -freed, signed=True)}, "
            f"{fmt_seconds(clean.seconds)}")


def _models_from(held: HeldModels) -> str:
    runs = ", ".join(f"#{n}" for n in held.runs)
    return f"{held.count} model{'s' if held.count != 1 else ''}" + (f" from {runs}" if runs else "")


def _first_paths(paths: tuple[str, ...], count: int = 3) -> str:
    more = len(paths) - count
    return ", ".join(paths[:count]) + (f" and {more} more" if more > 0 else "")


def fmt_stale(held: HeldModels) -> str:
    """``2 models from #3, #4 still alive (16.4 MB weights): models[0], models[1] — ...``"""
    command = f" — {held.command}" if held.command else ""
    return (f"{_models_from(held)} still alive ({fmt_size(held.weight_bytes)} weights, graphs "
            f"not counted): {_first_paths(held.paths)}{command}")


def fmt_released(held: HeldModels) -> str:
    """``1 model from #5 held by Out[12] (its History): 0.2 MB weights, RSS -7.9 MB``"""
    rss = ("" if held.rss_freed is None
           else f", RSS {fmt_bytes(-held.rss_freed, signed=True)} with its graphs")
    return (f"{_models_from(held)} held by {_first_paths(held.paths)}: "
            f"{fmt_size(held.weight_bytes)} weights{rss}")


def fmt_traces(record: RunRecord) -> str:
    if record.traces is None:
        return NA
    data = NA if record.dataset_traces is None else str(record.dataset_traces)
    return f"{record.traces} tf.function, {data} tf.data"


def fmt_deltas(record: RunRecord) -> str:
    if record.previous_run is None:
        return "first run of this label"
    return (f"#{record.previous_run}: Δ fit {fmt_seconds(record.delta_fit_seconds, signed=True)}, "
            f"Δ RSS after {fmt_bytes(record.delta_rss_after, signed=True)}")
