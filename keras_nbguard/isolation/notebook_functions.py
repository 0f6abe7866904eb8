"""The notebook's functions, wherever a value sent to an isolated run holds them, read the names
of that run's process.

A function defined in a cell reads the notebook's names when it is called. Pickled as it is
(cloudpickle), it took a copy of each name it reads, made when the run began: a cell that set
``learning_rate = 0.01`` and called the notebook's ``run_experiment()`` trained at the old rate in
the isolated process (keras.io's examples keep their settings in such names), a block whose
``__init__`` reads ``dropout`` was built with the old one, a ``LambdaCallback`` appended the
losses to its own copy of the list the cell printed, a ``tf.function`` updated its own copy of
the metric. So every notebook function met while a value is pickled (the value itself, a method
of its class, a callback's ``on_epoch_end``, a ``tf.function``'s Python function) goes without
the notebook's names (``detached_dumps``); the names it reads go as names of their own
(``NotebookCode.reads``), and as the child unpickles it, it is made again on the namespace the
cell runs there (``made_here``, after ``run_here``). What it binds with ``global``
(``history`` in ``run_experiment``) and the plain data it changes in place (``losses``) come
back as the cell's own bindings do (``CodeEffects``)."""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import io
import linecache
import sys
import types
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

# what a function needs of the notebook's names (a name it only binds, `global history` then
# `history = ...`, needs nothing there: it comes back instead, ``STORES``)
READS = ("LOAD_GLOBAL", "DELETE_GLOBAL")
STORES = ("STORE_GLOBAL",)


@dataclass
class NotebookCode:
    """What the notebook's functions met in the values sent need of its names, in the order
    they were met."""

    reads: list[str] = field(default_factory=list)
    binds: list[str] = field(default_factory=list)  # with ``global``

    def met(self, function: types.FunctionType, namespace: Mapping[str, Any]) -> None:
        """Note what ``function`` reads of ``namespace`` and binds with ``global``."""
        for name in sorted(global_names(function.__code__)):
            if name in namespace and name not in self.reads:
                self.reads.append(name)
        for name in sorted(global_names(function.__code__, STORES)):
            if name not in self.binds:
                self.binds.append(name)


def global_names(code: types.CodeType, ops: tuple[str, ...] = READS) -> set[str]:
    """The global names a function's code (its inner functions' and comprehensions' too) reads
    and deletes, or binds (``ops``); not the attributes it reads (``self.model`` is no name
    ``model``)."""
    found = {i.argval for i in dis.get_instructions(code) if i.opname in ops}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= global_names(const, ops)
    return found


def detached_dumps(
    value: Any,
    namespace: Mapping[str, Any],
    code: NotebookCode,
    sendable: Callable[[str], bool] = lambda name: True,
) -> bytes:
    """``value`` pickled (cloudpickle), each notebook function in it detached from the notebook's
    names, to be made again on the child's; what those functions need is added to ``code``. A
    function that reads a name that is never sent (``sendable``: IPython's own, a display
    handle) keeps the copies it takes along, as before."""
    buffer = io.BytesIO()
    _detaching_pickler()(buffer, namespace, code, sendable).dump(value)
    return buffer.getvalue()


@functools.cache
def _detaching_pickler() -> type:
    import cloudpickle

    class DetachingPickler(cloudpickle.Pickler):
        def __init__(
            self,
            file: Any,
            namespace: Mapping[str, Any],
            code: NotebookCode,
            sendable: Callable[[str], bool],
        ) -> None:
            super().__init__(file)
            self.namespace, self.code, self.sendable = namespace, code, sendable

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.FunctionType) and self._detachable(obj):
                self.code.met(obj, self.namespace)
                return _function_reduce(obj)
            wrapped = _tf_function_of(obj)  # `@tf.function def train_step(...)`, the guide's
            if wrapped is not None and self._detachable(wrapped):
                return TfFunction.made_here, (TfFunction(wrapped, obj),)  # wrapped: as above
            return super().reducer_override(obj)

        def _detachable(self, function: types.FunctionType) -> bool:
            if function.__globals__ is not self.namespace:
                return False
            reads = global_names(function.__code__)
            return all(self.sendable(name) for name in reads if name in self.namespace)

    return DetachingPickler


def _function_reduce(function: types.FunctionType) -> tuple[Any, ...]:
    """Made in the child as cloudpickle makes a function (made first, its state set after, so
    one that reaches itself, a decorator's ``wrapper.calls``, pickles), but on the child's
    names, none of the notebook's taken along, and with its cell's source."""
    cells = function.__closure__
    empty = None if cells is None else tuple(types.CellType() for _ in cells)
    slots = {
        "__name__": function.__name__,
        "__qualname__": function.__qualname__,
        "__annotations__": function.__annotations__,
        "__kwdefaults__": function.__kwdefaults__,
        "__defaults__": function.__defaults__,
        "__module__": function.__module__,
        "__doc__": function.__doc__,
    }
    state = (dict(function.__dict__), slots, cells)
    return (
        made_here,
        (function.__code__, empty, _source_of(function)),
        state,
        None,
        None,
        _set_state,
    )


# -- in the child ------------------------------------------------------------------------------
_namespace_here: MutableMapping[str, Any] | None = None


def run_here(namespace: MutableMapping[str, Any]) -> None:
    """In the child, before the names sent are made: the namespace the cell runs in."""
    global _namespace_here
    _namespace_here = namespace


def made_here(
    code: types.CodeType,
    closure: tuple[Any, ...] | None,
    source: tuple[str, list[str]] | None,
) -> types.FunctionType:
    """A notebook function, as the child unpickles it: on the namespace the cell runs in, and
    with the source of its cell, which tracebacks and TensorFlow's autograph read there."""
    if source is not None:
        filename, lines = source
        # no modification time: linecache.checkcache keeps it (as IPython's own cells)
        linecache.cache.setdefault(filename, (sum(map(len, lines)), None, lines, filename))
        code = _in_file(code, filename)
    namespace = _namespace_here if _namespace_here is not None else {"__builtins__": builtins}
    return types.FunctionType(code, namespace, None, None, closure)  # type: ignore[arg-type]


def _set_state(function: types.FunctionType, state: tuple[Any, ...]) -> None:
    attributes, slots, cells = state
    function.__dict__.update(attributes)
    for mine, sent in zip(function.__closure__ or (), cells or (), strict=True):
        with contextlib.suppress(ValueError):  # a cell still empty in the notebook too
            mine.cell_contents = sent.cell_contents
    for name, value in slots.items():
        setattr(function, name, value)


def _in_file(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` (its inner functions' too) named after the file it was written in: cloudpickle
    names it ``<dynamic-code>``."""
    consts = tuple(
        _in_file(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


def _source_of(function: types.FunctionType) -> tuple[str, list[str]] | None:
    """The cell a notebook function was defined in, as IPython keeps it (filename, lines)."""
    filename = function.__code__.co_filename
    lines = linecache.getlines(filename)
    return (filename, lines) if lines else None


class TfFunction:
    """A notebook's ``tf.function`` as it travels: its Python function (made on the child's
    names as it is unpickled), and what it was made with. Pickled whole, it took copies of what
    it reads, and the kernel's traces along."""

    def __init__(self, function: types.FunctionType, made_from: Any) -> None:
        self.function = function
        self.options = {
            "input_signature": getattr(made_from, "input_signature", None),
            "autograph": getattr(made_from, "_autograph", True),
            "jit_compile": getattr(made_from, "_jit_compile", None),
            "reduce_retracing": getattr(made_from, "_reduce_retracing", False),
            "experimental_autograph_options": getattr(
                made_from, "_experimental_autograph_options", None
            ),
            # experimental_implements is one of them there (`_implements`)
            "experimental_attributes": dict(getattr(made_from, "_attributes", None) or {}) or None,
        }

    def made_here(self) -> Any:
        import tensorflow as tf

        return tf.function(self.function, **self.options)


def _tf_function_of(value: Any) -> types.FunctionType | None:
    """The Python function a ``tf.function`` wraps (None for anything else)."""
    tf = sys.modules.get("tensorflow")
    experimental = getattr(getattr(tf, "types", None), "experimental", None)
    kind = getattr(experimental, "PolymorphicFunction", None)
    if kind is None or not isinstance(value, kind):
        return None
    wrapped = getattr(value, "python_function", None)
    return wrapped if isinstance(wrapped, types.FunctionType) else None


class CodeEffects:
    """In the child: what the notebook's functions did to the notebook's names during the cell,
    which a plain run leaves in the notebook: a name bound with ``global`` (``history``), plain
    data read and changed in place (``losses.append(...)`` in a callback), and an array mapped
    copy-on-write that they wrote into (the kernel's segment still holds what was sent)."""

    ABSENT = object()
    MAX_COMPARED = 1 << 20  # bytes of a pickle compared after the cell; larger ones stay

    def __init__(
        self, namespace: Mapping[str, Any], binds: Iterable[str], reads: Mapping[str, Any]
    ) -> None:
        self.held = {name: namespace.get(name, self.ABSENT) for name in binds}
        self.pickles = {  # the bytes sent of each plain value a function reads
            name: packet[2]
            for name, packet in reads.items()
            if packet[:1] == ("value",)
            and len(packet[2]) <= self.MAX_COMPARED
            and _plain(namespace.get(name))
        }
        self.arrays = {  # the array made of each writable segment, and the segment's packet
            name: (namespace.get(name), packet)
            for name, packet in reads.items()
            if packet[:1] in (("shm",), ("file",)) and len(packet) > 5 and packet[5]
        }

    def changed(self, namespace: Mapping[str, Any]) -> list[str]:
        rebound = [n for n, was in self.held.items() if namespace.get(n, self.ABSENT) is not was]
        in_place = [
            name
            for name, data in self.pickles.items()
            if name not in rebound
            and _plain(namespace.get(name))
            and _changed(namespace[name], data)
        ]
        written = [
            name
            for name, (array, packet) in self.arrays.items()
            if name not in rebound and namespace.get(name) is array and _written(array, packet)
        ]
        return rebound + in_place + written


def _changed(value: Any, sent: bytes) -> bool:
    """Plain data against the pickle it came as: a set of strings pickles in another order in
    another process (its hash seed), so equal values are unchanged whatever the bytes."""
    import pickle

    import cloudpickle

    if cloudpickle.dumps(value) == sent:
        return False
    try:
        return bool(pickle.loads(sent) != value)
    except Exception:
        return True


def _written(array: Any, packet: tuple[Any, ...]) -> bool:
    """Whether ``array``, mapped copy-on-write, differs from the segment it was mapped from."""
    from keras_nbguard.isolation.shm import unpack

    attached: list[Any] = []
    try:
        return _differs(array, unpack(packet[:5], attached))  # the kernel's bytes, read-only
    finally:
        for mapped in attached:
            with contextlib.suppress(AttributeError, BufferError):
                mapped.close()


def _differs(mine: Any, sent: Any) -> bool:
    """Byte for byte (a NaN equals itself here), a slice at a time."""
    import numpy

    ours, theirs = mine.reshape(-1).view(numpy.uint8), sent.reshape(-1).view(numpy.uint8)
    step = 16 << 20
    return any(
        not numpy.array_equal(ours[i : i + step], theirs[i : i + step])
        for i in range(0, ours.size, step)
    )


def _plain(value: Any, depth: int = 0) -> bool:
    """Data of Python's own types only (no function, no object of a class): its pickle says
    whether it changed, and the kernel takes it back as it is."""
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return True
    numpy = sys.modules.get("numpy")  # `accs.append(np.mean(...))`: a NumPy scalar
    if numpy is not None and isinstance(value, numpy.generic) and not value.dtype.hasobject:
        return True
    if depth > 4:
        return False
    if type(value) in (list, tuple, set, frozenset):
        return len(value) <= 100_000 and all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return len(value) <= 100_000 and all(
            _plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items()
        )
    return False
