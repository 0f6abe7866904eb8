"""A notebook's functions and classes, sent to an isolated run so that they read the names of
its process.

A function defined in a cell reads the notebook's names when it is called. Pickled on its own
(cloudpickle), it took a copy of each name it reads, made when the run began: a cell that set
``learning_rate = 0.01`` and called the notebook's ``run_experiment()`` trained at the old rate in
the isolated process (keras.io's examples keep their settings in such names) while a plain run
used the new one. So such a function goes without the names it reads (``detached``), they go as
names of their own, and in the child it is given the namespace the cell runs in (``attach``).
A class defined in a cell is the same for its methods (``dropout`` read in a block's
``__init__``): its methods are given the child's namespace there. And what they bind with
``global`` (``history`` in ``run_experiment``) comes back as the cell's own bindings do."""

from __future__ import annotations

import contextlib
import dis
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

# what a function needs of the notebook's names (a name it only binds, `global history` then
# `history = ...`, needs nothing there: it comes back instead, ``STORES``)
READS = ("LOAD_GLOBAL", "DELETE_GLOBAL")
STORES = ("STORE_GLOBAL",)
FUNCTION_PACKET = "function"  # the packet's kind: a detached function, to attach in the child


@dataclass
class NotebookCode:
    """What the notebook's functions and classes among the names sent take along."""

    reads: list[str] = field(default_factory=list)  # names they read the cell's lack, in order
    functions: set[str] = field(default_factory=set)  # the functions sent detached
    # each class whose methods are attached: (the class in its MRO, the attribute) of each
    classes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    binds: list[str] = field(default_factory=list)  # the names they bind with ``global``


def is_notebook_function(value: Any, namespace: Mapping[str, Any]) -> bool:
    """A plain function whose globals are the notebook's names (defined in one of its cells)."""
    return inspect.isfunction(value) and value.__globals__ is namespace


def notebook_code(
    names: Iterable[str], namespace: Mapping[str, Any], sendable: Callable[[str], bool]
) -> NotebookCode:
    """The notebook's functions and classes among ``names`` (the classes of its objects too), and
    the names their code reads, theirs in turn, that ``names`` lacks. Code that reads a name
    which is never sent (``_``: IPython's) keeps the copies it takes along, as before."""
    queue = list(dict.fromkeys(names))
    seen = set(queue)
    found = NotebookCode()
    while queue:
        name = queue.pop(0)
        value: Any = namespace.get(name)
        kind, methods = _own_code(value, namespace)
        functions = [function for _, _, function in methods]
        if kind is None:
            of_class = _class_name(value, namespace)  # `made = Block()`: Block's methods read
            if of_class is not None and of_class not in seen:
                seen.add(of_class)
                queue.append(of_class)
            continue
        reads = sorted({n for f in functions for n in global_names(f.__code__) if n in namespace})
        if not all(sendable(n) for n in reads):
            continue
        if kind == "function":
            found.functions.add(name)
        else:  # its own methods only: not namedtuple's __new__, whose globals are its own
            found.classes[name] = list(dict.fromkeys((c, attr) for c, attr, _ in methods))
        for bound in sorted({n for f in functions for n in global_names(f.__code__, STORES)}):
            if bound not in found.binds:
                found.binds.append(bound)
        for read in reads:
            if read not in seen:
                seen.add(read)
                found.reads.append(read)
                queue.append(read)
    return found


def global_names(code: types.CodeType, ops: tuple[str, ...] = READS) -> set[str]:
    """The global names a function's code (its inner functions' and comprehensions' too) reads
    and deletes, or binds (``ops``); not the attributes it reads (``self.model`` is no name
    ``model``)."""
    found = {i.argval for i in dis.get_instructions(code) if i.opname in ops}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= global_names(const, ops)
    return found


def _own_code(
    value: Any, namespace: Mapping[str, Any]
) -> tuple[str | None, list[tuple[str, str, types.FunctionType]]]:
    """("function", [("", "", it)]) for a notebook function; ("class", [(the class's qualified
    name, attribute, function)] for each method of it and its base classes defined in the
    notebook) for a class that has some; (None, []) for anything else."""
    if is_notebook_function(value, namespace):
        return "function", [("", "", value)]
    wrapped = _tf_function_of(value)  # `@tf.function def train_step(...)`, the guide's way
    if wrapped is not None and is_notebook_function(wrapped, namespace):
        return "function", [("", "", wrapped)]
    if isinstance(value, type):
        methods = [
            (c.__qualname__, attr, f)
            for c in value.__mro__
            for attr, f in _methods(c)
            if is_notebook_function(f, namespace)
        ]
        if methods:
            return "class", methods
    return None, []


def _class_name(value: Any, namespace: Mapping[str, Any]) -> str | None:
    """The notebook's name of ``value``'s class, when the notebook defined it under that name."""
    cls = type(value)
    if cls.__module__ != "__main__" or namespace.get(cls.__name__) is not cls:
        return None
    return cls.__name__


def _methods(cls: type) -> Iterator[tuple[str, types.FunctionType]]:
    """The functions behind a class's own attributes: methods, static and class methods, and a
    property's getter, setter and deleter."""
    for attr, member in list(vars(cls).items()):
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        is_property = isinstance(member, property)
        for part in (member.fget, member.fset, member.fdel) if is_property else (member,):
            if isinstance(part, types.FunctionType):
                yield attr, part


def _tf_function_of(value: Any) -> types.FunctionType | None:
    """The Python function a ``tf.function`` wraps (None for anything else)."""
    tf = sys.modules.get("tensorflow")
    kind = getattr(
        getattr(getattr(tf, "types", None), "experimental", None), "PolymorphicFunction", None
    )
    if kind is None or not isinstance(value, kind):
        return None
    wrapped = getattr(value, "python_function", None)
    return wrapped if isinstance(wrapped, types.FunctionType) else None


class TfFunction:
    """A notebook's ``tf.function`` as it travels: its Python function detached, and what it was
    made with; in the child, made again on the cell's namespace. Pickled whole, it took copies
    of what it reads: the guide's ``train_step`` updated its own copy of ``train_acc_metric``
    while the cell read the one sent (accuracy 0.0 every epoch, isolated)."""

    def __init__(self, function: types.FunctionType, made_from: Any) -> None:
        self.function = function
        self.options = {
            "input_signature": getattr(made_from, "input_signature", None),
            "autograph": getattr(made_from, "_autograph", True),
            "jit_compile": getattr(made_from, "_jit_compile", None),
            "reduce_retracing": getattr(made_from, "_reduce_retracing", False),
        }

    def made(self, namespace: MutableMapping[str, Any]) -> Any:
        import tensorflow as tf

        return tf.function(_with_globals(self.function, namespace), **self.options)


def detached(function: Any) -> Any:
    """``function`` (or a ``tf.function``'s) with globals of its own that hold none of the
    notebook's names: pickled, it takes none along."""
    wrapped = _tf_function_of(function)
    if wrapped is not None:
        return TfFunction(detached(wrapped), function)
    own = {"__builtins__": function.__globals__.get("__builtins__"), "__name__": "__main__"}
    return _with_globals(function, own)


def attach(
    inputs: Mapping[str, Any],
    namespace: MutableMapping[str, Any],
    classes: Mapping[str, Iterable[Iterable[str]]] | None = None,
) -> None:
    """In the child: each detached function among the names made from ``inputs``, and the
    methods ``classes`` names (``NotebookCode.classes``), read ``namespace``, the one the cell
    runs in, as they read the notebook's in the kernel."""
    for name, packet in inputs.items():
        if isinstance(packet, tuple) and packet[:1] == (FUNCTION_PACKET,):
            sent = namespace[name]
            made = isinstance(sent, TfFunction)
            namespace[name] = sent.made(namespace) if made else _with_globals(sent, namespace)
    for name, methods in (classes or {}).items():
        cls = namespace.get(name)
        if not isinstance(cls, type):
            continue
        # the notebook's classes were pickled by value: the class itself, which its objects
        # sent are of too (cloudpickle makes one class of each in a process)
        mine = {c.__qualname__: c for c in cls.__mro__ if c.__module__ == "__main__"}
        for qualname, attr in methods:
            owner = mine.get(qualname)
            if owner is not None and attr in vars(owner):
                _attach_method(owner, attr, namespace)


def _attach_method(cls: type, attr: str, namespace: MutableMapping[str, Any]) -> None:
    with contextlib.suppress(AttributeError, TypeError):  # a metaclass may forbid it: copies
        setattr(cls, attr, _rebound(vars(cls)[attr], namespace))


def _rebound(member: Any, namespace: MutableMapping[str, Any]) -> Any:
    if isinstance(member, types.FunctionType):
        return member if member.__globals__ is namespace else _with_globals(member, namespace)
    if isinstance(member, (staticmethod, classmethod)):
        return type(member)(_rebound(member.__func__, namespace))
    if type(member) is property:  # a subclass of it may hold more: left as it is
        fget, fset, fdel = (
            _rebound(f, namespace) if f is not None else None
            for f in (member.fget, member.fset, member.fdel)
        )
        return property(fget, fset, fdel, member.__doc__)
    return member


def _with_globals(
    function: types.FunctionType, namespace: MutableMapping[str, Any]
) -> types.FunctionType:
    made = types.FunctionType(
        function.__code__,
        namespace,  # type: ignore[arg-type]
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    made.__kwdefaults__ = function.__kwdefaults__
    made.__dict__.update(function.__dict__)
    made.__qualname__, made.__doc__ = function.__qualname__, function.__doc__
    made.__module__, made.__annotations__ = function.__module__, function.__annotations__
    return made
