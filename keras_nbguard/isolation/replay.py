"""The notebook's input history, read to replay in the new process the statements that made a
name which can't travel by value (a tf.data pipeline, an object holding one): which earlier
cell last bound it, and which of that cell's statements it needs (those binding or changing it,
and what they read that was bound earlier in the same cell and changed since). Pure ``ast``
over ``In`` / ``_ih``; the kernel runs none of it."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

# cell magics whose body is Python run in the notebook's namespace
PYTHON_MAGICS = frozenset({"kerasrun", "time", "capture"})
MAX_CELLS = 8  # cells one isolated run may replay from
MAX_STATEMENTS = 200

Point = tuple[int, int]  # (cell number, statement index): "before this statement"


@dataclass
class Statement:
    source: str  # with the cell's line numbers kept (blank lines before it)
    binds: frozenset[str]
    changes: frozenset[str]  # changed in place (x.append, x[i] = ..., model.fit)
    reads: tuple[str, ...]
    late: frozenset[str]  # read only by its functions, when called: the notebook's value now


@dataclass
class Unit:
    """Statements of one earlier cell to run in the child, in a namespace of their own; before
    statement ``i``, the names of ``binds[i]`` are set from their packets (sending.py)."""

    key: str
    cell: int
    statements: dict[int, str] = field(default_factory=dict)
    binds: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"In[{self.cell}]"


class History:
    """The notebook's cells before the one being run, as statements."""

    def __init__(self, namespace: Mapping[str, Any], current: str) -> None:
        self.namespace = namespace
        inputs = namespace.get("_ih")
        self.inputs: list[str] = list(inputs) if isinstance(inputs, list) else []
        if self.inputs and self._body(self.inputs[-1]) == current.strip():
            self.inputs.pop()  # the isolated cell itself (kept in history before it runs)

    @property
    def end(self) -> Point:
        return (len(self.inputs), 0)

    @cached_property
    def cells(self) -> dict[int, list[Statement]]:
        from keras_nbguard.isolation.names import (
            changed_in_place,
            reads_now_and_later,
            top_level_bound,
        )

        cells: dict[int, list[Statement]] = {}
        for number, text in enumerate(self.inputs):
            source = self._body(text)
            try:
                tree = ast.parse(source or "")
            except SyntaxError:
                continue
            lines = source.splitlines(keepends=True)
            statements = []
            for stmt in tree.body:
                now, later = reads_now_and_later(stmt)
                end = stmt.end_lineno or stmt.lineno
                text_of = "".join(lines[stmt.lineno - 1 : end])
                statements.append(
                    Statement(
                        source="\n" * (stmt.lineno - 1) + text_of,
                        binds=frozenset(top_level_bound(stmt)),
                        changes=frozenset(changed_in_place(stmt)),
                        reads=(*now, *later),
                        late=frozenset(later),
                    )
                )
            cells[number] = statements
        return cells

    def _body(self, text: str, depth: int = 0) -> str:
        """A cell's Python: a ``%%kerasrun`` / ``%%time`` cell's body, transformed as IPython
        does; "" for a cell magic of another language."""
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return text
        first = tree.body[0] if len(tree.body) == 1 else None
        call = first.value if isinstance(first, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_cell_magic"
            and len(call.args) == 3
            and all(isinstance(a, ast.Constant) for a in call.args)
        ):
            return text
        magic, body = call.args[0].value, call.args[2].value  # type: ignore[attr-defined]
        if magic not in PYTHON_MAGICS or depth > 3:
            return ""
        get_ipython = self.namespace.get("get_ipython")
        if callable(get_ipython):
            try:
                body = get_ipython().transform_cell(body)
            except Exception:
                return ""
        return self._body(body, depth + 1)

    def binding(self, name: str, before: Point) -> Point | None:
        """The last statement before ``before`` that binds ``name``."""
        cell, index = before
        for number in range(min(cell, len(self.inputs) - 1), 0, -1):
            statements = self.cells.get(number, [])
            stop = index if number == cell else len(statements)
            for i in range(min(stop, len(statements)) - 1, -1, -1):
                if name in statements[i].binds:
                    return (number, i)
        return None

    def changes(self, name: str, after: Point, before: Point) -> list[int]:
        """The statements of ``after``'s cell, after it and before ``before``, that change
        ``name`` in place (its adapt(), fit(), x[i] = ...)."""
        cell, start = after
        statements = self.cells.get(cell, [])
        stop = min(before[1], len(statements)) if before[0] == cell else len(statements)
        return [i for i in range(start + 1, stop) if name in statements[i].changes]

    def statement(self, point: Point) -> Statement:
        return self.cells[point[0]][point[1]]
