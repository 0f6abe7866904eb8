"""``%%kerasrun --isolate`` and ``--sweep``: each run in a fresh Python process. The names the
cell reads go in (cloudpickle), the names it binds come back (Keras models through the Keras
format), its prints and displays stream into the cell, and the child's own measurements become
the run's record, kept by the kernel's history like any other. The kernel imports no framework
for it: what TensorFlow keeps (graphs, its GPU pool) ends with the child."""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import sys
from typing import TYPE_CHECKING, Any

from ..prepare import RunOptions
from . import names, sweep
from .parent import Child, ChildResult, IsolatedRun

if TYPE_CHECKING:
    from ..session import Session


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
    reads, binds = names.read_and_bound(cell)
    inputs = names.chosen(args.inputs, reads)
    outputs = names.chosen(args.outputs, binds)
    packed = names.pack_inputs(inputs, shell.user_ns, explicit=args.inputs is not None)
    job = {
        "source": cell,
        "label": label,
        "options": child_options(options),
        "inputs": packed,
        "outputs": outputs,
        "params": {},
    }
    if args.sweep:
        if args.parallel < 1:
            raise ValueError(
                f"--parallel takes a number of processes, 1 or more, not {args.parallel}"
            )
        return run_sweep(
            session, shell, job, sweep.points(args.sweep), args.parallel, options, cell_id
        )
    run, done = _tracked(session, job, options, cell_id)
    bound = _received(done)
    value = bound.pop("__value__")
    shell.user_ns.update(bound)
    _raise_if_failed(run)
    return value


def _tracked(
    session: Session, job: dict[str, Any], options: RunOptions, cell_id: str | None
) -> tuple[IsolatedRun, ChildResult]:
    """One child, watched live: its prints and displays into the cell, its epochs and RSS to the
    dashboard and the store; recorded however it ends."""
    run = session.begin(job["label"], options, cell_id, run_class=IsolatedRun)
    assert isinstance(run, IsolatedRun)
    run.params = job["params"] or None
    error: BaseException | None = None
    child = None
    try:
        child = Child(job)
        run.child = child.done
        child.wait(
            lambda message: _show(session, message),
            lambda t, rss: session.events.emit("sample", t, rss),
        )
        run.not_sent = (child.done.result or {}).get("not_sent") or None
        return run, child.done
    except BaseException as exc:
        error = exc
        raise
    finally:
        _finish(session, run, error, options)
        if child is not None and error is not None:
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
    try:
        for name, sent in result.get("outputs", {}).items():
            bound[name] = (
                _load_model(sent[1], sent[2]) if sent[0] == "keras" else cloudpickle.loads(sent[1])
            )
        if result.get("value") is not None:
            bound["__value__"] = cloudpickle.loads(result["value"])
        elif result.get("bundle"):
            from IPython.display import publish_display_data

            publish_display_data(result["bundle"])
    finally:
        shutil.rmtree(done.folder, ignore_errors=True)  # the saved models, once loaded
    return bound


def _load_model(package: str, path: str) -> Any:
    if package == "tf_keras":
        import tf_keras

        return tf_keras.models.load_model(path)
    import keras

    return keras.saving.load_model(path)


def _raise_if_failed(run: IsolatedRun) -> None:
    record = run.record
    if record is not None and record.status not in ("ok",):
        detail = record.error or record.status
        raise IsolatedRunFailed(
            f"the isolated run {record.label!r} #{record.run_number} ended "
            f"{record.status}: {detail}"
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


def run_sweep(
    session: Session,
    shell: Any,
    job: dict[str, Any],
    points: list[dict[str, Any]],
    parallel: int,
    options: RunOptions,
    cell_id: str | None,
) -> dict[Any, Any]:
    """Every point in its own child; returns ``{(("units", 32), ...): {names bound}}``."""
    results: dict[Any, Any] = {}
    jobs = [{**job, "params": params} for params in points]
    if parallel == 1:
        for point in jobs:
            _run, done = _tracked(session, point, options, cell_id)
            results[sweep.key(point["params"])] = _point_outputs(done)
        return results
    # several children at once: each is recorded as it ends, one after another (the kernel
    # tracks one run at a time), without live samples
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        futures = {pool.submit(_run_unwatched, session, point): point for point in jobs}
        for future in concurrent.futures.as_completed(futures):
            point = futures[future]
            done = future.result()
            run = session.begin(point["label"], options, cell_id, run_class=IsolatedRun)
            assert isinstance(run, IsolatedRun)
            run.params, run.child = point["params"], done
            run.not_sent = (done.result or {}).get("not_sent") or None
            _finish(session, run, None, options)
            results[sweep.key(point["params"])] = _point_outputs(done)
    return results


def _run_unwatched(session: Session, job: dict[str, Any]) -> ChildResult:
    """A child beside others: its prints and displays still reach the cell; no live samples."""

    def show(message: tuple[Any, ...]) -> None:
        if message[0] != "epoch":  # epochs of runs side by side would mix in the live panel
            _show(session, message)

    return Child(job).wait(show, lambda t, rss: None)


def _point_outputs(done: ChildResult) -> dict[str, Any]:
    """A sweep point's names, kept in the sweep's mapping: bound in the namespace, the points
    would overwrite each other."""
    bound = _received(done)
    bound.pop("__value__")
    return bound
