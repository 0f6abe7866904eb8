"""Pure data: what one tracked run measured. Stdlib only, no references to live objects."""

from __future__ import annotations

import dataclasses
import html
import json
from dataclasses import dataclass, field
from typing import Any

from keras_nbguard.records import unknowns
from keras_nbguard.records.calls import FitRecord, InferenceRecord, from_fields
from keras_nbguard.records.formatting import (
    NA,
    clean_worth_showing,
    fmt_bytes,
    fmt_clean,
    fmt_deltas,
    fmt_fit,
    fmt_gpu,
    fmt_inference,
    fmt_own_time,
    fmt_params,
    fmt_released,
    fmt_seconds,
    fmt_stale,
    fmt_traces,
    html_code,
)
from keras_nbguard.records.samples import RssSamples

STATUSES = ("ok", "error", "interrupted", "oom", "died")  # died: the kernel was killed mid-run


@dataclass(frozen=True)
class RunKey:
    """Where a run happens: the notebook (or script), the cell, the kernel and its process."""

    notebook: str
    cell_id: str | None
    kernel_id: str
    pid: int
    pid_started: float


@dataclass(frozen=True)
class GpuReading:
    """GPU memory for one run: a figure is None when it could not be read; ``reason`` says why."""

    tf_current: int | None = None
    tf_peak: int | None = None
    nvml_used: int | None = None
    nvml_total: int | None = None
    nvml_process_used: int | None = None
    reason: str | None = None
    # whose allocator ``tf_current`` / ``tf_peak`` are: "TF", "JAX" or "torch" (names kept from
    # when TensorFlow was the only one, so stored records still read)
    allocator: str = "TF"

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
    outside: int = 0  # of ``count``, built by cells run without %%kerasrun (no run number)
    # released: their optimizers' state freed with them (a GAN makes its Adams anew every run);
    # stale: what freeing them would free of it; None: not counted (an older record)
    optimizer_bytes: int | None = None
    # stale: of ``weight_bytes``, what other live models hold too (freeing these frees none of
    # it); None: not counted
    weights_shared: int | None = None


@dataclass(frozen=True)
class Growth:
    """A name in the user's namespace whose value grew over a run (looked for only when RSS grew):
    ``items`` it gained (None: not a container), ``bytes`` about how much memory they hold."""

    name: str
    kind: str  # its type's name
    items: int | None
    bytes: int | None


def error_names_a_gpu(error: str | None) -> bool:
    """Whether an error's text says a GPU ran out (torch's "CUDA out of memory", TensorFlow's
    "device:GPU:0", XLA's "GPU"): where no GPU reading was made, the record still knows whose
    memory it was."""
    text = (error or "")[:2000]
    return any(word in text for word in ("device:GPU", "CUDA", "cuda:", " GPU "))


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
    traced: tuple[tuple[str, int], ...] = ()  # the functions traced most, with their counts
    dataset_traces: int | None = None  # functions traced of tf.data pipelines the user built
    dataset_trace_seconds: float | None = None  # the time those traces took
    # TensorFlow's own tf.functions traced in the run (a strategy's multi-device iterators): not
    # in ``traces``; None where not counted (not TensorFlow, or a record from before)
    framework_traces: int | None = None
    prepare_seconds: float | None = None  # gc, clear_session and GPU setup before the cell
    # our own time around the cell, by part ("clear", "gc", "leak check", ...): what the magic
    # adds to the time the cell holds the kernel, beside ``wall`` (the cell itself)
    own_time: tuple[tuple[str, float], ...] = ()
    error: str | None = None
    advice: tuple[str, ...] = ()
    # (seconds since start, rss bytes), downsampled for display and storage; kept compact
    rss_samples: RssSamples = field(default=RssSamples(), repr=False)
    # against the previous run of the same label; None for a first run or an unknown figure
    delta_fit_seconds: float | None = None
    delta_rss_after: int | None = None
    previous_run: int | None = None
    previous_elsewhere: bool = False  # the previous run was in another kernel (before a restart)
    # one of the two ran isolated (--isolate) and the other here: their RSS are two processes'
    rss_elsewhere: bool = False
    # why delta_fit_seconds is None where a fit of either run stopped or failed part way, or
    # the run before's fit is unknown (a child that died), or why it is not like for like: the
    # two runs' fits ran different numbers of epochs
    delta_fit_note: str | None = None
    # why delta_rss_after is None where either run died: its last RSS seen is no run's end
    delta_rss_note: str | None = None
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
    findings: tuple[str, ...] = ()  # the label's top causes after this run (diagnosis.py)
    # the RSS its runs leave rising past 1 MiB a run with no finding: whose it is, in words
    memory_note: str | None = None
    # TensorFlow's CPU pool: bytes in use as the run started (after our collection: what the
    # runs before left), and the most in use at once since the process began, after the run (it
    # keeps what it touched); None: not read (--no-clear, oneDNN off, no TF runtime yet)
    host_pool_in_use: int | None = None
    host_pool_peak: int | None = None
    # as the run started, after our collection and trim: the C heap in use (None where not read)
    # and Python's blocks in use: memory kept raises them, an allocator's resident slack not
    heap_in_use: int | None = None
    python_blocks: int | None = None
    # whose malloc the process ran on ("glibc", "jemalloc", "tcmalloc"; None: not known, and
    # glibc's for records written before it was kept)
    malloc: str | None = None
    growth: tuple[Growth, ...] = ()  # the user's names that grew most over this run, largest first
    inference: tuple[InferenceRecord, ...] = ()  # evaluate and predict calls, in call order
    keras: str | None = None  # which Keras ran, e.g. "Keras 3.15.1 (jax)"; None: none imported
    fit_reason: str | None = None  # why fits could not be timed (a Keras we can't patch)
    trace_kind: str = "tf.function"  # what ``traces`` counts ("XLA compilations" on JAX)
    trace_reason: str | None = None  # why ``traces`` is None
    isolated: str | None = None  # run in a fresh process (--isolate): how it went, in words
    # an isolated run's cell alone, in its process (``wall_seconds`` is the kernel's wait, the
    # process's start-up and the names both ways included); None: not isolated, or unknown
    cell_seconds: float | None = None
    params: dict[str, Any] | None = None  # the --sweep point this run is
    # per tf.function, the distinct inputs (shapes, Python values) it was traced for in the run:
    # (name, how many), most first; one function traced for many is retracing (diagnosis)
    signatures: tuple[tuple[str, int], ...] = ()
    # per tf.function name, its traces that repeated an input because the first call made
    # variables (TensorFlow traces that call again once they exist): no input of the user's
    traced_twice: tuple[tuple[str, int], ...] = ()

    # -- derived figures ---------------------------------------------------------------------
    @property
    def rss_delta(self) -> int | None:
        """RSS change over this run (after - before)."""
        if self.rss_before is None or self.rss_after is None:
            return None
        return self.rss_after - self.rss_before

    @property
    def fit_cpu_seconds(self) -> float | None:
        """The process's CPU time in the fits that ``fit_seconds`` counts; None if unknown."""
        trained = [f for f in self.fits if f.reached_training]
        cpu = [f.cpu_seconds for f in trained]
        return sum(c for c in cpu if c is not None) if trained and None not in cpu else None

    def compared_to(self, previous: RunRecord | None) -> RunRecord:
        """This record with its deltas against ``previous`` (the last run of the same label)."""
        if previous is None:
            return self
        # an isolated run's RSS is its own process's: beside the kernel's it says nothing
        elsewhere = bool(self.isolated) != bool(previous.isolated)
        # a fit stopped or failed part way took no whole fit's time: no difference to show
        mine, theirs = unknowns.fit_cut_short(self), unknowns.fit_cut_short(previous)
        cut = (
            f"this run's {mine}"
            if mine
            else f"#{previous.run_number}'s {theirs}"
            if theirs
            else None
        )
        # another Keras or backend (a kernel restarted on JAX after torch): nothing alike
        other = _other_keras(self, previous)
        cut = cut or other
        delta = None if cut else _diff(self.fit_seconds, previous.fit_seconds)
        if delta is None and not cut and self.fit_seconds is not None and previous.fit_reason:
            cut = f"#{previous.run_number}'s fit unknown: {previous.fit_reason}"
        died = _died(self, previous) or other
        return self.replaced(
            previous_run=previous.run_number,
            previous_elsewhere=(previous.kernel_id, previous.pid) != (self.kernel_id, self.pid),
            delta_fit_seconds=delta,
            delta_fit_note=cut or (_other_epochs(self, previous) if delta is not None else None),
            delta_rss_after=(
                None if elsewhere or died else _diff(self.rss_after, previous.rss_after)
            ),
            rss_elsewhere=elsewhere,
            delta_rss_note=died,
        )

    def __post_init__(self) -> None:
        # every record the session keeps holds its series: as arrays, whatever it was given
        object.__setattr__(self, "rss_samples", RssSamples.of(self.rss_samples))

    def replaced(self, **changes: Any) -> RunRecord:
        """``dataclasses.replace(self, **changes)``, 20x faster: a copy of the fields, not a
        call of ``__init__`` over 52 of them (12 us here, and a run makes up to six on the
        cell's path). What ``__post_init__`` does is needed only for a new series."""
        unknown = changes.keys() - _RECORD_FIELDS
        if unknown or "rss_samples" in changes:
            return dataclasses.replace(self, **changes)  # (its TypeError names the field)
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["rss_samples"] = tuple(self.rss_samples)  # plain pairs, as JSON and readers want
        return data

    @property
    def epochs_run(self) -> int:
        """The epochs its fits ended, all of them together."""
        return sum(len(fit.epoch_seconds) for fit in self.fits)

    def to_json(self) -> str:
        """``json.dumps(self.to_dict())``, the same text 4× faster (the store writes one per
        run): the encoder walks the fields, where ``asdict`` deep-copies every value first."""
        return json.dumps(self, default=_fields_of)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        data = dict(data)  # (a newer writer's extras are left out at every depth: from_fields)
        data["fits"] = tuple(FitRecord.from_dict(f) for f in data.get("fits", ()))
        data["gpu"] = from_fields(GpuReading, data.get("gpu") or {})
        for key in ("warnings", "advice", "findings"):
            data[key] = tuple(data.get(key, ()))
        data["traced"] = tuple((name, count) for name, count in data.get("traced", ()))
        data["signatures"] = tuple((name, n) for name, n in data.get("signatures", ()))
        data["traced_twice"] = tuple((name, n) for name, n in data.get("traced_twice", ()))
        data["own_time"] = tuple((part, s) for part, s in data.get("own_time", ()))
        data["growth"] = tuple(from_fields(Growth, g) for g in data.get("growth", ()))
        data["inference"] = tuple(
            from_fields(InferenceRecord, i) for i in data.get("inference", ())
        )
        data["rss_samples"] = RssSamples(data.get("rss_samples", ()))
        if data.get("deep_clean"):
            data["deep_clean"] = from_fields(CleanReport, data["deep_clean"])
        for key in ("released_models", "stale_models"):
            if data.get(key):
                held = data[key]
                data[key] = from_fields(
                    HeldModels,
                    {
                        **held,
                        "runs": tuple(held.get("runs", ())),
                        "paths": tuple(held.get("paths", ())),
                    },
                )
        return from_fields(cls, data)

    # -- display -------------------------------------------------------------------------------
    def _wall_covers(self) -> str:
        if self.isolated:  # the kernel's wait: a process started, names both ways, the cell
            return "the kernel's, in parts on the isolated line"
        return "the cell's own code"

    def _rss_row(self) -> str:
        if self.rss_before is None and self.rss_after is None and self.rss_peak is None:
            return f"{NA} ({unknowns.RSS_UNREADABLE})"
        # an isolated run's is its own process's (51 MiB beside a kernel of 960 read as the
        # kernel's): said first, so it covers all three figures
        whose = "the isolated process's: " if self.isolated else ""
        return (
            f"{whose}{fmt_bytes(self.rss_before)} → {fmt_bytes(self.rss_after)} "
            f"(peak {fmt_bytes(self.rss_peak)})"
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        """(name, value) rows shared by the text and HTML summaries."""
        rows = [
            ("status", self.status),
            ("wall", f"{fmt_seconds(self.wall_seconds)}, {self._wall_covers()}"),
            *(
                [("ours", f"{fmt_own_time(self.own_time)} (before and after the cell)")]
                if self.own_time
                else []
            ),
            ("fit", fmt_fit(self)),
            *([("inference", fmt_inference(self))] if self.inference else []),
            ("rss", self._rss_row()),
            ("gpu", fmt_gpu(self.gpu)),
            ("traces", fmt_traces(self)),
            ("vs previous", fmt_deltas(self)),
            *([("rss trend", self.memory_note)] if self.memory_note else []),
        ]
        if self.stale_models is not None:
            rows.append(("stale", fmt_stale(self.stale_models, keras=self.keras)))
        if self.released_models is not None:
            rows.append(("released", fmt_released(self.released_models)))
        if self.deep_clean is not None and clean_worth_showing(self.deep_clean):
            rows.append(("deep clean", fmt_clean(self.deep_clean)))
        if self.params:
            rows.append(("params", fmt_params(self.params)))
        if self.isolated:
            rows.append(("isolated", self.isolated))
        rows.extend(("finding", f) for f in self.findings)
        if not self.cleared:
            rows.append(("cleared", "no (--no-clear, or no Keras imported yet)"))
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
            f"<td style='text-align:left'>{html_code(value)}</td></tr>"
            for name, value in rows[1:]
        )
        return (
            f"<div class='keras-nbguard-run'><b>{html.escape(self.title())}</b> "
            f"<span style='color:{colour};font-weight:bold'>{html.escape(self.status)}</span>"
            f"<table style='font-size:90%'>{cells}</table></div>"
        )


def _other_keras(record: RunRecord, previous: RunRecord) -> str | None:
    """ "#4 ran on Keras 3.15.1 (torch)": the label's run before ran on another Keras or
    backend (a walkthrough's JAX kernel compared its first run with the torch kernel's last,
    `Δ fit +529 ms, Δ RSS after -133.4 MiB`); None where both are known and alike."""
    if not record.keras or not previous.keras or record.keras == previous.keras:
        return None
    return f"#{previous.run_number} ran on {previous.keras}"


def _died(record: RunRecord, previous: RunRecord) -> str | None:
    """ "#2 died: its last RSS seen is no run's end": a run that died has no RSS after, only
    the last sample taken before (a kernel or an isolated child killed mid-run)."""
    if "died" not in (record.status, previous.status):
        return None
    which = "this run" if record.status == "died" else f"#{previous.run_number}"
    return f"{which} died: its last RSS seen is no run's end"


def _other_epochs(record: RunRecord, previous: RunRecord) -> str | None:
    """ "6 epochs, #2 ran 3": where the two runs' fits ended different numbers of epochs (epochs
    changed, a fit resumed by ``BackupAndRestore``), their times are not like for like."""
    mine, theirs = record.epochs_run, previous.epochs_run
    if mine == theirs or not mine or not theirs:
        return None
    return f"{mine} epoch{'s' * (mine != 1)}, #{previous.run_number} ran {theirs}"


def _diff(a: float | None, b: float | None) -> Any:
    return None if a is None or b is None else a - b


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields_of(value: Any) -> dict[str, Any] | list[tuple[float, int]]:
    """A record's dataclass as the dict ``asdict`` makes of it, one level at a time (its RSS
    series as the list of pairs JSON writes)."""
    if isinstance(value, RssSamples):
        return list(value)
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        if not dataclasses.is_dataclass(value):
            raise TypeError(f"{type(value).__name__} is not part of a run record")
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    return {name: getattr(value, name) for name in names}


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRecord))
