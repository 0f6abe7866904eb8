"""Run a cell body in the user's namespace the way IPython runs a cell.

Not pasted into a template (which would leave our names behind and shift line numbers): the body
is compiled under IPython's cache so that tracebacks show the user's own source and line numbers,
and a final expression is evaluated separately so that it becomes the cell's result.
"""

from __future__ import annotations

import ast
import functools
from typing import Any


def run_cell_body(shell: Any, magic_line: str, body: str) -> Any:
    """Execute ``body`` (the cell below a ``%%magic`` line); return its last expression's value."""
    __tracebackhide__ = True
    source = _transform(shell, body)
    # Cache the magic line too, so line numbers and the shown source match the cell on screen.
    filename = shell.compile.cache(f"{magic_line}\n{source}", _cell_number(shell))
    tree = shell.compile.ast_parse(source, filename=filename)
    ast.increment_lineno(tree, 1)
    tree = shell.transform_ast(tree)
    last_expression = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last_expression = ast.Expression(tree.body.pop().value)
    namespace = shell.user_ns
    exec(shell.compile(tree, filename, "exec"), namespace)
    if last_expression is None:
        return None
    return eval(shell.compile(last_expression, filename, "eval"), namespace)


def _cell_number(shell: Any) -> int:
    """The running cell's own number, In[n]: IPython counts the next cell up before it runs
    this one, and keeps this one's number on the result in progress."""
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    number = getattr(running, "execution_count", None)
    return number if isinstance(number, int) else int(shell.execution_count)


@functools.lru_cache(maxsize=64)
def _transform(shell: Any, body: str) -> str:
    """IPython's input transforms are pure per text; a re-run cell needn't pay them again."""
    return shell.transform_cell(body)
