"""The child's side of ``sending.py``: each packet made into the value it stands for, once per
key (a value sent under two names, or read by a replayed statement too, is one object here):
an array mapped from the kernel (``shm.py``), a Keras object loaded with the notebook's classes,
a saved tf.data pipeline, or the namespace an earlier cell's statements leave, replayed."""

from __future__ import annotations

import contextlib
import io
import linecache
import os
from collections.abc import Iterator
from typing import Any

from keras_nbguard.isolation.loaded_weights import optimizer_unbuilt_again

_MEMO: dict[str, Any] = {}  # what was already made, by key


class InputFailed(Exception):
    """A name could not be made here (a replayed statement failed, a class missing): said in
    the user's terms, in the cell; nothing of the cell ran."""


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def _span_start(source: str) -> int:
    return len(source) - len(source.lstrip("\n")) + 1


def unpack_input(sent: Any, attached: list[Any]) -> Any:
    """In the child: the value a packet stands for, made once per key (an array mapped from the
    kernel's shared memory is read-only: it is the kernel's copy for this run).
    ``InputFailed`` with what went wrong, in the user's terms."""
    import cloudpickle

    if isinstance(sent, bytes):  # a plain pickle
        return cloudpickle.loads(sent)
    key = sent[1]
    if key not in _MEMO:
        if sent[0] == "replay":
            made = _replayed(sent[3], attached)
            if sent[2] not in made:
                raise InputFailed(
                    f"--isolate: replaying {sent[3].label} did not bind {sent[2]!r} "
                    "in the new process"
                )
            value = made[sent[2]]
            if sent[4] is not None and type(value).__name__ != sent[4]:
                raise InputFailed(
                    f"--isolate: replaying {sent[3].label} made {sent[2]!r} a "
                    f"{type(value).__name__}, but the notebook's is a {sent[4]}: it did not "
                    "come from that cell (a %reset since, or a cell run outside the history). "
                    "Make it inside the cell, or leave it out with --inputs"
                )
            _MEMO[key] = value
        else:
            _MEMO[key] = _made(sent, attached)
    return _MEMO[key]


def _made(sent: tuple[Any, ...], attached: list[Any]) -> Any:
    import cloudpickle

    kind = sent[0]
    if kind in ("shm", "file"):  # shared memory, or a temporary file when it had no room
        from keras_nbguard.isolation.shm import unpack

        return unpack(sent, attached)
    if kind == "tfdata":
        return _dataset_from_zip(sent[2])
    if kind == "class":
        return _classes(sent[2])[sent[3]]
    if kind == "keras":
        shared, extra = sent[4]
        classes = {**_classes(shared), **(cloudpickle.loads(extra) if extra else {})}
        try:
            with keras_scope(classes):
                value = _built(cloudpickle.loads(sent[3]))
            optimizer_unbuilt_again(value)  # built by the load, never by the kernel's model
            return value
        except Exception as exc:
            raise InputFailed(
                f"--isolate: Keras could not load the notebook's {sent[5]} in the new process: "
                f"{_short(exc)}"
            ) from None
    with keras_scope(_classes(sent[3] if len(sent) > 3 else None)):
        return cloudpickle.loads(sent[2])


def _built(value: Any) -> Any:
    """A loaded, adapted ``FeatureSpace`` builds its encoders at its first call; a replayed
    ``train_ds.map(lambda x, y: (feature_space(x), y))`` made that call in tf.data's graph,
    where Keras 3.15's ``CategoryEncoding`` fails (``OperatorNotAllowedInGraphError``: keras.io's
    structured data example never ran with ``--isolate``). In the kernel the user's own calls had
    built it; here it is built now, eagerly (if that fails, the value still arrives as it was)."""
    build = getattr(value, "_check_if_built", None)
    if getattr(value, "_is_adapted", False) and callable(build):
        with contextlib.suppress(Exception):
            build()
    return value


def _classes(ref: tuple[str, bytes] | None) -> dict[str, Any]:
    """The notebook's Keras classes, made once for the job."""
    if ref is None:
        return {}
    if ref[0] not in _MEMO:
        import cloudpickle

        _MEMO[ref[0]] = cloudpickle.loads(ref[1])
    return _MEMO[ref[0]]


# what Keras says while loading a model that the transport saved, never the user: a compiled,
# never fit model's optimizer has no slots yet in its file; a custom layer without a build()
# (keras.io's PositionalEmbedding) is built by the model's call, right after Keras warns
TRANSPORT_WARNINGS = ("Skipping variable loading for optimizer", r"`build\(\)` was called on layer")


@contextlib.contextmanager
def keras_scope(classes: dict[str, Any]) -> Iterator[None]:
    """Keras (3, or 2: tf_keras) finds ``classes`` by name while loading (a custom layer, a
    GAN): the notebook's classes, importable nowhere else. The warnings of a load the user never
    asked for are kept out."""
    import sys
    import warnings

    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        for message in TRANSPORT_WARNINGS:
            warnings.filterwarnings("ignore", message)
        if classes:
            for package in ("keras", "tf_keras"):
                module = sys.modules.get(package)
                scope = getattr(getattr(module, "utils", None), "custom_object_scope", None)
                if scope is not None:
                    stack.enter_context(scope(classes))
        yield


def _replayed(unit: Any, attached: list[Any]) -> dict[str, Any]:
    """The namespace ``unit``'s statements leave, run once (their prints are not shown)."""
    import builtins

    key = unit.key
    if key in _MEMO:
        return _MEMO[key]
    scratch: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    with contextlib.suppress(Exception):
        from IPython import get_ipython

        scratch["get_ipython"] = get_ipython
    _MEMO[key] = scratch
    for index in sorted(unit.statements):
        for name, packet in unit.binds.get(index, {}).items():
            scratch[name] = unpack_input(packet, attached)
        source = unit.statements[index]
        where = f"<{unit.label} replayed, line {_span_start(source)}>"
        # its lines where inspect finds them: tf.function / autograph read the source
        linecache.cache[where] = (len(source), None, source.splitlines(True), where)
        try:
            code = compile(source, where, "exec")
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                exec(code, scratch)  # the notebook's own statement, as it ran there
        except Exception as exc:
            line = _span_start(source)
            raise InputFailed(
                f"--isolate: replaying {unit.label} line {line} "
                f"({source.strip().splitlines()[0][:60]}) in the new process failed: "
                f"{_short(exc)}"
            ) from None
    return scratch


def _dataset_from_zip(data: bytes) -> Any:
    import atexit
    import shutil
    import tempfile
    import zipfile

    import tensorflow as tf

    folder = tempfile.mkdtemp(prefix="nbguard-data-")
    atexit.register(shutil.rmtree, folder, True)  # read lazily: kept while the child lives
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(folder)
    return tf.data.Dataset.load(os.path.join(folder, "data"))
