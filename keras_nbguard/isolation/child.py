"""The process an isolated run happens in (``python -m keras_nbguard.isolation.child R W``):
a fresh interpreter with a real IPython shell and keras_nbguard loaded, so the run is measured
exactly as in a kernel. It reads one job from fd R, runs the cell under ``%%kerasrun``, and
writes messages to fd W as they come: prints, displays, epochs, then the result (the record, the
names the cell bound, its last value). It never writes to the notebook's history: the kernel
keeps the record."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import shlex
import sys
import tempfile
import threading
import time
import types
from multiprocessing.connection import Connection
from typing import Any, cast

Send = Any  # (kind, *payload) -> None
_ATTACHED: list[Any] = []  # the kernel's shared-memory arrays, mapped for as long as we live


class Forward(io.TextIOBase):
    """sys.stdout / sys.stderr of the child: each write goes to the kernel's cell at once."""

    def __init__(self, name: str, send: Send) -> None:
        self.name_ = name
        self._send = send

    def write(self, text: str) -> int:
        if text:
            self._send("stream", self.name_, text)
        return len(text)

    def isatty(self) -> bool:
        return False


def main() -> None:
    """A child of the kernel: the modules to load while it waits, then the job, from fd R;
    every message to fd W as it comes."""
    import cloudpickle

    inbox = Connection(int(sys.argv[1]), writable=False)
    outbox = Connection(int(sys.argv[2]), readable=False)
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:  # the sampler's thread and the cell's may both print
            outbox.send_bytes(pickle.dumps(message))

    preload = cloudpickle.loads(inbox.recv_bytes())
    shell = make_shell(send)
    for module in preload:  # a pre-started child: the cell's imports, before it is needed
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    try:
        job = cloudpickle.loads(inbox.recv_bytes())
    except EOFError:  # a spare the kernel never used: it went away
        return
    send("result", run_job(job, send, shell))


def make_shell(send: Send) -> Any:
    """A real IPython shell with keras_nbguard loaded; prints and displays go to ``send``."""
    from IPython.core.interactiveshell import InteractiveShell

    os.environ["KERAS_NBGUARD_DB"] = ":memory:"  # the kernel keeps the record, not the child
    sys.stdout, sys.stderr = Forward("stdout", send), Forward("stderr", send)
    shell = InteractiveShell.instance()
    _forward_displays(shell, send)
    shell.run_line_magic("load_ext", "keras_nbguard")
    import keras_nbguard

    keras_nbguard.get_session().events.subscribe(
        "epoch", lambda epoch, seconds: send("epoch", epoch, seconds)
    )
    return shell


def run_job(job: dict[str, Any], send: Send, shell: Any = None) -> dict[str, Any]:
    """Run the cell of ``job`` under ``%%kerasrun`` in this process's shell (made now when not
    given: a Ray task); what it prints and displays goes to ``send`` as it comes."""
    import keras_nbguard
    from keras_nbguard.isolation.names import unpack_input

    streams = sys.stdout, sys.stderr
    try:
        shell = shell or make_shell(send)
        send("ready", time.time())
        for name, sent in job["inputs"].items():
            shell.user_ns[name] = unpack_input(sent, _ATTACHED)
        shell.user_ns.update(job["params"])
        head = f"%%kerasrun --label {shlex.quote(job['label'])} --quiet {job['options']}"
        result = shell.run_cell(f"{head.rstrip()}\n{job['source']}", store_history=True)
        records = keras_nbguard.runs()
        outputs, not_sent = _collect(shell.user_ns, job["outputs"])
        value, bundle = _value(shell, result.result)
    finally:
        sys.stdout, sys.stderr = streams
    error = None if result.success else repr(result.error_in_exec or result.error_before_exec)
    return {
        "record": records[-1].to_dict() if records else None,
        "success": result.success,
        "error": error,
        "outputs": outputs,
        "not_sent": not_sent,
        "value": value,
        "bundle": bundle,
        "pid": os.getpid(),
    }


def _forward_displays(shell: Any, send: Send) -> None:
    """display() goes to the cell; the last value is sent as a value, not printed as Out[n]."""
    shell.display_pub.publish = lambda data, metadata=None, **_: send(
        "display", data, metadata or {}
    )
    hook = shell.displayhook
    hook.write_output_prompt = lambda: None
    hook.write_format_data = lambda format_dict, md_dict=None: None
    hook.finish_displayhook = lambda: None


def _collect(namespace: dict[str, Any], names: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The names to bring back: Keras models as the bytes of their Keras-format file (the kernel
    may be on another machine: a Ray cluster), everything else pickled; what can't travel is
    named with why."""
    import cloudpickle

    from keras_nbguard import backends
    from keras_nbguard.isolation.names import describe

    models = tuple(c for c in (k.model_class for k in backends.loaded()) if c is not None)
    outputs: dict[str, Any] = {}
    not_sent: dict[str, str] = {}
    for name in names:
        if name not in namespace:
            continue
        value: Any = namespace[name]
        if isinstance(value, types.ModuleType):
            not_sent[name] = describe(value)
        elif models and isinstance(value, models):
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, f"{name}.keras")
                try:
                    cast(Any, value).save(path)  # isinstance of a tuple: object to mypy
                    with open(path, "rb") as saved:
                        outputs[name] = (
                            "keras",
                            type(value).__module__.split(".")[0],
                            saved.read(),
                        )
                except Exception as exc:
                    not_sent[name] = f"a Keras model that could not be saved: {exc}"
        else:
            try:
                outputs[name] = ("value", cloudpickle.dumps(value))
            except Exception as exc:
                not_sent[name] = f"{describe(value)}: {exc}"
    return outputs, not_sent


def _value(shell: Any, value: Any) -> tuple[bytes | None, dict[str, Any] | None]:
    """The cell's last value: pickled, or else as IPython would show it."""
    if value is None:
        return None, None
    import cloudpickle

    try:
        return cloudpickle.dumps(value), None
    except Exception:
        data, _ = shell.display_formatter.format(value)
        return None, data


if __name__ == "__main__":
    main()
