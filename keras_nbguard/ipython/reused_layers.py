"""The layers a re-run of a cell keeps from its last run: those the cell does not make anew.

A cell that makes its costly part once and reuses it on re-runs (``if "encoder" not in
globals(): encoder = ...``, or ``try: vectorizer`` / ``except NameError: ...``) has run 1's
layer beside run 2's new ones. Each run of a label restarts Keras' name counters where its last
run started them (``prepare/layer_names``), so run 2's new ``Sequential`` was named
``sequential`` again, the encoder's name, and the model joining them failed ("The name
"sequential" is used 2 times in the model"): a cell that runs bare broke on its first re-run.

Before each run, the layers the cell's names will still hold are told to ``layer_names``: the
names the cell binds anew in any case (an assignment at its top level, or in a ``with``, ``try``
or loop block there, not under an ``if``, that does not read the name's old value) let go of
theirs; the layers in all other names (one level into short lists, tuples and dicts:
``models.append(model)``) stay, and the run's new layers skip their names, as a bare re-run's
would."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from keras_nbguard.prepare import layer_names

KEEPING_CALLS = frozenset({"globals", "locals", "vars"})  # `x = globals().get("x") or ...`
# IPython's caches (Out[n], _n, _, the inputs): what they hold is released, not kept
IPYTHON_CACHES = re.compile(r"_{1,3}|_\d+|_i{1,3}\d*|_[oid]h|In|Out|exit|quit")


def hold_reused_layers(shell: Any, cell: str, label: str) -> None:
    """Tell ``layer_names`` which of ``label``'s last run's layers its next run (``cell``, the
    body under the magic line) keeps. Never raises: the worst a failure here costs is the clash
    it is there for."""
    if not layer_names.made_by(label):  # its last run named no layer: nothing to keep
        return
    try:
        rebound = rebound_names(shell.transform_cell(cell))  # (IPython's syntax made Python)
        namespace: Mapping[str, Any] = shell.user_ns
        kept = [v for k, v in list(namespace.items()) if k not in rebound and not _cache(k)]
        names = layer_names.names_in(kept)
    except Exception:
        return
    layer_names.hold(label, names)


def _cache(name: str) -> bool:
    return IPYTHON_CACHES.fullmatch(name) is not None


def rebound_names(code: str) -> set[str]:
    """The global names ``code`` binds to a new value whatever happens (nothing when it is not
    Python: every layer then counts as kept, which costs a name, never a clash)."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return set()
    return set(_bound_in(body))


def _bound_in(statements: Iterable[ast.stmt]) -> Iterator[str]:
    for statement in statements:
        if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = {name for target in targets for name in _target_names(target)}
            if not _reads_old_value(statement.value, names):
                yield from names
        elif isinstance(statement, ast.With | ast.AsyncWith):
            for item in statement.items:
                if item.optional_vars is not None:
                    yield from _target_names(item.optional_vars)
            yield from _bound_in(statement.body)
        elif isinstance(statement, ast.Try | ast.TryStar):  # the handlers may not run
            yield from _bound_in(statement.body)
            yield from _bound_in(statement.finalbody)
        elif isinstance(statement, ast.For | ast.AsyncFor | ast.While):
            # a loop runs (k-fold: `for fold in range(k): model = build()`): what an `if`
            # inside it binds, as anywhere, may not be
            if not isinstance(statement, ast.While):
                yield from _target_names(statement.target)
            yield from _bound_in(statement.body)
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield statement.name
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            for alias in statement.names:
                yield (alias.asname or alias.name).split(".")[0]
        # if, match: their bodies may not run; += and the like keep the old value


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _reads_old_value(value: ast.expr, names: set[str]) -> bool:
    for node in ast.walk(value):
        if isinstance(node, ast.Name) and (node.id in names or node.id in KEEPING_CALLS):
            return True
    return False
