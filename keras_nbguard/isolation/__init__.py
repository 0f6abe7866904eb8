"""``%%kerasrun --isolate`` and ``--sweep``: each run in a fresh Python process. The names the
cell reads go in (cloudpickle), the names it binds come back (Keras models through the Keras
format), its prints and displays stream into the cell, and the child's own measurements become
the run's record, kept by the kernel's history like any other. The kernel imports no framework
for it: what TensorFlow keeps (graphs, its GPU pool) ends with the child.

Where the children run: one at a time, watched live (``_watched``); side by side on this machine
(``--parallel N``) or as Ray tasks (``--cluster ray``), each recorded as it ends (``_recorded``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..prepare import RunOptions
from . import names, sweep
from .parent import Child, ChildResult, IsolatedRun, Spare

if TYPE_CHECKING:
    from ..session import Session


# each kernel's next process, pre-started (--prestart); gone with the kernel's Session
_SPARES: weakref.WeakKeyDictionary[Any, Spare] = weakref.WeakKeyDictionary()


class IsolatedRunFailed(Exception):
    """The isolated cell raised, or its process died: the cell fails too, so "Run All" stops
    (the child's own traceback has been shown above)."""


def run_isolated(
    session: Session,
    shell: Any,
    label: str,
    cell: str,
    args: argparse.Namespace,
    options: RunOptions,
    cell_id: str | None,
) -> Any:
    """Run ``cell`` isolated (once, or once per ``--sweep`` point). Bad input raises
    ``ValueError`` in the user's terms before any process starts."""
    if args.cluster is not None:
        from . import ray_cluster

        ray_cluster.check()
    if args.parallel < 1:
        raise ValueError(f"--parallel takes a number of processes, 1 or more, not {args.parallel}")
    reads, binds = names.read_and_bound(cell)
    shared: list[Any] = []  # shared-memory segments of the inputs: ours to unlink at the end
    try:
        packed = names.pack_inputs(
            names.chosen(args.inputs, reads),
            shell.user_ns,
            explicit=args.inputs is not None,
            shared=shared if args.cluster is None else None,
        )
        job = {
            "source": cell,
            "label": label,
            "options": child_options(options),
            "inputs": packed,
            "outputs": names.chosen(args.outputs, binds),
            "params": {},
        }
        return _run_jobs(session, shell, job, args, options, cell_id)
    finally:
        for segment in shared:
            segment.close()
            segment.unlink()


def _run_jobs(
    session: Session,
    shell: Any,
    job: dict[str, Any],
    args: argparse.Namespace,
    options: RunOptions,
    cell_id: str | None,
) -> Any:
    points = sweep.points(args.sweep) if args.sweep else [{}]
    jobs = [{**job, "params": params} for params in points]
    if args.cluster is None and args.parallel == 1:
        finished: Iterator[tuple[dict[str, Any], IsolatedRun, ChildResult]] = (
            _watched(session, point, options, cell_id, _spare_of(session)) for point in jobs
        )
    else:
        finished = (
            _recorded(session, point, done, options, cell_id)
            for point, done in _side_by_side(session, jobs, args)
        )
    results: dict[Any, Any] = {}
    if args.prestart and args.cluster is None and args.parallel == 1:  # for the next run
        finished = _then_prestart(finished, _spare_of(session), names.imports_of(job["source"]))
    for point, run, done in finished:
        bound = _received(done)
        if not args.sweep:
            value = bound.pop("__value__")
            shell.user_ns.update(bound)
            _raise_if_failed(run)
            return value
        bound.pop("__value__")  # a point's names stay in the mapping: in the namespace the
        results[sweep.key(point["params"])] = bound  # points would overwrite each other
    return results


def _watched(
    session: Session,
    job: dict[str, Any],
    options: RunOptions,
    cell_id: str | None,
    spare: Spare | None,
) -> tuple[dict[str, Any], IsolatedRun, ChildResult]:
    """One child, watched live: its prints and displays into the cell, its epochs and RSS to the
    dashboard and the store; recorded however it ends."""
    run = session.begin(job["label"], options, cell_id, run_class=IsolatedRun)
    assert isinstance(run, IsolatedRun)
    run.params = job["params"] or None
    error: BaseException | None = None
    child = None
    try:
        child = (spare.take() if spare is not None else None) or Child()
        child.start(job)
        run.child = child.done
        child.wait(
            lambda message: _show(session, message),
            lambda t, rss: session.events.emit("sample", t, rss),
        )
        run.not_sent = (child.done.result or {}).get("not_sent") or None
        return job, run, child.done
    except BaseException as exc:
        error = exc
        raise
    finally:
        _finish(session, run, error, options)
        if child is not None:
            child.close()


def _spare_of(session: Session) -> Spare:
    spare = _SPARES.get(session)
    if spare is None:
        spare = _SPARES[session] = Spare()
    return spare


def _then_prestart(finished: Iterator[Any], spare: Spare, preload: list[str]) -> Iterator[Any]:
    """Each run as it ends, the next run's process started right after it (while the user
    reads the result, or while the run's outputs are loaded)."""
    for item in finished:
        spare.make(preload)
        yield item


def _side_by_side(
    session: Session, jobs: list[dict[str, Any]], args: argparse.Namespace
) -> Iterator[tuple[dict[str, Any], ChildResult]]:
    """Several children at once, yielded as each ends: on this machine, or as Ray tasks."""
    if args.cluster is not None:
        from . import ray_cluster

        for job, done in ray_cluster.run_all(jobs, args.gpus):
            for message in done.messages:  # what the task printed and displayed
                _show(session, message)
            yield job, done
        return
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        futures = {pool.submit(_run_unwatched, session, job): job for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()


def _recorded(
    session: Session,
    job: dict[str, Any],
    done: ChildResult,
    options: RunOptions,
    cell_id: str | None,
) -> tuple[dict[str, Any], IsolatedRun, ChildResult]:
    """A child that ran beside others, recorded as it ends (the kernel tracks one run at a
    time), without live samples."""
    run = session.begin(job["label"], options, cell_id, run_class=IsolatedRun)
    assert isinstance(run, IsolatedRun)
    run.params, run.child = job["params"] or None, done
    run.not_sent = (done.result or {}).get("not_sent") or None
    _finish(session, run, None, options)
    return job, run, done


def _run_unwatched(session: Session, job: dict[str, Any]) -> ChildResult:
    def show(message: tuple[Any, ...]) -> None:
        if message[0] != "epoch":  # epochs of runs side by side would mix in the live panel
            _show(session, message)

    child = Child().start(job)
    try:
        return child.wait(show, lambda t, rss: None)
    finally:
        child.close()


def _finish(
    session: Session, run: IsolatedRun, error: BaseException | None, options: RunOptions
) -> None:
    session.finish(run, error)
    if run.record is not None and not options.quiet:
        from IPython.display import display

        display(run.record.summary_bundle(), raw=True)


def _show(session: Session, message: tuple[Any, ...]) -> None:
    kind = message[0]
    if kind == "stream":
        (sys.stderr if message[1] == "stderr" else sys.stdout).write(message[2])
    elif kind == "display":
        from IPython.display import publish_display_data

        publish_display_data(message[1], message[2])
    elif kind == "epoch":
        session.events.emit("epoch", message[1], message[2])


def _received(done: ChildResult) -> dict[str, Any]:
    """The names the cell bound in the child, and its last value under ``__value__`` (a value
    that can't travel is shown as IPython would show it)."""
    import cloudpickle

    result = done.result or {}
    bound: dict[str, Any] = {"__value__": None}
    for name, sent in result.get("outputs", {}).items():
        bound[name] = (
            _load_model(sent[1], sent[2]) if sent[0] == "keras" else cloudpickle.loads(sent[1])
        )
    if result.get("value") is not None:
        bound["__value__"] = cloudpickle.loads(result["value"])
    elif result.get("bundle"):
        from IPython.display import publish_display_data

        publish_display_data(result["bundle"])
    done.result = None  # the pickles: let them go once loaded
    return bound


def _load_model(package: str, data: bytes) -> Any:
    """A model the child saved in the Keras format (bytes: the child may be on another machine)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        with open(path, "wb") as out:
            out.write(data)
        if package == "tf_keras":
            import tf_keras

            return tf_keras.models.load_model(path)
        import keras

        return keras.saving.load_model(path)


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
