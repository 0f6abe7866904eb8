"""``%%kerasrun --isolate`` and ``--sweep``: each run in a fresh Python process. The names the
cell reads go in (``names``, ``sending``), the names it binds come back (``back``), its prints
and displays stream into the cell, and the child's own measurements become the run's record
(``run.IsolatedRun``), kept by the kernel's history like any other. The kernel imports no
framework for it: what TensorFlow keeps (graphs, its GPU pool) ends with the child.

Where the children run: one at a time, watched live (``_watched``); side by side on this machine
(``--parallel N``, ``pool``) or as Ray tasks (``--cluster ray``), each recorded as it ends
(``_recorded``). The stop button ends a sweep at once: the running children are killed and
recorded as interrupted, the finished ones are kept, the rest never start.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keras_nbguard.isolation import changed_state, names, random_state, registrations, sweep
from keras_nbguard.isolation.back import received
from keras_nbguard.isolation.child import LAST
from keras_nbguard.isolation.parent import Child, ChildResult
from keras_nbguard.isolation.run import IsolatedRun, Transfer
from keras_nbguard.isolation.saved_datasets import SavedDatasets
from keras_nbguard.isolation.spare import Spare
from keras_nbguard.prepare import kept_state
from keras_nbguard.prepare.before_run import RunOptions

if TYPE_CHECKING:
    from keras_nbguard.session.core import Session

__all__ = [
    "IsolatedRun",
    "IsolatedRunFailed",
    "Isolation",
    "Stopped",
    "SweepFailed",
    "close_spares",
    "run_isolated",
]

MAX_UNASKED = 100  # a sweep of more points asks for --yes

# each kernel's next process, pre-started (--prestart); closed at %unload_ext / %reload_ext
_SPARES: weakref.WeakKeyDictionary[Any, Spare] = weakref.WeakKeyDictionary()
_SAVED: weakref.WeakKeyDictionary[Any, SavedDatasets] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Isolation:
    """How ``--isolate`` and ``--sweep`` run a cell, as plain values (the magic's options, or
    a caller's own). ``inputs``/``outputs``: "a,b", or None for the names the cell reads/binds;
    ``sweep``: "units=32,64; lr=1e-3,1e-4"; ``yes``: run a sweep of over 100 points."""

    inputs: str | None = None
    outputs: str | None = None
    sweep: str | None = None
    parallel: int = 1
    yes: bool = False
    prestart: bool = False
    cluster: str | None = None
    gpus: float | None = None

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise ValueError(
                f"--parallel takes a number of processes, 1 or more, not {self.parallel}"
            )
        if self.cluster not in (None, "ray"):
            raise ValueError(f"--cluster: the one cluster known is ray, not {self.cluster!r}")


class IsolatedRunFailed(Exception):
    """The isolated cell raised, or its process died: the cell fails too, so "Run All" stops
    (the child's own traceback has been shown above)."""

    def _render_traceback_(self) -> list[str]:
        # IPython's hook for an exception's own display: one line in the user's terms; our
        # frames would only bury the child's own traceback above
        return [f"{type(self).__name__}: {self}"]


class SweepFailed(IsolatedRunFailed):
    """Points of a ``--sweep`` failed, died or were stopped: raised once every point has run
    (each is recorded, its own traceback shown as it ended), so "Run All" stops. ``results``: the
    points' names as the sweep would have returned them (``sys.last_value.results``)."""

    def __init__(self, message: str, results: dict[Any, Any]) -> None:
        super().__init__(message)
        self.results = results


class Stopped(KeyboardInterrupt):
    """The stop button during an isolated run or a sweep, once its processes are ended and its
    runs recorded: still a KeyboardInterrupt (the cell stops, "Run All" too), shown as one line,
    not the frames the press happened to land in (psutil's, the selector's, ours)."""

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {self}"]


@dataclass
class _Cell:
    """One isolated cell as the kernel runs it: what every point shares."""

    session: Session
    shell: Any
    options: RunOptions
    cell_id: str | None
    sent: Transfer
    notes: tuple[str, ...]


def run_isolated(
    session: Session,
    shell: Any,
    label: str,
    cell: str,
    how: Isolation,
    options: RunOptions,
    cell_id: str | None,
) -> Any:
    """Run ``cell`` isolated (once, or once per ``--sweep`` point). Bad input raises
    ``ValueError`` in the user's terms before any process starts."""
    if how.cluster is not None:
        from keras_nbguard.isolation import ray_cluster

        ray_cluster.check()
    plan = sweep.Sweep.parse(how.sweep) if how.sweep else None
    if plan is not None and len(plan) > MAX_UNASKED and not how.yes:
        raise ValueError(
            f"--sweep: {plan.describe()} is {len(plan):,} runs, over {MAX_UNASKED}: add --yes "
            f"to run them all"
        )
    found = names.cell_names(cell)
    shared: list[Any] = []  # what the inputs took (shared memory, files): unlinked at the end
    try:
        sent = names.pack_inputs(
            names.chosen(how.inputs, found.reads),
            shell.user_ns,
            explicit=how.inputs is not None,
            shared=shared if how.cluster is None else None,
            in_place=found.in_place,
            current=cell,
            saved=_saved_of(session),
            hidden=shell.user_ns_hidden,
        )
        from keras_nbguard.isolation.shm import size_of

        job = {
            "source": cell,
            "label": label,
            "options": child_options(options),
            "inputs": sent.inputs,
            "outputs": names.chosen(how.outputs, found.binds),
            "trained_back": how.outputs is None,  # a model sent in that the cell trained
            # what the notebook's functions bind with `global`, or change in place (plain data),
            # comes back when a call of the cell's did
            "bound_by_code": sent.code.binds if how.outputs is None else [],
            "read_by_code": sent.code.reads if how.outputs is None else [],
            "params": {},
            "keras": kept_state.carried(),  # to name on as this kernel would
            "random": random_state.carried(),  # to draw on as this kernel would
            # the metrics' counts, which Keras 3's pickling leaves out
            "keras_state": changed_state.sent_state(shell.user_ns, sent.inputs),
            "registered": registrations.carried(),  # the notebook's register_keras_serializable
        }
        transfer = Transfer(
            names=len(sent.inputs), nbytes=sum(size_of(p) for p in sent.inputs.values())
        )
        notes = tuple(n for n in (getattr(s, "note", None) for s in (sent, *shared)) if n)
        run = _Cell(session, shell, options, cell_id, transfer, notes)
        if plan is None:
            return _one(run, job, how, found.deleted)
        return _sweep(run, job, how, plan)
    finally:
        for segment in shared:
            segment.close()
            segment.unlink()


def _one(cell: _Cell, job: dict[str, Any], how: Isolation, deleted: Sequence[str]) -> Any:
    spare = _spare_of(cell.session)
    try:
        run, bound = _watched(cell, job, spare, into_namespace=True, deleted=deleted)
    except KeyboardInterrupt:
        raise Stopped(
            f"the isolated run {job['label']!r} was stopped: its process is ended, the run "
            f"recorded as interrupted"
        ) from None
    if how.prestart:
        spare.make(names.imports_of(job["source"]))  # the next run's, while the user reads
    _raise_if_failed(run)
    return bound.get(LAST)


def _sweep(cell: _Cell, job: dict[str, Any], how: Isolation, plan: sweep.Sweep) -> Any:
    """Each point's bound names, by point: in the namespace the points would overwrite each
    other. Points are made as they are run (``plan`` is lazy). A point that failed does not stop
    the others; once all have run, ``SweepFailed`` names the ones that did."""
    from keras_nbguard.records.formatting import fmt_params

    results: dict[Any, Any] = {}
    statuses: list[str] = []  # how each point recorded ended, in order
    failed: list[str] = []  # "d=0 error (ZeroDivisionError: division by zero)", in order
    points = ({**job, "params": params} for params in plan)
    table = _sweep_table(cell, job["label"], plan)
    if table is not None:  # one table, not a 10-line summary per point
        cell = dataclasses.replace(cell, options=dataclasses.replace(cell.options, quiet=True))

    def keep(point: dict[str, Any], run: IsolatedRun, bound: dict[str, Any]) -> None:
        bound.pop(LAST, None)
        results[sweep.key(point["params"])] = bound
        record = run.record
        if record is not None:
            statuses.append(record.status)
        if record is not None and record.status != "ok":
            error = (record.error or "").strip().splitlines()
            said = f" ({error[0][:120]})" if error else ""
            failed.append(f"{fmt_params(point['params'])} {record.status}{said}")
        if table is not None:
            table.finished(point["params"], record)

    def done(point: dict[str, Any], child: ChildResult, stop: BaseException | None) -> None:
        keep(point, *_recorded(cell, point, child, stop))

    try:
        if how.cluster is not None:
            from keras_nbguard.isolation import ray_cluster

            ray_cluster.run_all(points, how.gpus, lambda m: _show(cell.session, m), done)
        elif how.parallel > 1:
            from keras_nbguard.isolation.pool import run_side_by_side

            run_side_by_side(
                points,
                how.parallel,
                lambda m: _quiet_epochs(cell.session, m),
                done,
                on_start=None if table is None else lambda point: table.started(point["params"]),
                on_tick=None if table is None else table.tick,
            )
        else:
            spare = _spare_of(cell.session)
            for point in points:
                if table is not None:
                    table.started(point["params"])
                tick = None if table is None else table.tick
                keep(point, *_watched(cell, point, spare, on_tick=tick))
                if how.prestart:
                    spare.make(names.imports_of(job["source"]))
    except KeyboardInterrupt:
        if table is not None:
            table.close(stopped=True)
        ended = len([s for s in statuses if s != "interrupted"])
        raise Stopped(
            f"the sweep {job['label']!r} was stopped after {ended} of {len(plan)} points: "
            f"the running ones recorded as interrupted, the rest not run"
        ) from None
    if table is not None:
        table.close()
    if failed:
        shown = "; ".join(failed[:3])
        more = f"; {len(failed) - 3} more: %nbguard runs {job['label']}" if len(failed) > 3 else ""
        raise SweepFailed(
            f"{len(failed)} of {len(plan)} points of the sweep {job['label']!r} failed: "
            f"{shown}{more}",
            results,
        )
    return results


TABLE_POINTS = 10_000  # a table lists every point up front; a larger sweep gets no table


def _sweep_table(cell: _Cell, label: str, plan: sweep.Sweep) -> Any:
    """The sweep's one table (sweep_table.py), shown now; None for ``--quiet`` and for sweeps too
    large to list."""
    if cell.options.quiet or len(plan) > TABLE_POINTS:
        return None
    from keras_nbguard.board.sweep_table import SweepTable

    table = SweepTable(label, list(plan))
    table.show()
    return table


def _watched(
    cell: _Cell,
    job: dict[str, Any],
    spare: Spare,
    into_namespace: bool = False,
    deleted: Sequence[str] = (),
    on_tick: Callable[[], Any] | None = None,
) -> tuple[IsolatedRun, dict[str, Any]]:
    """One child, watched live: its prints and displays into the cell, its epochs and RSS to the
    dashboard and the store; recorded however it ends (its names loaded first: the run's wall
    includes them, and its models are the run's). ``on_tick``: at each sample (a sweep table's
    running time)."""
    session = cell.session

    def on_sample(t: float, rss: int) -> None:
        session.events.emit("sample", t, rss)
        if on_tick is not None:
            on_tick()

    run = _begin(cell, job)
    error: BaseException | None = None
    child = None
    bound: dict[str, Any] = {}
    try:
        child = spare.take()
        if spare.why_not:
            run.notes += (f"the pre-started process was not used: {spare.why_not}",)
        child = child or Child()
        child.start(job)
        run.child = child.done
        child.wait(lambda message: _show(session, message), on_sample)
        run.not_sent = (child.done.result or {}).get("not_sent") or None
        released_before_load: list[bool] = []

        def release() -> None:
            _release_earlier(session, run.label)
            released_before_load.append(True)

        bound = received(child.done, run, cell.shell.user_ns if into_namespace else None, release)
        if released_before_load:  # the load's collection freed them: this run says so, not the
            from keras_nbguard.models.autorelease import merged  # next (a run late)

            run.released = merged(run.released, session.live.collected())
        if into_namespace:
            ok = (child.done.result or {}).get("success", False)
            names.settle(cell.shell.user_ns, _names_only(bound), deleted, ok=ok)
        return run, bound
    except BaseException as exc:
        error = exc
        if child is not None and not child.finished:  # stopped while it started, or after
            child.interrupted()
        raise
    finally:
        _finish(session, run, error, cell.options)
        if child is not None:
            child.close()


def _recorded(
    cell: _Cell, job: dict[str, Any], done: ChildResult, stop: BaseException | None
) -> tuple[IsolatedRun, dict[str, Any]]:
    """A child that ran beside others, recorded as it ends (the kernel tracks one run at a
    time), without live samples."""
    run = _begin(cell, job)
    run.child, run.elapsed = done, done.wall
    run.not_sent = (done.result or {}).get("not_sent") or None
    bound: dict[str, Any] = {}
    try:
        bound = received(done, run) if done.result is not None else {}
        if run.back is not None and run.back.seconds is not None:
            run.elapsed = done.wall + run.back.seconds
    finally:
        _finish(cell.session, run, stop, cell.options)
    return run, bound


def _begin(cell: _Cell, job: dict[str, Any]) -> IsolatedRun:
    run = cell.session.begin(job["label"], cell.options, cell.cell_id, run_class=IsolatedRun)
    assert isinstance(run, IsolatedRun)
    run.params = job["params"] or None
    run.sent, run.notes = cell.sent, cell.notes
    return run


def _release_earlier(session: Session, label: str) -> None:
    """Before a run's models load: the label's earlier models that only caches keep now (their
    names let go) are released, as a run's end releases them (which comes after the load)."""
    if not session.live.tracked:
        return
    try:
        session.live.settle(label, release=True, report=False)
    except Exception as exc:  # a bug of ours: the load goes on with them still alive
        session.warn_once(f"earlier runs' models were not released before the load: {exc!r}")


def _names_only(bound: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in bound.items() if k != LAST}


def _spare_of(session: Session) -> Spare:
    spare = _SPARES.get(session)
    if spare is None:
        spare = _SPARES[session] = Spare()
    return spare


def _saved_of(session: Session) -> SavedDatasets:
    saved = _SAVED.get(session)
    if saved is None:
        saved = _SAVED[session] = SavedDatasets()
    return saved


def close_spares() -> None:
    """``%unload_ext`` / ``%reload_ext``: no pre-started process outlives the extension, nor
    one still exiting after its run (with what its cell started), nor a saved pipeline."""
    for spare in list(_SPARES.values()):
        spare.close()
    _SPARES.clear()
    for saved in list(_SAVED.values()):
        saved.close()
    _SAVED.clear()
    from keras_nbguard.isolation.parent import kill_all

    kill_all()


def _finish(
    session: Session, run: IsolatedRun, error: BaseException | None, options: RunOptions
) -> None:
    session.finish(run, error)
    if run.record is not None and not options.quiet:
        from IPython.display import display

        display(run.record.summary_bundle(), raw=True)


def _show(session: Session, message: tuple[Any, ...]) -> None:
    import sys

    kind = message[0]
    if kind == "stream":
        (sys.stderr if message[1] == "stderr" else sys.stdout).write(message[2])
    elif kind == "display":
        from IPython.display import publish_display_data

        publish_display_data(message[1], message[2])
    elif kind == "epoch":
        session.events.emit("epoch", message[1], message[2])


def _quiet_epochs(session: Session, message: tuple[Any, ...]) -> None:
    if message[0] != "epoch":  # epochs of runs side by side would mix in the live panel
        _show(session, message)


def _raise_if_failed(run: IsolatedRun) -> None:
    record = run.record
    if record is not None and record.status != "ok":
        raise IsolatedRunFailed(
            f"the isolated run {record.label!r} #{record.run_number} ended "
            f"{record.status}: {record.error or record.status}"
        )


def child_options(options: RunOptions) -> str:
    """The run options as the child's ``%%kerasrun`` line takes them."""
    words = []
    if not options.clear:
        words.append("--no-clear")
    if not options.deep_clean:
        words.append("--no-deep-clean")
    if options.gpu_growth is not None:
        words.append("--gpu-growth" if options.gpu_growth else "--no-gpu-growth")
    if options.gpu_limit_mb is not None:
        words.append(f"--gpu-limit {options.gpu_limit_mb}")
    if options.host_limit_mb is not None:
        words.append(f"--host-limit {options.host_limit_mb}")
    if options.mixed_precision:
        words.append(f"--mixed-precision {options.mixed_precision}")
    return " ".join(words)
