"""The Session: the one stateful object of a kernel (options, history, the run in progress)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from keras_nbguard.collectors.gpu import NvmlReader, TfGpu
from keras_nbguard.diagnosis.census import NamespaceCensus
from keras_nbguard.models.caches import clear_tracebacks
from keras_nbguard.prepare import actions
from keras_nbguard.prepare.actions import ActionReport
from keras_nbguard.prepare.deepclean import DeepClean
from keras_nbguard.prepare.gcfreeze import FrameworkFreeze
from keras_nbguard.records.events import Events
from keras_nbguard.records.notices import WarnOnce
from keras_nbguard.records.options import RunOptions, checked_options
from keras_nbguard.records.run import RunKey, RunRecord
from keras_nbguard.run.tracking import Run, RunServices
from keras_nbguard.session.held_interrupt import HeldInterrupt
from keras_nbguard.session.history import RunHistory
from keras_nbguard.session.later import Later
from keras_nbguard.session.live_models import LiveModels
from keras_nbguard.store import feed
from keras_nbguard.store.died import DiedRun, process_alive
from keras_nbguard.store.feed import RunFeed
from keras_nbguard.store.history_db import MEMORY, Store
from keras_nbguard.store.identity import kernel_id, notebook_key, process_started

if TYPE_CHECKING:
    from keras_nbguard.collectors.fit import LastFit
    from keras_nbguard.diagnosis.diagnose import Findings
    from keras_nbguard.models import LeakReport
    from keras_nbguard.models.freeing import FreeReport

DEFAULT_STORE = "default"


class Session:
    def __init__(
        self,
        options: RunOptions | None = None,
        *,
        tf_gpu: Callable[[], TfGpu | None] = TfGpu.if_imported,
        nvml: NvmlReader | None = None,
        sample_hz: float = 50.0,
        store: Store | str | None = DEFAULT_STORE,
        shell: Any = None,
    ) -> None:
        """``store``: a Store, a database path (":memory:": nowhere on disk), None for no
        history, or the default path (``KERAS_NBGUARD_DB`` or Jupyter's data folder)."""
        self.options = options or RunOptions()
        self.tf_gpu = tf_gpu
        self.nvml = nvml or NvmlReader()
        self.sample_hz = sample_hz
        self.warn_once = WarnOnce()
        self.events = Events(self.warn_once)
        # a run's row in the history, written after the cell's reply in a kernel (later.py)
        self.later = Later(self.warn_once, at_exit=self._flush_store)
        self.current: Run | None = None
        self.shell = shell  # the IPython shell when loaded as an extension
        self.notebook = notebook_key(shell)
        self.past = RunHistory(self.notebook, self.warn_once)
        self.kernel_id = kernel_id()
        self.store: Store | None = (
            Store(None if store == DEFAULT_STORE else _path(store), warn=self.warn_once)
            if isinstance(store, str)
            else store
        )
        self._run_feeds: dict[str, RunFeed] = {}  # the store's feed of each run going
        self._batch_advice: dict[int, Any] = {}  # batch_advice() by the model's weight count
        self._last_fits: dict[str, LastFit] = {}  # each label's latest fit, weakly
        self._raised: dict[str, tuple[int, type] | None] = {}  # what ended a label's last run
        self.last_run_batch_advice: Any = None  # batch_advice() of the last run's model
        self.died: list[DiedRun] = []
        # Created at load, so gradient entries from before the extension are never touched.
        self.deep_clean = DeepClean(warn=self.warn_once)
        # The frameworks' objects out of gc's scans: a run's one collection stays cheap.
        self.frozen = FrameworkFreeze(warn=self.warn_once)
        self.frozen.install()
        if isinstance(self.store, Store):
            self._load_earlier_runs(self.store)
        self.actions: dict[str, Callable[[], str]] = {
            "clear_session": actions.clear_keras_session,
            "clear_output_cache": lambda: actions.clear_output_cache(self.shell),
            "reset_history": self.past.reset,
            "undo_reset": self.past.undo_reset,
            # the dashboard's "Free flagged models": exactly the stale ones its list flags,
            # those in your containers too (their slots become None)
            "free": lambda: self.free(containers=True).briefly(),
        }
        self.live = LiveModels(shell, self.warn_once)
        self.census = NamespaceCensus(self.warn_once)
        self.dashboard: Any = None  # the kernel's Dashboard once shown
        self._queued: list[tuple[str, dict[str, Any]]] = []
        # Held while a run starts and while a reset runs: a reset clicked from another thread
        # (widget messages on a subshell) never clears Keras in the middle of a fit.
        self._lock = threading.RLock()

    def _load_earlier_runs(self, store: Store) -> None:
        try:
            self.died = store.mark_dead_runs(process_alive, self.notebook)
        except Exception as exc:  # a broken store never stops a kernel
            self.warn_once(f"run history could not be read: {type(exc).__name__}: {exc}")
        # Earlier runs are read when first asked for: loading must stay cheap (1000s of runs).
        self.past.attach(store)

    @property
    def history(self) -> list[RunRecord]:
        """This kernel's runs since the last reset."""
        return self.past.runs(this_kernel=True)

    @property
    def earlier(self) -> list[RunRecord]:
        """This notebook's runs before this session, hidden ones too."""
        return self.past.earlier

    # -- configuration ---------------------------------------------------------------------------
    def configure(self, **changes: Any) -> RunOptions:
        """Change the defaults every later run starts from (same names as ``RunOptions``),
        checked as the magics check them (options.py): ``ValueError`` for a wrong value,
        ``TypeError`` for a name that is no option."""
        self.options = checked_options(self.options, **changes)
        return self.options

    def use_store(self, path: str) -> Store:
        """Keep the run history in the SQLite file at ``path`` from now on (":memory:": nowhere
        on disk). Runs of earlier kernels are then read from that file."""
        path = _path(path)
        with self._lock:
            if self.current is not None:
                raise RuntimeError(
                    f"keras_nbguard: run {self.current.label!r} is going; change "
                    f"the history database once it ends"
                )
            self.later.run()  # the old store's rows still to write
            old, self.store = self.store, Store(path, warn=self.warn_once)
        if old is not None:
            old.close()
        self._load_earlier_runs(self.store)
        return self.store

    # -- runs ------------------------------------------------------------------------------------
    def runs(self, label: str | None = None, this_kernel: bool = False) -> list[RunRecord]:
        """Oldest first, since the last reset; across kernel restarts of this notebook unless
        ``this_kernel``."""
        return self.past.runs(label, this_kernel)

    def diagnose(self, label: str | None = None) -> Findings:
        """Causes of slower or fatter runs, in words (``diagnosis.py``): this kernel's runs
        since the last reset (``label``'s only when given)."""
        from keras_nbguard.diagnosis.diagnose import (
            present,  # the models still alive now, not as they were
        )

        return present(self, label)

    def last_run(self, label: str) -> RunRecord | None:
        return self.past.last_run(label)

    @contextmanager
    def track(
        self,
        label: str,
        *,
        cell_id: str | None = None,
        run_options: RunOptions | None = None,
        **options: Any,
    ) -> Iterator[Run]:
        """Prepare and measure a block like ``%%kerasrun`` does a cell (``options``: the
        ``RunOptions`` fields that differ from the session's, checked; ``run_options``: all of
        them, checked already, as the magic has them); the record is kept however the block
        ends."""
        __tracebackhide__ = True
        if run_options is None:
            run_options = checked_options(self.options, **options)
        run = self.begin(label, run_options, cell_id)
        error: BaseException | None = None
        try:
            yield run
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.finish(run, error)

    def services(self) -> RunServices:
        """What a run needs of the kernel, and nothing more."""
        return RunServices(
            tf_gpu=self.tf_gpu,
            nvml=self.nvml,
            sample_interval=1 / self.sample_hz,
            deep_clean=self.deep_clean,
            events=self.events,
            warn=self.warn_once,
            models_tracked=lambda: self.live.tracked,
            release_earlier=lambda label: self.live.settle(label, release=True, report=False),
            models_going=self.live.models_going,
            released_by_collection=self.live.collected,
            forget_failed_traceback=self._forget_failed_traceback,
        )

    def _forget_failed_traceback(self, label: str) -> bool:
        """Before a run of ``label``: where its last run ended in an exception that is still
        the last one shown (``sys.last_value``), forget that traceback, as the next error would.
        Its frames hold what the failed run made, in the way of the cell run again."""
        raised, shown = self._raised.pop(label, None), getattr(sys, "last_value", None)
        if raised is None or raised != (id(shown), type(shown)):
            return False
        return bool(clear_tracebacks(self.shell))

    def begin(
        self,
        label: str,
        options: RunOptions,
        cell_id: str | None = None,
        run_class: type[Run] = Run,
    ) -> Run:
        with HeldInterrupt() as stop:  # a stop pressed now must not leave the run claimed
            self.settle_later()  # the last run's row first: rows land in the order runs end
            with self._lock:  # check and claim at once: two threads must not both start a run
                if self.current is not None:
                    raise RuntimeError(
                        f"keras_nbguard: run {self.current.label!r} is still going; "
                        f"tracked runs can't be nested or run from two threads"
                    )
                previous = self.last_run(label)
                key = RunKey(self.notebook, cell_id, self.kernel_id, os.getpid(), process_started())
                run = run_class(
                    self.services(), label, self.past.next_number(label), options, key, previous
                )  # an IsolatedRun (isolation/) measures no kernel
                self.current = run
            try:
                if isinstance(self.store, Store):
                    self.store.try_disk(then=self.past.reread)  # after a fallback to memory
                self._feed(run)
                self.events.emit("start", run)
                run.start()
            except BaseException:
                self.current = None
                run.stop(None)
                raise
            # held by the run's feed: written with its first samples or its end (store/feed.py)
            self._record_start(run)
        if stop.pressed:  # the cell does not run; the run is kept, interrupted
            interrupted = KeyboardInterrupt(
                "stopped while keras_nbguard prepared the run: the cell did not run"
            )
            self.finish(run, interrupted)
            raise interrupted
        return run

    def finish(self, run: Run, error: BaseException | None) -> RunRecord | None:
        """Stop the run's collectors and keep its record (it runs in a finally). It raises only
        KeyboardInterrupt, once the record is kept: for a stop pressed meanwhile on a cell that
        had ended well (held_interrupt.py), or one a finalizer dropped (finalizer_stops.py)."""
        with HeldInterrupt() as stop:
            # a stop Python dropped in a finalizer stops the cell that ran on: kept as stopped
            # (the hook goes first: whatever happens after, Python's own hook says it)
            run.finalizer_stops.uninstall()
            lost = run.finalizer_stops.take("as it ended")
            if error is None:
                error = lost
            else:
                lost = None  # the cell ended in an exception already
            try:
                # which exception ended the run (not the object: it would keep its frames)
                self._raised[run.label] = (id(error), type(error)) if error is not None else None
                record = self._finish(run, error)
            finally:
                with self._lock:
                    if self.current is run:  # never left claimed, whatever went wrong
                        self.current = None
        if lost is not None:
            raise lost
        if stop.pressed and error is None:
            raise KeyboardInterrupt("stopped as keras_nbguard kept the run: the cell had ended")
        return record

    def _finish(self, run: Run, error: BaseException | None) -> RunRecord | None:
        try:
            # the previous run as found at begin(): runs don't nest, so it is still the last one
            record = run.stop(error).compared_to(run.previous_record)
        except Exception as exc:  # a bug of ours must not hide the user's own exception
            self.warn_once(f"the run could not be recorded: {type(exc).__name__}: {exc}")
            record = None
        with self._lock:
            self.current = None
            queued, self._queued = self._queued, []
        if record is not None:
            laps = Laps()
            if run.fit_timer.last_fit is not None:
                self._last_fits[run.label] = run.fit_timer.last_fit.named_in(self.live.namespace())
            record = self._with_batch_advice(run, record)
            record = self.live.run_ended(run, record)
            laps.lap("leak check")
            record = self.census.after_run(record, run.previous_record, self.live.namespace())
            laps.lap("names")
            from keras_nbguard.diagnosis.diagnose import WINDOW, with_findings  # not at load

            record = with_findings(record, self.past.latest(run.label, WINDOW - 1), self.warn_once)
            laps.lap("diagnosis")
            if laps.parts():
                record = record.replaced(own_time=laps.added_to(record.own_time))
            run.record = record
            self.past.add(record)
            self._record_end(run, record)
            self.events.emit("record", record)
        else:
            self._record_end(run, None)
        for name, arguments in queued:
            self.perform(name, **arguments)
        return record

    # -- live models (live_models.py) ----------------------------------------------------------
    def leaks(self, *, collect: bool = False) -> LeakReport:
        """Every live Keras model, with the paths that hold it; stale ones flagged. ``collect``:
        garbage collected first (what you ask for; the dashboard's list after each cell does
        not, and says what awaits a collection)."""
        return self.live.leaks(collect=collect)

    def free(self, *, include_current: bool = False, containers: bool = False) -> FreeReport:
        """Drop the references to stale models (current ones too with ``include_current``)."""
        with self._lock:
            if self.current is not None:
                raise RuntimeError(
                    f"keras_nbguard: run {self.current.label!r} is going; free once it ends"
                )
            deep_clean = self.deep_clean.clean if self.options.deep_clean else None
            return self.live.free(
                include_current=include_current, containers=containers, deep_clean=deep_clean
            )

    # -- batch advice ----------------------------------------------------------------------------
    def remember_batch_advice(self, advice: Any) -> None:
        """What ``batch_advice()`` found for a model, quoted by its runs that run out of memory
        (the model's weight count tells it, the name changes with every new instance)."""
        if advice.model_params is not None and advice.batch_size is not None:
            self._batch_advice[advice.model_params] = advice

    def last_fit(self, label: str) -> LastFit | None:
        """The model and data of ``label``'s latest fit in this kernel (weakly held)."""
        return self._last_fits.get(label)

    def _with_batch_advice(self, run: Run, record: RunRecord) -> RunRecord:
        """The advice ``batch_advice()`` gave for the model this run fit last, kept for the
        dashboard; a run that ran out of memory quotes it first in its own advice."""
        self.last_run_batch_advice = advice = self._advice_for(run)
        batch = record.fits[-1].batch_size if record.fits else None
        if record.status != "oom" or advice is None or batch is None:
            return record
        quote = advice.quote(batch)
        return record if quote is None else record.replaced(advice=(quote, *record.advice))

    def _advice_for(self, run: Run) -> Any:
        last = run.fit_timer.last_fit
        model = last.model() if last is not None else None
        if model is None or not self._batch_advice:
            return None
        try:
            return self._batch_advice.get(int(model.count_params()))
        except Exception:  # not built, or not a Keras model after all
            return None

    # -- the store: written as the run goes (feed.py) ------------------------------------------
    def _feed(self, run: Run) -> None:
        if self.store is not None:
            self._run_feeds[run.id] = feed.follow(self.store, self.events, run.id)

    def _record_start(self, run: Run) -> None:
        run_feed = self._run_feeds.get(run.id)
        if self.store is not None and run_feed is not None:
            feed.record_start(self.store, run_feed, run, self.warn_once)

    def _record_end(self, run: Run, record: RunRecord | None) -> None:
        run_feed = self._run_feeds.pop(run.id, None)
        store = self.store
        if store is not None and run_feed is not None:
            # after the reply: a cell shown as ended doesn't wait on the disk (~0.17 ms a run)
            self.later.add(
                lambda: feed.record_end(store, self.events, run_feed, record, self.later.warn)
            )

    # -- resets ----------------------------------------------------------------------------------
    def perform(self, name: str, **arguments: Any) -> ActionReport:
        """Run the reset ``name`` now, or right after the run in progress ends ("queued");
        ``arguments`` go to it (``label=`` for the history resets: that label's runs only)."""
        if name not in self.actions:
            raise ValueError(f"unknown action {name!r}; one of: {', '.join(self.actions)}")
        arguments = {k: v for k, v in arguments.items() if v is not None}
        with self._lock:
            if self.current is not None:
                if (name, arguments) not in self._queued:
                    self._queued.append((name, arguments))
                report = ActionReport(
                    name, "queued", f"queued: runs when {self.current.label!r} ends"
                )
            else:
                report = self._perform_now(name, arguments)
        self.events.emit("action", report)
        return report

    def _perform_now(self, name: str, arguments: dict[str, Any]) -> ActionReport:
        from keras_nbguard.collectors.process import default_rss_reader

        read = default_rss_reader()
        before = read()
        try:
            message = self.actions[name](**arguments)
        except Exception as exc:
            return ActionReport(name, "failed", f"{type(exc).__name__}: {exc}", before, read())
        return ActionReport(name, "done", message, before, read())

    def protected_paths(self) -> list[str]:
        """Files an export must never replace: the history database (and its WAL files)."""
        if self.store is None or self.store.in_memory:
            return []
        return [self.store.path + suffix for suffix in ("", "-wal", "-shm", "-journal")]

    def settle_later(self) -> None:
        """What was left for after the last cell's reply, done now if it is not yet (the next
        cell begins: the magic's pre_run_cell, a run's begin), and what it warned of said."""
        if self.later.pending:
            with HeldInterrupt() as stop:  # a stop pressed mid-write must not drop the row
                self.later.run()
            if stop.pressed:
                raise KeyboardInterrupt("stopped as keras_nbguard wrote the last run's row")
        for message in self.later.unsaid():  # warned after its cell was over
            self.warn_once(message)

    def _flush_store(self) -> None:
        if self.store is not None:
            self.store.flush()

    def close(self) -> None:
        """Unload, reload: everything recorded so far is written, then the store's thread and
        files are closed (a closed session keeps its runs in memory; it writes no more)."""
        self.frozen.uninstall()
        self.later.close()
        if self.store is not None:
            self.store.close()


class Laps:
    """Our own time after a cell, part by part (a run's ``own_time``); parts under 0.5 ms are
    left out."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self._parts: list[tuple[str, float]] = []

    def lap(self, part: str) -> None:
        now = time.perf_counter()
        if now - self._last >= 0.0005:
            self._parts.append((part, now - self._last))
        self._last = now

    def parts(self) -> tuple[tuple[str, float], ...]:
        return tuple(self._parts)

    def added_to(self, parts: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
        """``parts`` and these laps, a part named in both summed: an isolated run's record has
        its child's own leak check, and the kernel adds its own."""
        merged: dict[str, float] = {}
        for part, seconds in (*parts, *self._parts):
            merged[part] = merged.get(part, 0.0) + seconds
        return tuple(merged.items())


def _path(path: str) -> str:
    return path if path == MEMORY else os.path.abspath(os.path.expanduser(path))


_current: Session | None = None


def get_session() -> Session:
    """The kernel's session: the one the extension made, or a new one for plain scripts."""
    global _current
    if _current is None:
        _current = Session()
    return _current


def set_session(session: Session | None) -> None:
    global _current
    _current = session


@contextmanager
def using(session: Session) -> Iterator[Session]:
    """Make ``session`` the current one for a block (tests, and nested tools)."""
    before = _current
    set_session(session)
    try:
        yield session
    finally:
        set_session(before)
