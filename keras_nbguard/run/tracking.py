"""One tracked run: prepare, start the collectors, and turn what they saw into a RunRecord.

Our own failures never reach the user's code: each collector step runs under ``_attempt``, which
turns an exception into one warning and a note in the record.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from keras_nbguard import backends
from keras_nbguard.collectors.call_peaks import CallPeaks
from keras_nbguard.collectors.finalizer_stops import StopsInFinalizers
from keras_nbguard.collectors.fit import FitTimer
from keras_nbguard.collectors.gpu import GpuCollector
from keras_nbguard.collectors.host_limit import HostLimit
from keras_nbguard.collectors.iterator_closing import IteratorsClosedElsewhere
from keras_nbguard.collectors.process import PeakRss, RssSampler
from keras_nbguard.collectors.traces import trace_counter_for
from keras_nbguard.prepare import kept_state, layer_names
from keras_nbguard.prepare.before_run import RunOptions, prepare
from keras_nbguard.records.run import CleanReport, GpuReading, HeldModels, RunKey, RunRecord
from keras_nbguard.records.samples import RssSamples
from keras_nbguard.run import outcome

if TYPE_CHECKING:
    from keras_nbguard.collectors.gpu import NvmlReader, TfGpu
    from keras_nbguard.prepare.deepclean import DeepClean
    from keras_nbguard.records.events import Events


T = TypeVar("T")
_run_ids: tuple[int, str, itertools.count[int]] | None = None


def next_run_id() -> str:
    """Unique across processes: a random token per process (per pid, so forks differ) and a
    counter. uuid4() per run reads the OS's random source, a system call each time."""
    global _run_ids
    if _run_ids is None or _run_ids[0] != os.getpid():
        _run_ids = (os.getpid(), uuid.uuid4().hex[:16], itertools.count(1))
    return f"{_run_ids[1]}-{next(_run_ids[2])}"


@dataclass(frozen=True)
class RunServices:
    """What a run needs of the kernel, and nothing more (a Session makes one per run)."""

    tf_gpu: Callable[[], TfGpu | None]
    nvml: NvmlReader
    sample_interval: float  # seconds between RSS samples
    deep_clean: DeepClean
    events: Events  # "sample" and "epoch" go out as they come
    warn: Callable[[str], object]  # once per message
    models_tracked: Callable[[], bool]  # whether any run's models were ever noted
    release_earlier: Callable[[str], Any]  # autorelease.settle for a label: what it released
    models_going: Callable[[], frozenset[int]]  # ids of models the collection is to free
    released_by_collection: Callable[[], HeldModels | None]  # after it: the cut models it freed
    # the label's last run failed and its traceback is still the last one: forget it (True)
    forget_failed_traceback: Callable[[str], bool] = lambda label: False


class Run:
    """A run in progress. After it ends, ``record`` holds the RunRecord and attribute access
    falls through to it, so ``with track("x") as run: ...`` then ``run.fit_seconds`` works."""

    def __init__(
        self,
        services: RunServices,
        label: str,
        run_number: int,
        options: RunOptions,
        key: RunKey | None = None,
        previous: RunRecord | None = None,
    ) -> None:
        self.id = next_run_id()
        self.previous_record = previous  # the label's last run as this one began (for deltas)
        self.key = key
        self.services = services
        self.label = label
        self.run_number = run_number
        self.options = options
        self.record: RunRecord | None = None
        self.warnings: list[str] = []
        self.finalizer_stops = StopsInFinalizers()  # a stop Python would drop: kept
        self.fit_timer = FitTimer(stops=self.finalizer_stops)
        self.fit_timer.epoch_listeners.append(
            lambda epoch, seconds: services.events.emit("epoch", epoch, seconds)
        )
        self.sampler = RssSampler(interval=services.sample_interval)
        self.sampler.listeners.append(lambda t, rss: services.events.emit("sample", t, rss))
        self.sampler.visit_listeners.append(lambda: services.events.emit("sampled"))
        self.traces = trace_counter_for(backends.current_backend())
        from keras_nbguard.models import (
            CreationWatch,  # the first run, not %load_ext, loads the leak finder
        )

        self.creations = CreationWatch()  # models built in the run, for the leak finder
        self.iterators = IteratorsClosedElsewhere()  # tf.data's, deleted off the cell's way
        self.host_limit = HostLimit(options.host_limit_mb) if options.host_limit_mb else None
        if self.host_limit is not None:
            self.sampler.listeners.append(self.host_limit.check)
        self._peak = PeakRss()
        self._peak_reset = False
        self._gpu = GpuCollector(services.tf_gpu, services.nvml)
        self._cleared = False
        self._clean: CleanReport | None = None
        self._deep_mark: Any = None
        self._deep_started = False
        self.released: HeldModels | None = None  # earlier models released before the run
        self._rss_before_release: int | None = None
        self._prepare_seconds: float | None = None
        self.own_time: list[tuple[str, float]] = []  # (part, seconds) of ours, before and after
        self._last_lap = 0.0
        self._rss_before: int | None = None
        self._pool_before: tuple[int, int] | None = None  # TF's CPU pool after our collection
        self._heap_before: int | None = None  # the C heap in use, then
        self._blocks_before: int | None = None  # Python's blocks in use, then
        self._malloc: str | None = None  # whose heap that is
        self.started_at = time.time()
        self._t0 = time.perf_counter()

    @property
    def rss_at_start(self) -> int | None:
        """RSS read as the run started (None until then, or when it could not be read)."""
        return self._rss_before

    @property
    def models(self) -> list[Any]:
        """Weak references to the models the run fit or built."""
        return [*self.fit_timer.models, *self.creations.models]

    @property
    def fits(self) -> list[Any]:
        return list(self.fit_timer.fits)

    def __getattr__(self, name: str) -> Any:
        record = self.__dict__.get("record")
        if record is not None and not name.startswith("_"):
            return getattr(record, name)
        raise AttributeError(
            f"{type(self).__name__} has no attribute {name!r}"
            + ("" if record else " (the run is still going)")
        )

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        t0 = self._last_lap = time.perf_counter()
        if not self.options.keep_stale and self.services.models_tracked():  # for the released line
            self._rss_before_release = self._attempt("reading RSS", self.sampler.read_now)
        self._attempt("preparing the run", self._prepare)
        self._lap("clear")
        # One collection a run, after everything that lets go: the release (a model held only
        # by Keras' callbacks has their links cut; the collection tells whether it went) and the
        # deep clean's purge, which takes the runs of the cut models along. The frameworks'
        # objects are frozen out of gc's scans (gcfreeze.py): it costs what the user's objects
        # cost, not the whole heap's 160 ms.
        settled = self._attempt("releasing earlier runs' models", self._release_earlier)
        # the frames of this cell's last failure hold what it made: a tf.data iterator caching
        # to a file keeps its lock there, and bare every re-run then fails (AlreadyExistsError)
        forgot = self._attempt(
            "forgetting the failed run's traceback",
            lambda: self.services.forget_failed_traceback(self.label),
        )
        self._lap("release")
        going = self._attempt("releasing earlier runs' models", self.services.models_going)
        going = going or frozenset()
        purge = None
        if self.options.deep_clean and self._cleared:
            purge = self._attempt("deep clean", lambda: self.services.deep_clean.purge(going))
        self._lap("deep clean")
        let_go = going or forgot or (settled is not None and settled.released)
        if self.options.clear or let_go or (purge is not None and purge.entries):
            self._attempt("collecting garbage", gc.collect)
            self._lap("gc")
        self._attempt("releasing earlier runs' models", lambda: self._released(settled))
        self._lap("release")
        if self.options.clear:
            # What the last cell freed (a rebound model) is free heap that RSS still counts:
            # given back, the run's RSS figures are what is in use (~2-10 ms on 1 GiB).
            self._attempt("trimming the heap", self.services.deep_clean.trim_heap)
            self._lap("trim")
        if purge is not None:
            done = purge
            self._clean = self._attempt("deep clean", lambda: self.services.deep_clean.report(done))
        if self.options.deep_clean:
            self._attempt("deep clean", self._mark)
        self._lap("deep clean")
        if self.options.clear:  # the runs that judge what runs leave; --no-clear pays nothing
            # (ctypes, the first time: not at %load_ext)
            from keras_nbguard.collectors.allocated import heap_in_use, malloc_name, python_blocks

            self._pool_before = self._attempt("reading TF's CPU pool", self._host_pool)
            self._heap_before = self._attempt("reading the heap in use", heap_in_use)
            self._blocks_before = python_blocks()
            self._malloc = malloc_name()
        self._prepare_seconds = time.perf_counter() - t0
        # The /proc reads and writes come before anything that wakes one of our threads: a
        # system call releases the interpreter lock, and a woken thread would take it meanwhile.
        self._rss_before = self._attempt("reading RSS", self.sampler.read_now)
        before_release, after = self._rss_before_release, self._rss_before
        if self.released is not None and before_release is not None and after is not None:
            # what releasing them, then clear and deep clean, gave back
            self.released = dataclasses.replace(self.released, rss_freed=before_release - after)
        self._peak_reset = bool(self._attempt("resetting the peak RSS", self._peak.reset))
        self.fit_timer.peaks = CallPeaks(self._peak if self._peak_reset else None, self._gpu)
        for step, action in (
            ("keeping a stop pressed in a finalizer", self.finalizer_stops.install),
            ("starting the RSS sampler", self._start_sampler),
            ("patching fit, evaluate and predict", self.fit_timer.install),
            ("deleting tf.data iterators on a thread", self.iterators.install),
            ("watching model construction", self.creations.install),
            ("counting tf.function traces", self.traces.install),
            ("resetting GPU memory stats", self._gpu.begin),
        ):
            self._attempt(step, action)
        self._t0 = time.perf_counter()

    def _lap(self, part: str) -> None:
        """Our own time, part by part (the summary's ``ours``); parts under 0.5 ms are left out."""
        now = time.perf_counter()
        if now - self._last_lap >= 0.0005:
            seconds = now - self._last_lap + dict(self.own_time).get(part, 0.0)  # once per part
            self.own_time = [(p, s) for p, s in self.own_time if p != part] + [(part, seconds)]
        self._last_lap = now

    def _release_earlier(self) -> Any:
        """Before the run's collection: what is released here sits in cycles, freed by it."""
        if self.options.keep_stale or not self.services.models_tracked():
            return None  # nothing to release, or no model was ever tracked (no leak finder)
        return self.services.release_earlier(self.label)

    def _released(self, settled: Any) -> None:
        """After the collection: the models it freed, released here or cut after the last run
        or here (their weights are counted once freed)."""
        if not self.services.models_tracked():
            return
        from keras_nbguard.models.autorelease import merged

        walked = settled.released_note() if settled is not None else None
        self.released = merged(walked, self.services.released_by_collection())

    def _prepare(self) -> None:
        prepared = prepare(self.options, self.services.tf_gpu(), self.services.nvml, self.label)
        self._cleared = prepared.cleared
        for problem in prepared.warnings:
            self._warn(problem)

    def _mark(self) -> None:
        self._deep_mark = self.services.deep_clean.run_started()
        self._deep_started = True

    def _start_sampler(self) -> None:
        self.sampler.start(self._rss_before)
        if self.host_limit is not None:
            problem = self.host_limit.arm(self._rss_before)
            if problem:
                self._warn(problem)

    def stop(self, exc: BaseException | None) -> RunRecord:
        wall = time.perf_counter() - self._t0
        # (each step under _attempt: one failing must not leave the run's patches installed)
        if self.options.clear:  # Keras imported in the run: its names are the run's
            self._attempt("adopting Keras' names", lambda: kept_state.adopt_names(self.label))
        # the layers made from now on are the notebook's own
        self._attempt("ending the run's layer names", layer_names.run_ended)
        if self.host_limit is not None:  # first: nothing of ours may be stopped by it
            passed = self._attempt("lifting --host-limit", self.host_limit.disarm)
            if passed:
                self._warn(passed)
        # the kernel's peak first, while our threads still sleep (see start); the RSS now comes
        # with it, for the sampler's last sample
        hwm, rss_now = (
            self._attempt("reading the peak RSS", self._peak.read_with_rss) or (None, None)
            if self._peak_reset
            else (None, None)
        )
        for step, action in (
            ("stopping the RSS sampler", lambda: self.sampler.stop(rss_now)),
            ("restoring fit, evaluate and predict", self.fit_timer.uninstall),
            ("restoring tf.data's iterator", self.iterators.uninstall),
            ("restoring the trace hook", self.traces.uninstall),
            ("restoring Model.__new__", self.creations.uninstall),
            ("restoring sys.unraisablehook", self.finalizer_stops.uninstall),
        ):
            self._attempt(step, action)
        if self._deep_started:
            self._attempt(
                "remembering the run's gradient entries",
                lambda: self.services.deep_clean.run_ended(self._deep_mark, self.models),
            )
        gpu = self._attempt("reading GPU memory", self._gpu.end) or GpuReading(
            reason="GPU reading failed"
        )
        fits = list(self.fit_timer.fits)
        trained = [f for f in fits if f.reached_training]  # a fit that failed at once: no time
        status = outcome.status_of(exc)
        rss_peak = max(
            (p for p in (self.sampler.peak, hwm, self.fit_timer.peaks.run_rss) if p), default=None
        )
        advice: list[str] = []
        if status == "oom":
            advice = outcome.oom_advice(
                fits,
                self.options.mixed_precision,
                self.options.gpu_limit_mb,
                rss_peak,
                gpu.known or outcome.names_a_gpu(exc),
            )
        if self.sampler.error:
            self._warn(self.sampler.error)
        if self.traces.reason and self.traces.warn:
            self._warn(f"trace count unavailable: {self.traces.reason}")
        keras = ", ".join(k.name for k in backends.loaded()) or None
        pool = (
            self._attempt("reading TF's CPU pool", self._host_pool) if self.options.clear else None
        )
        self.record = RunRecord(
            label=self.label,
            status=status,
            started_at=self.started_at,
            wall_seconds=wall,
            fit_seconds=sum(f.seconds for f in trained) if trained else None,
            fits=tuple(fits),
            inference=tuple(self.fit_timer.inference),
            keras=keras,
            fit_reason="; ".join(self.fit_timer.reasons) or None,
            rss_before=self._rss_before,
            rss_after=self.sampler.samples[-1][1] if self.sampler.samples else None,
            rss_peak=rss_peak,
            gpu=gpu,
            cleared=self._cleared,
            traces=self.traces.count,
            trace_kind=self.traces.kind,
            trace_reason=self.traces.reason,
            traced=tuple(self.traces.names.most_common(3)),
            signatures=getattr(self.traces, "signatures", ()),  # tf.function only
            traced_twice=tuple(getattr(self.traces, "traced_twice", {}).items()),
            dataset_traces=self.traces.dataset_count,
            dataset_trace_seconds=getattr(self.traces, "dataset_seconds", None),
            framework_traces=getattr(self.traces, "framework_count", None),  # tf.function only
            warnings=tuple(self.warnings),
            run_number=self.run_number,
            prepare_seconds=self._prepare_seconds,
            own_time=tuple(self.own_time),
            error=None if exc is None else outcome.describe(exc),
            advice=tuple(advice),
            rss_samples=RssSamples(self.sampler.samples),
            notebook=self.key.notebook if self.key else None,
            cell_id=self.key.cell_id if self.key else None,
            kernel_id=self.key.kernel_id if self.key else None,
            pid=self.key.pid if self.key else None,
            deep_clean=self._clean,
            host_pool_in_use=self._pool_before[0] if self._pool_before else None,
            host_pool_peak=pool[1] if pool else None,
            heap_in_use=self._heap_before,
            python_blocks=self._blocks_before,
            malloc=self._malloc,
        )
        return self.record

    def _host_pool(self) -> tuple[int, int] | None:
        """For the trend of what runs leave (``findings.pool_high_water``): its use as the run
        starts, after our collection (what the runs before left: at the run's end it still
        counts what the next collection frees), and its peak at the end."""
        tf = self.services.tf_gpu()
        return None if tf is None else tf.host_pool()

    # -- our own failures ------------------------------------------------------------------------
    def _attempt(self, step: str, action: Callable[[], T]) -> T | None:
        """``action()``, or None and one warning if it fails (a plain call: this runs a dozen
        times per run, where a context manager's cost showed)."""
        try:
            return action()
        except Exception as exc:
            self._warn(f"{step} failed ({type(exc).__name__}: {exc}); the figure is missing")
            return None

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.services.warn(message)
