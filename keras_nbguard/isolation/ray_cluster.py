"""``--cluster ray``: each run a Ray task in a fresh worker process (``max_calls=1``), on a local
Ray or the cluster at ``RAY_ADDRESS`` (``ray://...`` included), with ``num_gpus`` per run. The
worker runs the same job as a local child (``child.run_job``); what it printed and displayed comes
back with its result and is shown in the cell. Ray is an optional extra."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from .parent import ChildResult

INSTALL = "--cluster ray needs Ray, which is not installed here: pip install 'keras_nbguard[ray]'"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(INSTALL) from None
    return ray


def check() -> None:
    """Before anything starts: Ray must be there (a UsageError in the magic otherwise)."""
    _ray()


def run_all(
    jobs: list[dict[str, Any]], gpus: float | None
) -> Iterator[tuple[dict[str, Any], ChildResult]]:
    """Submit every job, yield (job, result) as each ends, in the order they end."""
    import cloudpickle

    ray = _ray()
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        # a remote cluster gets this package through Ray's runtime environment
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        ray.init(
            address=address or None,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"py_modules": [package]} if address else None,
        )
    task = ray.remote(max_calls=1, num_gpus=gpus or 0)(_task)
    started = time.perf_counter()
    pending = {task.remote(cloudpickle.dumps(job)): job for job in jobs}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        job = pending.pop(ready[0])
        done = ChildResult(where="Ray task", wall=time.perf_counter() - started)
        try:
            reply = ray.get(ready[0])
        except Exception as exc:  # the worker died, or Ray could not run the task
            done.exit = f"the Ray task failed: {type(exc).__name__}: {exc}"[:500]
            yield job, done
            continue
        done.result, done.pid, done.startup = reply["result"], reply["pid"], reply["startup"]
        done.messages = reply["messages"]
        yield job, done


def _task(job_bytes: bytes) -> dict[str, Any]:
    """In the Ray worker: the job as a local child runs it, its messages kept for the kernel."""
    import cloudpickle

    from keras_nbguard.isolation.child import run_job

    began = time.perf_counter()
    messages: list[tuple[Any, ...]] = []
    startup: list[float] = []

    def send(*message: Any) -> None:
        if message[0] == "ready":
            startup.append(time.perf_counter() - began)
        elif message[0] != "epoch":
            messages.append(message)

    result = run_job(cloudpickle.loads(job_bytes), send)
    return {
        "result": result,
        "pid": os.getpid(),
        "startup": startup[0] if startup else None,
        "messages": messages,
    }
