"""What an isolated cell reads and binds, told from its code (``ast``), and how names travel:
by value with cloudpickle (functions and classes defined in the notebook included), modules by
name. Nothing here starts a process."""

from __future__ import annotations

import ast
import builtins
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


def chosen(given: str | None, default: Iterable[str]) -> list[str]:
    """``--inputs a,b`` / ``--outputs a,b`` when given, else ``default``."""
    if given is None:
        return list(default)
    return [name.strip() for name in given.split(",") if name.strip()]


def pack_inputs(
    names: Iterable[str], namespace: Mapping[str, Any], explicit: bool
) -> dict[str, bytes]:
    """Each name the user's namespace has, pickled on its own so that a failure names it.
    ``ValueError`` (a UsageError for the magic) for one that can't travel: before anything
    starts. A name given with ``--inputs`` that does not exist is an error too."""
    import cloudpickle

    packed = {}
    for name in names:
        if name not in namespace:
            if explicit:
                raise ValueError(f"--inputs: {name!r} is not defined in the notebook")
            continue  # read before it is bound in the cell, or a name of the child's own
        value = namespace[name]
        if name.startswith("_") and not explicit:
            continue  # IPython's _, __, _i3: not the user's
        try:
            packed[name] = cloudpickle.dumps(value)
        except Exception as exc:
            raise ValueError(
                f"--isolate can't send {name!r} ({type(value).__name__}) to the new process: "
                f"{exc}. Make it inside the cell, or leave it out with --inputs"
            ) from None
    return packed


def describe(value: Any) -> str:
    """What a value is, for "not sent back" lines."""
    if isinstance(value, types.ModuleType):
        return "a module: import it in the notebook"
    return type(value).__name__
