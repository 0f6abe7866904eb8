"""What a value is, as far as how it can travel to an isolated run goes: a large numpy array,
a Keras object (and the notebook's own Keras classes it is made of), a tf.data pipeline, or
something only this kernel's process can hold (a file, a lock); and the bytes Keras' and
tf.data's own formats make of them."""

from __future__ import annotations

import io
import os
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

from keras_nbguard.records.formatting import fmt_size

SHARED_BYTES = 1 << 20  # numpy arrays from this size travel through shared memory
TFDATA_BYTES = 256 << 20  # the most a tf.data pipeline may weigh, saved (it is materialized)


class Unsendable(Exception):
    """One way a value could not take, and why."""


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def shareable(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return (
        numpy is not None
        and type(value) is numpy.ndarray
        and value.nbytes >= SHARED_BYTES
        and not value.dtype.hasobject
    )


# what only means something in this process: a replay would make another one (or truncate a file)
OWN_MODULES = frozenset(
    {"_io", "io", "socket", "_socket", "ssl", "subprocess", "_thread", "threading"}
    | {"multiprocessing", "sqlite3", "select", "selectors", "asyncio", "queue"}
)
OWN_WORDS = (
    "it is this kernel's own (a file, socket, lock, thread or process): a replay would make "
    "another one"
)


def this_process_own(value: Any) -> bool:
    return (type(value).__module__ or "").split(".")[0] in OWN_MODULES


def is_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    data = getattr(tf, "data", None)
    return data is not None and isinstance(value, data.Dataset)


def keras_package(value: Any) -> str | None:
    """ "keras" or "tf_keras" for an object of Keras' own classes (or a subclass of them)."""
    return keras_package_of(type(value))


def keras_bytes(
    value: Any, namespace: Mapping[str, Any], dumps: Callable[[Any], bytes]
) -> tuple[bytes, bytes | None]:
    """Keras' own serialization (its pickling writes the Keras format: config, weights,
    vocabularies); and the classes of the notebook's it is made of that the notebook no longer
    names (those it names go once for the job: ``_Packer.classes``). ``dumps``: the pickler."""
    try:
        data = dumps(value)
    except Exception as exc:
        raise Unsendable(f"Keras could not save it ({short(exc)})") from None
    named = set(map(id, notebook_classes(namespace).values()))
    flatten = getattr(value, "_flatten_layers", None)
    parts = list(flatten()) if callable(flatten) else []
    extra = {
        base.__name__: base
        for cls in {type(part) for part in [value, *parts]}
        for base in cls.__mro__
        if base.__module__ == "__main__" and id(base) not in named
    }
    if not extra:
        return data, None
    try:
        return data, dumps(extra)
    except Exception as exc:
        raise Unsendable(f"its classes can't be pickled ({short(exc)})") from None


def notebook_classes(namespace: Mapping[str, Any]) -> dict[str, type]:
    """The Keras classes the notebook defines (a custom layer, a GAN): what Keras must be given
    to load a model made of them, in the child or back in the kernel."""
    return {
        name: obj
        for name, obj in list(namespace.items())
        if isinstance(obj, type) and obj.__module__ == "__main__" and keras_package_of(obj)
    }


def notebook_functions(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The functions the notebook defines (a TextVectorization's ``standardize``, an
    activation): Keras saves them by name."""
    return {
        name: obj
        for name, obj in list(namespace.items())
        if isinstance(obj, types.FunctionType) and obj.__module__ == "__main__"
    }


def custom_objects(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """What Keras is given to load the notebook's objects here: its classes and functions."""
    return {**notebook_functions(namespace), **notebook_classes(namespace)}


def functions_keras_names(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's functions that a Keras object of the notebook names in its config (and
    so needs, to be loaded elsewhere): only those go to the child (pickled by value)."""
    functions = notebook_functions(namespace)
    if not functions:
        return {}
    named: set[str] = set()
    for value in list(namespace.values()):
        parts = list(value)[:100] if isinstance(value, (list, tuple)) else [value]
        for part in parts:
            if keras_package(part) is not None and hasattr(part, "get_config"):
                named |= _strings(_config(part))
    return {name: functions[name] for name in named if name in functions}


def _config(obj: Any) -> Any:
    import importlib

    try:
        saving = importlib.import_module(f"{keras_package(obj)}.saving")
        return saving.serialize_keras_object(obj)
    except Exception:
        return None


def _strings(config: Any) -> set[str]:
    found: set[str] = set()
    todo = [config]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found.add(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return found


def keras_package_of(cls: type) -> str | None:
    for base in cls.__mro__:
        root = (base.__module__ or "").split(".")[0]
        if root in ("keras", "tf_keras"):
            return root
    return None


def dataset_zip(dataset: Any) -> bytes:
    """The pipeline's elements, saved by ``tf.data`` and zipped (it runs the pipeline here)."""
    import tempfile
    import zipfile

    import tensorflow as tf

    length = int(dataset.cardinality())
    if length == tf.data.INFINITE_CARDINALITY:
        raise Unsendable("it repeats forever, so it can't be saved")
    if length == tf.data.UNKNOWN_CARDINALITY:
        raise Unsendable("tf.data can't tell its length (it may never end), so it isn't saved")
    for first in dataset.take(1):
        each = sum(int(t.numpy().nbytes) for t in tf.nest.flatten(first))
        if each * length > TFDATA_BYTES:
            raise Unsendable(
                f"saved, it would be about {fmt_size(each * length)} "
                f"(over {fmt_size(TFDATA_BYTES)})"
            )
    with tempfile.TemporaryDirectory() as folder:
        dataset.save(os.path.join(folder, "data"))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
            for root, _, files in os.walk(folder):
                for file in files:
                    path = os.path.join(root, file)
                    archive.write(path, os.path.relpath(path, folder))
    return out.getvalue()
