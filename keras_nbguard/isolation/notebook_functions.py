"""A notebook's functions, sent to an isolated run so that they read the names of its process.

A function defined in a cell reads the notebook's names when it is called. Pickled on its own
(cloudpickle), it took a copy of each name it reads, made when the run began: a cell that set
``learning_rate = 0.01`` and called the notebook's ``run_experiment()`` trained at the old rate in
the isolated process (keras.io's examples keep their settings in such names) while a plain run
used the new one. So such a function goes without the names it reads (``detached``), they go as
names of their own, and in the child it is given the namespace the cell runs in (``attach``)."""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

GLOBAL_OPS = ("LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL")
FUNCTION_PACKET = "function"  # the packet's kind: a detached function, to attach in the child


def is_notebook_function(value: Any, namespace: Mapping[str, Any]) -> bool:
    """A plain function whose globals are the notebook's names (defined in one of its cells)."""
    return inspect.isfunction(value) and value.__globals__ is namespace


def functions_reads(
    names: Iterable[str], namespace: Mapping[str, Any], sendable: Callable[[str], bool]
) -> tuple[list[str], set[str]]:
    """(the notebook's names the functions among ``names`` read, theirs in turn, that ``names``
    lacks, in the order they are met; the functions to send detached). A function that reads
    a name which is never sent (``_``: IPython's) keeps the copies it takes along, as before."""
    queue = list(dict.fromkeys(names))
    seen = set(queue)
    added: list[str] = []
    detached: set[str] = set()
    while queue:
        name = queue.pop(0)
        value: Any = namespace.get(name)
        if not is_notebook_function(value, namespace):
            continue
        reads = sorted(n for n in global_names(value.__code__) if n in namespace)
        if not all(sendable(n) for n in reads):
            continue
        detached.add(name)
        for read in reads:
            if read not in seen:
                seen.add(read)
                added.append(read)
                queue.append(read)
    return added, detached


def global_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (its inner functions' and comprehensions' too) reads,
    binds or deletes; not the attributes it reads (``self.model`` is no name ``model``)."""
    found = {i.argval for i in dis.get_instructions(code) if i.opname in GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= global_names(const)
    return found


def detached(function: types.FunctionType) -> types.FunctionType:
    """``function`` with globals of its own that hold none of the notebook's names: pickled, it
    takes none along."""
    own = {"__builtins__": function.__globals__.get("__builtins__"), "__name__": "__main__"}
    return _with_globals(function, own)


def attach(inputs: Mapping[str, Any], namespace: MutableMapping[str, Any]) -> None:
    """In the child: each detached function among the names made from ``inputs`` reads
    ``namespace``, the one the cell runs in, as it read the notebook's in the kernel."""
    for name, packet in inputs.items():
        if isinstance(packet, tuple) and packet[:1] == (FUNCTION_PACKET,):
            namespace[name] = _with_globals(namespace[name], namespace)


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
