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
cell runs there (``reattached``, after ``run_here``). What it binds with ``global``
(``history`` in ``run_experiment``) and the plain data it changes in place (``losses``) come
back as the cell's own bindings do (``CodeEffects``)."""

from __future__ import annotations

import contextlib
import dis
import functools
import io
import linecache
import sys
import types
from collections.abc import Iterable, Mapping, MutableMapping
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


def detached_dumps(value: Any, namespace: Mapping[str, Any], code: NotebookCode) -> bytes:
    """``value`` pickled (cloudpickle), each notebook function in it detached from the notebook's
    names, to be made again on the child's; what those functions need is added to ``code``."""
    buffer = io.BytesIO()
    _detaching_pickler()(buffer, namespace, code).dump(value)
    return buffer.getvalue()


@functools.cache
def _detaching_pickler() -> type:
    import cloudpickle

    class DetachingPickler(cloudpickle.Pickler):
        def __init__(self, file: Any, namespace: Mapping[str, Any], code: NotebookCode) -> None:
            super().__init__(file)
            self.namespace, self.code = namespace, code

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.FunctionType) and obj.__globals__ is self.namespace:
                self.code.met(obj, self.namespace)
                return reattached, (_detached(obj), _source_of(obj))
            wrapped = _tf_function_of(obj)  # `@tf.function def train_step(...)`, the guide's
            if wrapped is not None and wrapped.__globals__ is self.namespace:
                self.code.met(wrapped, self.namespace)
                recipe = TfFunction(_detached(wrapped), obj, _source_of(wrapped))
                return TfFunction.made_here, (recipe,)
            return super().reducer_override(obj)

    return DetachingPickler


# -- in the child ------------------------------------------------------------------------------
_namespace_here: MutableMapping[str, Any] | None = None


def run_here(namespace: MutableMapping[str, Any]) -> None:
    """In the child, before the names sent are made: the namespace the cell runs in."""
    global _namespace_here
    _namespace_here = namespace


def reattached(
    function: types.FunctionType, source: tuple[str, list[str]] | None = None
) -> types.FunctionType:
    """A notebook function, as the child unpickles it: on the namespace the cell runs in, and
    with the source of its cell, which tracebacks and TensorFlow's autograph read there
    (cloudpickle names the file of the code it makes ``<dynamic-code>``)."""
    code = None
    if source is not None:
        filename, lines = source
        # no modification time: linecache.checkcache keeps it (as IPython's own cells)
        linecache.cache.setdefault(filename, (sum(map(len, lines)), None, lines, filename))
        code = _in_file(function.__code__, filename)
    namespace = function.__globals__ if _namespace_here is None else _namespace_here
    return _with_globals(function, namespace, code)


def _in_file(code: types.CodeType, filename: str) -> types.CodeType:
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
    """A notebook's ``tf.function`` as it travels: its Python function detached, and what it was
    made with. Pickled whole, it also took the kernel's traces along. Its cell's source goes
    too: autograph converts the function from it (``Unable to locate the source code``)."""

    def __init__(
        self,
        function: types.FunctionType,
        made_from: Any,
        source: tuple[str, list[str]] | None = None,
    ) -> None:
        self.function, self.source = function, source
        self.options = {
            "input_signature": getattr(made_from, "input_signature", None),
            "autograph": getattr(made_from, "_autograph", True),
            "jit_compile": getattr(made_from, "_jit_compile", None),
            "reduce_retracing": getattr(made_from, "_reduce_retracing", False),
        }

    def made_here(self) -> Any:
        import tensorflow as tf

        return tf.function(reattached(self.function, self.source), **self.options)


def _tf_function_of(value: Any) -> types.FunctionType | None:
    """The Python function a ``tf.function`` wraps (None for anything else)."""
    tf = sys.modules.get("tensorflow")
    experimental = getattr(getattr(tf, "types", None), "experimental", None)
    kind = getattr(experimental, "PolymorphicFunction", None)
    if kind is None or not isinstance(value, kind):
        return None
    wrapped = getattr(value, "python_function", None)
    return wrapped if isinstance(wrapped, types.FunctionType) else None


def _detached(function: types.FunctionType) -> types.FunctionType:
    """``function`` with globals of its own that hold none of the notebook's names: pickled, it
    takes none along."""
    own = {"__builtins__": function.__globals__.get("__builtins__"), "__name__": "__main__"}
    return _with_globals(function, own)


def _with_globals(
    function: types.FunctionType,
    namespace: MutableMapping[str, Any],
    code: types.CodeType | None = None,
) -> types.FunctionType:
    made = types.FunctionType(
        code or function.__code__,
        namespace,  # type: ignore[arg-type]
        function.__name__,
        function.__defaults__,
        function.__closure__,  # the same cells: `super()`'s `__class__`, filled in later
    )
    made.__kwdefaults__ = function.__kwdefaults__
    made.__dict__.update(function.__dict__)
    made.__qualname__, made.__doc__ = function.__qualname__, function.__doc__
    made.__module__, made.__annotations__ = function.__module__, function.__annotations__
    return made


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
        import cloudpickle

        rebound = [n for n, was in self.held.items() if namespace.get(n, self.ABSENT) is not was]
        in_place = [
            name
            for name, data in self.pickles.items()
            if name not in rebound
            and _plain(namespace.get(name))
            and cloudpickle.dumps(namespace[name]) != data
        ]
        written = [
            name
            for name, (array, packet) in self.arrays.items()
            if name not in rebound and namespace.get(name) is array and _written(array, packet)
        ]
        return rebound + in_place + written


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
    if depth > 4:
        return False
    if type(value) in (list, tuple, set, frozenset):
        return len(value) <= 100_000 and all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return len(value) <= 100_000 and all(
            _plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items()
        )
    return False
