"""``--cluster ray``: each run a Ray task in a fresh worker process (``max_calls=1``), on a local
Ray or the cluster at ``RAY_ADDRESS`` (``ray://...`` included), with ``num_gpus`` per run. The
worker runs the same job as a local child (``child.run_job``); what it printed and displayed comes
back with its result and is shown in the cell. Ray is an optional extra.

Connecting takes at most ``CONNECT_SECONDS``: an address nothing answers at, or a cluster that
refuses this kernel's token (Ray >= 2.59 turns token authentication on: ``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, read by Ray itself), is a ``ValueError`` in
words, not minutes of Ray's retries. Ray 2.60's driver sends its token only under
``RAY_AUTH_MODE=token``, though ``ray start`` asks for one by default: where the kernel has a
token and no mode, that mode is set in its environment before Ray is imported
(``_send_the_token``). A local Ray we start is started as Ray starts one. Tasks are submitted a
few at a time (a million-point sweep is not a million pending tasks); the stop button cancels the
running ones, recorded interrupted."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from keras_nbguard.isolation.parent import ChildResult

INSTALL = "--cluster ray needs Ray, which is not installed here: pip install 'keras_nbguard[ray]'"
CONNECT_SECONDS = 10.0
LOCAL_IP = "127.0.0.1"

OnDone = Callable[[dict[str, Any], ChildResult, "BaseException | None"], None]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(INSTALL) from None
    return ray


def check() -> None:
    """Before anything starts: Ray must be there (a UsageError in the magic otherwise). Found,
    not imported: ``connect`` may have to set Ray's auth mode before it is."""
    if importlib.util.find_spec("ray") is None:
        raise ValueError(INSTALL)


def address_of(address: str) -> tuple[str, int] | None:
    """(host, port) of ``RAY_ADDRESS`` (``host:port``, ``ray://host:port``); None for "auto",
    "local" or a form we don't read (Ray then finds the cluster itself)."""
    text = address.strip()
    for scheme in ("ray://", "http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def reachable(host: str, port: int, timeout: float = CONNECT_SECONDS) -> str | None:
    """None if something accepts a connection at host:port, else why not, in words."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:.0f} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def connect() -> Any:
    """Ray, initialized: the cluster at ``RAY_ADDRESS``, else a local one on 127.0.0.1."""
    address = os.environ.get("RAY_ADDRESS") or None
    if address and "ray" not in sys.modules:  # (Ray reads its auth mode as it is imported)
        _send_the_token()
    ray = _ray()
    if ray.is_initialized():
        return ray
    where = address_of(address) if address else None
    if address and where is not None:
        problem = reachable(*where)
        if problem:
            raise ValueError(
                f"--cluster ray: can't reach the Ray cluster at {address} (RAY_ADDRESS): "
                f"{problem}. Start it (ray start --head), or unset RAY_ADDRESS for a local Ray"
            )
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        options["address"] = address
        # this package reaches the workers through Ray's runtime environment
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        options["runtime_env"] = {"py_modules": [package]}
    if address is None:  # a local Ray of ours, started the way Ray starts one
        # (in the main thread: started from another, its driver lost the GCS here and Ray's
        # fatal exit took the kernel with it)
        ray.init(**options)
        return ray
    if where is not None and where[0] in ("127.0.0.1", "localhost"):
        options["_node_ip_address"] = LOCAL_IP  # a cluster on this machine's loopback
        _keep_loopback(ray)
    # its port answered (reachable() above): what keeps the kernel out then is the cluster
    _init_within(ray, options, address, answered=where is not None)
    return ray


def _send_the_token() -> None:
    """``RAY_AUTH_MODE=token`` where this kernel has a token and no mode is set, before Ray is
    imported (it reads the mode then): Ray 2.60's driver sends no token without it
    ("InvalidAuthToken: Authentication token is missing"), while a cluster started by ``ray
    start`` asks for one by default. A mode the user set is kept."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"


def _keep_loopback(ray: Any) -> None:
    """Ray replaces a loopback RAY_ADDRESS by the machine's outside address (its route to
    8.8.8.8) unless its cluster mode is off, as on macOS; a cluster listening on 127.0.0.1 alone
    is then out of reach (checked with Ray 2.5x: "Failed to connect to GCS at 192.0.2.2")."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False


def _init_within(
    ray: Any, options: dict[str, Any], address: str | None, answered: bool = False
) -> None:
    """``ray.init(**options)`` in at most CONNECT_SECONDS (a local start: a minute).
    ``answered``: the cluster's port answered, so a cluster that keeps the kernel waiting is
    refusing it (Ray 2.60 retries a token it refuses instead of raising)."""
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(**options)
            outcome.append(None)
        except BaseException as exc:  # handed to the cell's thread
            outcome.append(exc)

    limit = CONNECT_SECONDS if address else 6 * CONNECT_SECONDS
    thread = threading.Thread(target=init, name="keras_nbguard-ray-init", daemon=True)
    thread.start()
    thread.join(limit)
    where = f"the Ray cluster at {address} (RAY_ADDRESS)" if address else "a local Ray"
    if not outcome and answered:
        raise ValueError(
            f"--cluster ray: {where} answered but refused this kernel for {limit:.0f} s: its "
            f"token, most likely. Give the kernel the cluster's token (RAY_AUTH_TOKEN, "
            f"RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and RAY_AUTH_MODE=token before Ray is "
            f"imported (restart the kernel with them)"
        )
    if not outcome:
        raise ValueError(
            f"--cluster ray: {where} did not answer within {limit:.0f} s; is it running, "
            f"and does this kernel have its token (RAY_AUTH_TOKEN or ~/.ray/auth_token, and "
            f"RAY_AUTH_MODE=token before Ray is imported: restart the kernel with it)?"
        )
    error = outcome[0]
    if error is None:
        return
    name = type(error).__name__
    if "Authentication" in name or "token" in str(error).lower():
        raise ValueError(
            f"--cluster ray: {where} refused this kernel's token ({name}). Give the kernel "
            f"the cluster's token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
        ) from None
    raise ValueError(
        f"--cluster ray: could not connect to {where}: {name}: "
        f"{str(error).splitlines()[0] if str(error) else ''}"[:600]
    ) from None


def run_all(
    jobs: Iterator[dict[str, Any]],
    gpus: float | None,
    on_message: Callable[[Any], None],
    on_done: OnDone,
) -> None:
    """Submit the jobs a few at a time; hand each to ``on_done`` as it ends, in the order they
    end. The stop button cancels what is running, handed over as interrupted."""
    import cloudpickle

    ray = connect()
    task = ray.remote(max_calls=1, num_gpus=gpus or 0)(_task)
    window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    pending: dict[Any, tuple[dict[str, Any], float]] = {}
    try:
        while True:
            while len(pending) < window:
                job = next(jobs, None)
                if job is None:
                    break
                pending[task.remote(cloudpickle.dumps(job))] = (job, time.perf_counter())
            if not pending:
                return
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                job, started = pending.pop(ref)
                done = _result(ray, ref, started)
                for message in done.messages:  # what the task printed and displayed
                    on_message(message)
                on_done(job, done, None)
    except KeyboardInterrupt as stop:
        for ref, (job, started) in pending.items():
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            done = ChildResult(
                where="Ray task",
                wall=time.perf_counter() - started,
                exit="interrupted: the Ray task was cancelled",
            )
            on_done(job, done, stop)
        raise


def _result(ray: Any, ref: Any, started: float) -> ChildResult:
    done = ChildResult(where="Ray task", wall=time.perf_counter() - started)
    try:
        reply = ray.get(ref)
    except Exception as exc:  # the worker died, or Ray could not run the task
        done.exit = f"the Ray task failed: {type(exc).__name__}: {exc}"[:500]
        return done
    done.result, done.pid, done.startup = reply["result"], reply["pid"], reply["startup"]
    done.messages = reply["messages"]
    return done


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
