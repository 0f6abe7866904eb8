"""What an isolated cell reads and binds, told from its code (``ast``, ``symtable``): the names
to send in, the names to bring back (bound at its top level, or changed in place: ``n += 1``,
``x[0] = ...``, ``a.b = ...``, ``items.append(...)``, ``model.fit(...)``, a function's ``global``),
the names it deletes. How each name travels is ``sending.py``; nothing here starts a process."""

from __future__ import annotations

import ast
import builtins
import symtable
import types
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from keras_nbguard.isolation.receiving import unpack_input
from keras_nbguard.isolation.sending import SHARED_BYTES, Sent, pack_inputs

__all__ = [
    "SHARED_BYTES",
    "AskedOutputs",
    "CellNames",
    "Sent",
    "cell_names",
    "chosen",
    "describe",
    "free_reads",
    "imports_of",
    "pack_inputs",
    "read_and_bound",
    "settle",
    "unpack_input",
]

# methods that change their object in place: the object comes back (lists, dicts, sets; Keras)
MUTATORS = frozenset(
    {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "remove", "discard"}
    | {"add", "clear", "sort", "reverse"}
    | {"fit", "adapt", "compile", "set_weights", "load_weights", "set_vocabulary"}
)


@dataclass
class CellNames:
    """``reads``: names the cell may read before it binds them (sent when the notebook has them);
    ``binds``: names to bring back; ``in_place``: read names the cell changes in place (they
    travel as a writable copy, never as the kernel's shared memory); ``deleted``: names the cell
    ``del``\\ s at its top level (gone from the notebook too when the run succeeds)."""

    reads: list[str] = field(default_factory=list)
    binds: list[str] = field(default_factory=list)
    in_place: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def cell_names(source: str) -> CellNames:
    """The names of a cell. A SyntaxError is left to the child, which reports it in the cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return CellNames()
    reads: dict[str, None] = {}
    bound: set[str] = set()  # surely bound by now (straight-line top-level code)
    changed: dict[str, None] = {}
    deleted: dict[str, None] = {}
    for stmt in tree.body:
        touched = changed_in_place(stmt)
        changed.update(dict.fromkeys(touched))
        for name in [*touched, *free_reads(stmt)]:  # n += 1 reads n
            if name not in bound:
                reads[name] = None
        for name in _deleted_names(stmt):  # del x needs x
            if name not in bound:
                reads[name] = None
            bound.discard(name)
            deleted[name] = None
        surely = _surely_bound(stmt)
        bound |= surely
        for name in surely:
            deleted.pop(name, None)  # bound again after its del
    binds = [n for n in _bound_anywhere(tree) if n in top_level_bound(tree)]
    binds += [n for n in changed if n not in binds]
    return CellNames(list(reads), binds, list(changed), list(deleted))


def read_and_bound(source: str) -> tuple[list[str], list[str]]:
    """(names the cell reads before it binds them, names to bring back)."""
    names = cell_names(source)
    return names.reads, names.binds


def free_reads(stmt: ast.stmt) -> list[str]:
    """The global names one statement reads, its functions' and comprehensions' included (not
    their parameters or locals); builtins only where the notebook shadows them (``settle``)."""
    now, later = reads_now_and_later(stmt)
    return [*now, *(n for n in later if n not in now)]


def reads_now_and_later(stmt: ast.stmt) -> tuple[list[str], list[str]]:
    """(names the statement reads as it runs, names only its functions read, when called:
    those see the notebook's value at the call, not the one the statement saw)."""
    try:
        table = symtable.symtable(ast.unparse(stmt), "<cell>", "exec")
    except (SyntaxError, ValueError):  # await at the top level: every name loaded
        return [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)], []
    now: dict[str, None] = {}
    later: dict[str, None] = {}
    todo: list[tuple[symtable.SymbolTable, bool]] = [(table, False)]
    while todo:
        scope, deferred = todo.pop(0)
        top = scope.get_type() == "module"
        for sym in scope.get_symbols():
            # global n; n = ... in a function reads n too (n += 1)
            if (sym.is_referenced() and (top or sym.is_global())) or sym.is_declared_global():
                (later if deferred else now)[sym.get_name()] = None
        for child in scope.get_children():  # a def's or lambda's body runs when called
            called = child.get_type() == "function" and child.get_name() not in _EAGER
            todo.append((child, deferred or called))
    return list(now), [n for n in later if n not in now]


_EAGER = frozenset({"listcomp", "setcomp", "dictcomp", "genexpr"})  # run as the statement runs


def changed_in_place(stmt: ast.stmt) -> list[str]:
    """Names a statement changes without rebinding them at the top level: ``n += 1``,
    ``x[i] = ...``, ``a.b = ...``, ``del x[i]``, ``x.append(...)``, ``model.fit(...)``, and the
    names its functions declare ``global``."""
    found: dict[str, None] = {}
    for node in _top_scope(stmt):
        if isinstance(node, ast.AugAssign):
            found.update(dict.fromkeys(_roots(node.target)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Delete, ast.For, ast.With)):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.For)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            else:
                targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
            for target in targets:
                for part in _unpacked(target):
                    if isinstance(part, (ast.Subscript, ast.Attribute)):
                        found.update(dict.fromkeys(_roots(part)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            found.update(dict.fromkeys(_roots(node.func.value)))
    for node in ast.walk(stmt):
        if isinstance(node, ast.Global):
            found.update(dict.fromkeys(node.names))
    return list(found)


def _top_scope(stmt: ast.stmt) -> Iterable[ast.AST]:
    """The nodes of a statement that run in the cell's own scope (not in its functions)."""
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _unpacked(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [part for elt in target.elts for part in _unpacked(elt)]
    if isinstance(target, ast.Starred):
        return _unpacked(target.value)
    return [target]


def _roots(node: ast.expr) -> list[str]:
    """``x`` of ``x``, ``x[i]``, ``x.a.b``, ``x[i].a``."""
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return [node.id] if isinstance(node, ast.Name) else []


def _deleted_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Delete):
        return [t.id for t in stmt.targets for t in _unpacked(t) if isinstance(t, ast.Name)]
    return []


def _surely_bound(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds whenever it completes (not in a branch or a loop)."""
    targets: list[ast.expr] = []
    in_body: set[str] = set()
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and (
        isinstance(stmt, ast.AugAssign) or stmt.value is not None
    ):
        targets = [stmt.target]
    elif isinstance(stmt, ast.With):
        targets = [i.optional_vars for i in stmt.items if i.optional_vars is not None]
        # its body runs whole (``with strategy.scope(): model = ...``: the model is the cell's,
        # nothing to send), unless its manager may swallow an error and skip the rest
        if not any(_may_swallow(item.context_expr) for item in stmt.items):
            in_body = _surely_bound_in(stmt.body)
    elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    bound = in_body | {p.id for t in targets for p in _unpacked(t) if isinstance(p, ast.Name)}
    for node in ast.walk(stmt):  # walrus
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
    return bound


def _surely_bound_in(body: list[ast.stmt]) -> set[str]:
    bound: set[str] = set()
    for stmt in body:
        bound = (bound - set(_deleted_names(stmt))) | _surely_bound(stmt)
    return bound


def _may_swallow(manager: ast.expr) -> bool:
    """``contextlib.suppress(...)`` or ``suppress(...)``: an error in the body ends it quietly,
    and what its later lines bind may never be bound."""
    called = manager.func if isinstance(manager, ast.Call) else manager
    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
    return name == "suppress"


def _bound_anywhere(tree: ast.AST) -> list[str]:
    stored: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stored[node.id] = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                stored[(alias.asname or alias.name).split(".")[0]] = None
    return list(stored)


def top_level_bound(tree: ast.AST) -> set[str]:
    """Names bound at the cell's top level (not inside its functions and classes)."""
    bound: set[str] = set()
    todo: list[ast.AST] = list(tree.body) if isinstance(tree, ast.Module) else [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, (ast.Load, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue  # their names are their own (a walrus in one: not followed)
        todo.extend(ast.iter_child_nodes(node))
    return bound


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


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


@dataclass
class AskedOutputs:
    """The ``--outputs`` names the cell's code neither binds nor reads (so nothing is likely to
    come back under them), and what the notebook held under each before the run, by ``id`` (kept
    alive by nothing of ours). ``never_back`` says, after the run, which of them did not come back
    (code can bind a name unseen: ``exec``, ``globals()``, a magic line), in one line."""

    before: dict[str, int | None]

    @classmethod
    def of(cls, given: str | None, source: str, namespace: Mapping[str, Any]) -> AskedOutputs:
        found = cell_names(source)
        seen = {*found.binds, *found.reads}
        unseen = [name for name in chosen(given, ()) if name not in seen]
        return cls({name: id(namespace[name]) if name in namespace else None for name in unseen})

    def never_back(self, namespace: Mapping[str, Any], sweep: Mapping[Any, Any] | None) -> str:
        """``--outputs: 'nosuch' did not come back: the cell never binds it``, or "" when each
        came back (into ``namespace``; with a ``--sweep``, into any point's names)."""
        missing = [name for name in self.before if not self._back(name, namespace, sweep)]
        if not missing:
            return ""
        which = ", ".join(repr(name) for name in missing)
        them = "it" if len(missing) == 1 else "them"
        return f"--outputs: {which} did not come back: the cell never binds {them}"

    def _back(
        self, name: str, namespace: Mapping[str, Any], sweep: Mapping[Any, Any] | None
    ) -> bool:
        if sweep is not None:
            return any(isinstance(bound, Mapping) and name in bound for bound in sweep.values())
        return name in namespace and id(namespace[name]) != self.before[name]


def settle(
    namespace: MutableMapping[str, Any],
    bound: Mapping[str, Any],
    deleted: Iterable[str] = (),
    ok: bool = True,
) -> None:
    """The names the child brought back into the notebook; the names the cell deleted (and
    did not bind again) out of it, once the run succeeded."""
    namespace.update(bound)
    if ok:
        for name in deleted:
            if name not in bound:
                namespace.pop(name, None)


def is_builtin(name: str, namespace: Mapping[str, Any]) -> bool:
    """A builtin the notebook does not shadow (the child has its own)."""
    return hasattr(builtins, name) and namespace.get(name, getattr(builtins, name)) is getattr(
        builtins, name
    )


class ModuleByName:
    """A module the isolated cell bound (``import random``), sent back by name: pickled, it
    unpickles as the notebook's own module of that name (``module_here``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return module_here, (self.name,)


def module_here(name: str) -> types.ModuleType:
    """The notebook's module ``name``, where it is imported already: importing one anew here
    (TensorFlow) would load into the kernel what the isolated run keeps out of it."""
    import sys

    module = sys.modules.get(name)
    if module is None:
        raise ImportError(f"a module the notebook has not imported: import {name} there")
    return module


def describe(value: Any) -> str:
    """What a value is, for "not sent back" lines."""
    if isinstance(value, types.ModuleType):
        return "a module: import it in the notebook"
    return type(value).__name__
