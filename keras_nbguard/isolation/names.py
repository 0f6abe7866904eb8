"""What an isolated cell reads and binds, told from its code (``ast``), and how names travel:
by value with cloudpickle (functions and classes defined in the notebook included), modules by
name. Nothing here starts a process."""

from __future__ import annotations

import ast
import builtins
import contextlib
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any


def read_and_bound(source: str) -> tuple[list[str], list[str]]:
    """(names the cell reads before it binds them, names it binds at its top level), each in the
    order they first appear. A SyntaxError is left to the child, which reports it in the cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], []
    loaded: dict[str, None] = {}
    stored: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored)[node.id] = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                stored[(alias.asname or alias.name).split(".")[0]] = None
    top = _top_level_bound(tree)
    builtin = set(dir(builtins))
    # a name read anywhere may be read before it is bound (x = x + 1): send it if it exists
    reads = [n for n in loaded if n not in builtin]
    return reads, [n for n in stored if n in top]


def _top_level_bound(tree: ast.Module) -> set[str]:
    """Names bound at the cell's top level (not inside its functions and classes)."""
    bound: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return bound


def imports_of(source: str) -> list[str]:
    """The modules a cell imports at its top level (what a pre-started process loads)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: dict[str, None] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(dict.fromkeys(alias.name for alias in node.names))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found[node.module] = None
    return list(found)


def chosen(given: str | None, default: Iterable[str]) -> list[str]:
    """``--inputs a,b`` / ``--outputs a,b`` when given, else ``default``."""
    if given is None:
        return list(default)
    return [name.strip() for name in given.split(",") if name.strip()]


SHARED_BYTES = 1 << 20  # numpy arrays from this size travel through shared memory


def pack_inputs(
    names: Iterable[str],
    namespace: Mapping[str, Any],
    explicit: bool,
    shared: list[Any] | None,
) -> dict[str, Any]:
    """Each name the user's namespace has, pickled on its own so that a failure names it; a
    large numpy array is copied once into shared memory instead (the child maps it, no pickle
    and no pipe), its segment appended to ``shared`` for the caller to unlink after the run
    (``shared`` None: children elsewhere, a Ray cluster; everything is pickled).
    ``ValueError`` (a UsageError for the magic) for one that can't travel, before anything
    starts; so is a name given with ``--inputs`` that does not exist."""
    import cloudpickle

    packed: dict[str, Any] = {}
    for name in names:
        if name not in namespace:
            if explicit:
                raise ValueError(f"--inputs: {name!r} is not defined in the notebook")
            continue  # read before it is bound in the cell, or a name of the child's own
        value = namespace[name]
        if name.startswith("_") and not explicit:
            continue  # IPython's _, __, _i3: not the user's
        if shared is not None and _shareable(value):
            packed[name] = _to_shared_memory(value, shared)
            continue
        try:
            packed[name] = cloudpickle.dumps(value)
        except Exception as exc:
            raise ValueError(
                f"--isolate can't send {name!r} ({type(value).__name__}) to the new process: "
                f"{exc}. Make it inside the cell, or leave it out with --inputs"
            ) from None
    return packed


def _shareable(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return (
        numpy is not None
        and type(value) is numpy.ndarray
        and value.nbytes >= SHARED_BYTES
        and not value.dtype.hasobject
    )


def _to_shared_memory(array: Any, shared: list[Any]) -> tuple[str, str, tuple[int, ...], str]:
    from multiprocessing import shared_memory

    import numpy

    segment = shared_memory.SharedMemory(create=True, size=array.nbytes)
    shared.append(segment)
    numpy.ndarray(array.shape, array.dtype, buffer=segment.buf)[...] = array
    return ("shm", segment.name, array.shape, array.dtype.str)


def unpack_input(sent: Any, attached: list[Any]) -> Any:
    """In the child: a pickled value, or an array mapped from the kernel's shared memory
    (read-only: it is the kernel's copy for this run)."""
    if isinstance(sent, tuple) and sent[0] == "shm":
        from multiprocessing import resource_tracker, shared_memory

        import numpy

        segment = shared_memory.SharedMemory(name=sent[1])
        # before Python 3.13 attaching registers the segment too, and this process's exit would
        # unlink it under the kernel (and warn of a leak): the kernel owns it
        with contextlib.suppress(Exception):
            resource_tracker.unregister(segment._name, "shared_memory")  # type: ignore[attr-defined]
        attached.append(segment)
        array = numpy.ndarray(sent[2], numpy.dtype(sent[3]), buffer=segment.buf)
        array.flags.writeable = False
        return array
    import cloudpickle

    return cloudpickle.loads(sent)


def describe(value: Any) -> str:
    """What a value is, for "not sent back" lines."""
    if isinstance(value, types.ModuleType):
        return "a module: import it in the notebook"
    return type(value).__name__
