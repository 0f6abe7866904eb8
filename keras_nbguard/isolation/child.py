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
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any, cast

LAST = "__value__"  # what the cell's last value travels under, beside the names it bound
FUNCTIONS = "__functions__"  # beside the names: functions the models sent refer to by name

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
    """A child of the kernel: what to load while it waits, then the job, from fd R; every
    message to fd W as it comes; the result before waiting for anything else."""
    import cloudpickle

    from keras_nbguard.isolation import guard

    for fd in (int(sys.argv[1]), int(sys.argv[2])):  # not handed down to the cell's processes
        os.set_inheritable(fd, False)
    inbox = Connection(int(sys.argv[1]), writable=False)
    outbox = Connection(int(sys.argv[2]), readable=False)
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:  # the sampler's thread and the cell's may both print
            outbox.send_bytes(pickle.dumps(message))

    hello = pickle.loads(inbox.recv_bytes())
    guard.guard(hello["parent"])
    # the kernel's own modules and folders first, as the kernel finds them
    sys.path[:] = [*hello["path"], *(p for p in sys.path if p not in hello["path"])]
    # and its argv: a cell's argparse reads the kernel's (``parse_known_args`` in notebooks)
    sys.argv[:] = hello["argv"]
    shell = make_shell(send)
    for module in hello["preload"]:  # a pre-started child: the cell's imports, beforehand
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    try:
        job = cloudpickle.loads(inbox.recv_bytes())
    except EOFError:  # a spare the kernel never used: it went away
        return
    send("result", run_job(job, send, shell))
    stray = guard.stray_threads()
    send("end", stray)
    if stray:  # the interpreter's exit would wait for them: they end with the process
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(0)


def make_shell(send: Send) -> Any:
    """A real IPython shell with keras_nbguard loaded; prints and displays go to ``send``."""
    from IPython.core.interactiveshell import InteractiveShell

    os.environ["KERAS_NBGUARD_DB"] = ":memory:"  # the kernel keeps the record, not the child
    sys.stdout, sys.stderr = Forward("stdout", send), Forward("stderr", send)
    shell = InteractiveShell.instance()
    _forward_displays(shell, send)
    # the stop button reaches the cell here as SIGINT (parent.py): the kernel says it in one
    # line, so this shell shows no traceback of it (TensorFlow's frames, where the fit was)
    shell.set_custom_exc((KeyboardInterrupt,), lambda *stopped, **offset: None)
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
    from keras_nbguard.isolation import changed_state, random_state, registrations
    from keras_nbguard.isolation.changed_models import changed, fingerprints
    from keras_nbguard.isolation.names import unpack_input
    from keras_nbguard.isolation.notebook_functions import CodeEffects, run_here
    from keras_nbguard.prepare import kept_state

    streams = sys.stdout, sys.stderr
    try:
        shell = shell or make_shell(send)
        send("ready", time.time())
        began = time.perf_counter()
        try:
            run_here(shell.user_ns)  # the notebook's functions in what was sent read these names
            for name, sent in job["inputs"].items():
                shell.user_ns[name] = unpack_input(sent, _ATTACHED)
            registered = registrations.take_on(job.get("registered"))  # for the cell's own
            registrations.register_copies(registered, shell.user_ns)
            # Keras 3 pickles a metric without its counts: the kernel's, set on the copy
            unlike = changed_state.restore_sent(shell.user_ns, job.get("keras_state", {}))
        except Exception as exc:  # a name that could not be made here: said, nothing ran
            send("stream", "stderr", f"{exc}\n")
            return {
                "record": None,
                "success": False,
                "error": str(exc),
                "outputs": {},
                "not_sent": {},
                "value": None,
                "bundle": None,
                "pid": os.getpid(),
                "inputs_seconds": time.perf_counter() - began,
            }
        # making the names here (unpickled, loaded, replayed: the replay's imports too) and
        # saving what goes back are parts of the kernel's wall the cell's own time is not
        # the kernel's Keras: names count on past its own, its settings and dtype policy hold
        kept_state.take_on(job.get("keras", {}), settings=True)
        inputs_seconds = time.perf_counter() - began
        shell.user_ns.update(job["params"])
        trained = job.get("trained_back", False)
        before = fingerprints(shell.user_ns, job["inputs"], _model_classes()) if trained else {}
        # what differs from the kernel's as the cell begins must not be taken back as a change
        compared = [n for n in job["inputs"] if n not in job["outputs"]]
        state_before = (
            changed_state.fingerprints(shell.user_ns, compared, _model_classes(), skip=unlike)
            if trained
            else {}
        )
        reads = {n: job["inputs"][n] for n in job.get("read_by_code", ()) if n in job["inputs"]}
        effects = CodeEffects(shell.user_ns, job.get("bound_by_code", ()), reads)
        random_state.take_on(job.get("random"))  # last: making the names drew on it too
        head = f"%%kerasrun --label {shlex.quote(job['label'])} --quiet {job['options']}"
        result = shell.run_cell(f"{head.rstrip()}\n{job['source']}", store_history=True)
        records = keras_nbguard.runs()
        began = time.perf_counter()
        trained_here = [n for n in changed(shell.user_ns, before) if n not in job["outputs"]]
        # what the notebook's functions bound (`global history`) or changed (`losses.append`)
        by_code = [n for n in effects.changed(shell.user_ns) if n not in job["outputs"]]
        # a metric a notebook function updates, a layer trained in the cell's model: their
        # values go back into the notebook's objects (one the cell built goes back whole)
        state, built_here, stayed = changed_state.changed(
            shell.user_ns, state_before, job["outputs"] + by_code
        )
        back = list(dict.fromkeys(job["outputs"] + trained_here + by_code + built_here))
        # a layer built here inside the notebook's list or dict goes by its path, once
        in_place = changed_state.objects_at(shell.user_ns, built_here)
        same_as = changed_state.aliases(in_place)
        back = [name for name in back if name not in same_as]
        namespace = {**shell.user_ns, **in_place}
        outputs, not_sent = _collect(namespace, back, result.result)
        not_sent.update({**changed_state.counted_from_zero(unlike, outputs), **stayed})
        counts = changed_state.metric_state(shell.user_ns, [n for n in outputs if n != LAST])
        value_of = None if LAST in outputs else _name_of(result.result, namespace, outputs)
        sent_as_name = LAST in outputs or value_of is not None
        value, bundle = (None, None) if sent_as_name else _value(shell, result.result)
        outputs_seconds = time.perf_counter() - began
    finally:
        sys.stdout, sys.stderr = streams
    error = None if result.success else repr(result.error_in_exec or result.error_before_exec)
    return {
        "record": records[-1].to_dict() if records else None,
        "success": result.success,
        "error": error,
        "outputs": outputs,
        "not_sent": not_sent,
        "trained_back": [name for name in trained_here if name in outputs],
        "same_as": same_as,  # paths to a layer that another path brings back
        "built_here": built_here,  # layers first built here: the kernel's own built alike
        "state": state,
        "metric_state": counts,  # of the metrics in "outputs", which pickle without them
        "value": value,
        "value_of": value_of,
        "bundle": bundle,
        "pid": os.getpid(),
        "inputs_seconds": inputs_seconds,
        "outputs_seconds": outputs_seconds,
        "keras": kept_state.carried(),  # the kernel's names count on past the cell's
        "random": random_state.carried(),  # and its random streams go on from the cell's
        # the classes the cell defined, and what it registered: the models of them load there
        "classes": [name for name in outputs if isinstance(shell.user_ns.get(name), type)],
        "registered": registrations.carried(),
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


def _collect(
    namespace: dict[str, Any], names: list[str], last: Any = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The names to bring back: Keras models as the bytes of their Keras-format file (the kernel
    may be on another machine: a Ray cluster), everything else pickled; what can't travel is
    named with why. A model travels once: a History (any callback) that holds it is sent
    without it, naming the model to attach again (``("value", pickle, model_key)``). So does
    the cell's ``last`` value when it is one (a cell ending in ``model.fit(...)``), as ``LAST``:
    pickled whole, it brought a second copy of the model into the kernel, which nothing of ours
    knew and ``Out[n]`` kept, one a run. A model inside any other value (a list of the best
    models beside ``best_model = models[0]``) travels once too, the pickle holding its key: in
    the kernel, ``best_model is models[0]`` as it was in the cell. A model that is a layer of
    another one sent back says where (``nested_models``)."""
    from keras_nbguard.isolation.kinds import is_dataset
    from keras_nbguard.isolation.names import ModuleByName, describe
    from keras_nbguard.isolation.nested_models import links

    models = _model_classes()
    outputs: dict[str, Any] = {}
    not_sent: dict[str, str] = {}
    keys: dict[int, str] = {}  # id(model) -> the key it travels under
    present = [name for name in names if name in namespace]
    if last is not None and _held_model(last, models)[1] is not None:
        namespace, present = {**namespace, LAST: last}, [*present, LAST]
    for name in present:  # the models first: a History then names the model it holds
        if models and isinstance(namespace[name], models):
            problem = _send_model(outputs, keys, name, namespace[name])
            if problem:
                not_sent[name] = problem
    sent_models = {name: namespace[name] for name in present if name in outputs}
    for name, link in links(sent_models).items():  # model, a layer of end_to_end_model
        outputs[name] = (*outputs[name], link)
    for name in present:
        value: Any = namespace[name]
        if name in outputs or name in not_sent:
            continue
        if isinstance(value, types.ModuleType):  # the notebook's own, where it has it
            outputs[name] = ("value", _pickled(ModuleByName(value.__name__)))
            continue
        if _symbolic(value):
            not_sent[name] = "a symbolic tensor of the cell's Keras graph: it stays there"
            continue
        if is_dataset(value):  # pickling says "Cannot convert a Tensor of dtype variant ..."
            not_sent[name] = PIPELINE_STAYS
            continue
        slot, held = _held_model(value, models)
        try:
            if held is None:
                outputs[name] = ("value", _pickled(value, _model_keys(outputs, keys, name, models)))
                continue
            key = keys.get(id(held))
            if key is None and not _send_model(outputs, keys, f"{name}.model", held):
                key = f"{name}.model"
            vars(value)[slot] = None  # the model travels on its own, once
            try:
                outputs[name] = ("value", _pickled(value), key)
            finally:
                vars(value)[slot] = held
        except Exception as exc:
            not_sent[name] = f"{describe(value)}: {exc}"
    not_sent.pop(LAST, None)  # not a name: the value is shown as IPython would show it instead
    return outputs, not_sent


# A pipeline made in a cell of its own is the kernel's, and reaches isolated runs (replayed)
PIPELINE_STAYS = (
    "a tf.data pipeline: it stays in the process that made it; make it in a cell of its own "
    "to have it here and in isolated runs"
)


def _model_classes() -> tuple[type, ...]:
    """The model class of each Keras imported here (Keras 3, tf_keras)."""
    from keras_nbguard import backends

    return backends.model_classes()


def _symbolic(value: Any) -> bool:
    """A Keras symbolic tensor (``keras.Input(...)``, a layer's output while a Functional model
    is built): pickled, it took its whole graph along (every layer, an adapted vocabulary: 97
    MiB a run on Keras' text classification example), and nothing in the kernel can compute
    with it."""
    return any(  # tf_keras has subclasses of it: ragged, sparse
        cls.__name__ == "KerasTensor" and cls.__module__.split(".")[0] in ("keras", "tf_keras")
        for cls in type(value).__mro__
    )


def _pickled(value: Any, model_key: Callable[[Any], str | None] | None = None) -> bytes:
    """cloudpickle's bytes; with ``model_key``, a Keras model it gives a key for is pickled as
    that key alone, to be the model loaded under it in the kernel (``back.model_sent_apart``).
    (``reducer_override``, not ``persistent_id``: pickle asks it of objects only, never of each
    int or str of a large list.)"""
    import cloudpickle

    if model_key is None:
        return cast(bytes, cloudpickle.dumps(value))
    from keras_nbguard.isolation.back import model_sent_apart

    key_of = model_key

    class ModelsByKey(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            key = key_of(obj)
            if key is not None:
                return model_sent_apart, (key,)
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    ModelsByKey(buffer).dump(value)
    return buffer.getvalue()


def _model_keys(
    outputs: dict[str, Any], keys: dict[int, str], name: str, models: tuple[type, ...]
) -> Callable[[Any], str | None] | None:
    """For pickling ``name``'s value: the key of each Keras model in it, sent on its own the
    first time (``name#1``...: not a name the kernel binds); None for any other object, and for
    a model that can't be saved (then pickled in place, as before)."""
    if not models:
        return None

    def key_of(obj: Any) -> str | None:
        if not isinstance(obj, models):
            return None
        key = keys.get(id(obj))
        if key is None:
            key = f"{name}#{len(keys) + 1}"
            if _send_model(outputs, keys, key, obj):
                return None
        return key

    return key_of


def _held_model(value: Any, models: tuple[type, ...]) -> tuple[str, Any]:
    """A Keras callback's model (a History's): (its attribute, the model), else ("", None)."""
    if not models:
        return "", None
    attributes = getattr(value, "__dict__", None)
    if not isinstance(attributes, dict):
        return "", None
    for slot in ("_model", "model"):
        held = attributes.get(slot)
        if held is not None and isinstance(held, models):
            return slot, held
    return "", None


def _send_model(outputs: dict[str, Any], keys: dict[int, str], key: str, model: Any) -> str:
    """Save ``model`` in the Keras format into ``outputs[key]``; what went wrong, if it did."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        try:
            with warnings.catch_warnings():  # "not yet been built": ours to try, not the user's
                warnings.filterwarnings("ignore", "You are saving a model that has not yet been")
                model.save(path)
            with open(path, "rb") as saved:
                outputs[key] = ("keras", type(model).__module__.split(".")[0], saved.read())
            _send_functions(outputs, model)
        except Exception as exc:  # Keras' own words, its first paragraph (an example follows)
            words = " ".join(str(exc).strip().split("\n\n")[0].split())
            return f"a Keras model that could not be saved: {words}"
    keys[id(model)] = key
    return ""


def _send_functions(outputs: dict[str, Any], model: Any) -> None:
    """The functions ``model`` was compiled with that the kernel can't find by name, pickled by
    value: its file names them only (keras.io's siamese example compiles with ``loss(margin)``,
    which returns its inner ``contrastive_loss``, and the model could not be loaded there)."""
    import cloudpickle

    compiled = getattr(model, "_compile_config", None)
    for function in _local_functions(getattr(compiled, "config", compiled)):
        with contextlib.suppress(Exception):
            entry = outputs.setdefault(FUNCTIONS, ("functions", {}))
            entry[1][function.__name__] = cloudpickle.dumps(function)


def _local_functions(value: Any, depth: int = 0) -> Iterator[types.FunctionType]:
    """Functions inside ``value`` (dicts, lists: a compile's loss and metrics) defined in the
    notebook or inside another function: nowhere the kernel could import them from."""
    if isinstance(value, types.FunctionType):
        if value.__module__ == "__main__" or "<locals>" in value.__qualname__:
            yield value
    elif isinstance(value, dict) and depth < 4:
        for item in value.values():
            yield from _local_functions(item, depth + 1)
    elif isinstance(value, list | tuple) and depth < 4:
        for item in value:
            yield from _local_functions(item, depth + 1)


def _name_of(value: Any, namespace: dict[str, Any], outputs: dict[str, Any]) -> str | None:
    """The name sent back that binds the cell's last value itself (a cell ending in
    ``est.fit(X, y)``, which returns ``est``): the value travels as that name, so that in the
    kernel ``Out[n] is est``, as in a plain cell. Pickled apart, it was a second copy, with
    a second copy of the estimator's model that nothing of ours knew and ``Out[n]`` kept."""
    if value is None:
        return None
    return next((name for name in outputs if namespace.get(name) is value), None)


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
