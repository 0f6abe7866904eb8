"""Run a cell body in the user's namespace the way IPython runs a cell.

Not pasted into a template (which would leave our names behind and shift line numbers): the body
is compiled under IPython's cache so that tracebacks show the user's own source and line numbers,
and a final expression is evaluated separately so that it becomes the cell's result.

A cell magic's body is a string to IPython, so two things a plain cell has need help: top-level
``await`` (IPython only awaits what the cell's own code awaits) and syntax errors (raised from
inside the magic, they would show its frames). ``KerasrunCells`` looks at a ``%%kerasrun`` cell
before IPython does and hands both back to IPython: an awaiting body becomes one awaited call,
a body that does not compile becomes a plain cell, so the error reads as in any other cell.
"""

from __future__ import annotations

import ast
import functools
import inspect
from dataclasses import dataclass
from types import CodeType
from typing import Any

from IPython.core.displayhook import DisplayHook

from keras_nbguard.ipython.stable_code import CodeCache, compiled_from, point_traceback_at
from keras_nbguard.run.frame_room import call_with_room

MAGIC = "%%kerasrun"
AWAIT_FLAG = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_BODIES = CodeCache()


@dataclass(frozen=True)
class _Compiled:
    filename: str
    body: CodeType
    last_expression: CodeType | None


def run_cell_body(shell: Any, magic_line: str, body: str) -> Any:
    """Execute ``body`` (the cell below a ``%%magic`` line); return its last expression's value.
    It runs with room on Python's frame stack (run/frame_room.py): a fit that traces its train
    step no longer maps and unmaps the same chunk of frames thousands of times."""
    __tracebackhide__ = True
    code = _compile(shell, magic_line, body, flags=0)
    return call_with_room(_execute, code, shell.user_ns)


def _execute(code: _Compiled, namespace: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    exec(code.body, namespace)
    if code.last_expression is None:
        return None
    return eval(code.last_expression, namespace)


async def run_cell_body_async(shell: Any, magic_line: str, body: str) -> Any:
    """``run_cell_body`` for a body with top-level ``await``: awaited on the kernel's loop."""
    __tracebackhide__ = True
    code = _compile(shell, magic_line, body, flags=AWAIT_FLAG)
    result = eval(code.body, shell.user_ns)
    if code.body.co_flags & inspect.CO_COROUTINE:
        await result
    if code.last_expression is None:
        return None
    value = eval(code.last_expression, shell.user_ns)
    if code.last_expression.co_flags & inspect.CO_COROUTINE:  # `await x` as the last line
        value = await value
    return value


def _compile(shell: Any, magic_line: str, body: str, flags: int) -> _Compiled:
    source = _transform(shell, body)
    # Cache the magic line too, so line numbers and the shown source match the cell on screen,
    # as a comment: the cached text must stay Python, as IPython's own (transformed) is.
    # AutoGraph parses it whole to find a lambda's source: with the bare magic line every
    # `ds.map(lambda x, y: ...)` of the cell failed to convert ("invalid syntax, line 1").
    text, number = f"# {magic_line}\n{source}", _cell_number(shell)
    if not getattr(shell, "ast_transformers", None):  # the text decides the code: no parse
        known = _BODIES.get(source, text, flags | shell.compile.flags)
        if known is not None:
            point_traceback_at(shell.compile, known.filename, number)
            return known
    try:
        tree = shell.compile.ast_parse(source)
    except SyntaxError:  # said with the cell's own name, as IPython would
        shell.compile.ast_parse(source, filename=shell.compile.cache(text, number))
        raise
    ast.increment_lineno(tree, 1)
    tree = shell.transform_ast(tree)
    # An unchanged body gets its earlier code objects back: stable_code.py says why.
    compiled, reused = _BODIES.get_or_compile(
        compiled_from(tree, source, shell),
        text,
        flags | shell.compile.flags,
        lambda: _compile_tree(shell, tree, source, shell.compile.cache(text, number), flags),
    )
    if reused:
        point_traceback_at(shell.compile, compiled.filename, number)
    return compiled


def _compile_tree(shell: Any, tree: Any, source: str, filename: str, flags: int) -> _Compiled:
    last = None
    # a trailing ';' hides the value, as in a plain cell (IPython looks at the magic call only)
    quiet = DisplayHook.semicolon_at_end_of_expression(source)
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not quiet:
        last = ast.Expression(tree.body.pop().value)
    with shell.compile.extra_flags(flags):
        return _Compiled(
            filename,
            shell.compile(tree, filename, "exec"),
            None if last is None else shell.compile(last, filename, "eval"),
        )


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


class KerasrunCells:
    """An IPython cleanup transform (lines in, lines out) for ``%%kerasrun`` cells."""

    # Not a side effect, but it must stay out of IPython's "is this input complete?" check,
    # which treats a %% cell as complete only at a blank line.
    has_side_effects = True

    def __init__(self, shell: Any, awaiting_call: str) -> None:
        self.shell = shell
        self.awaiting_call = awaiting_call  # an expression: (line, body) -> coroutine

    def __call__(self, lines: list[str]) -> list[str]:
        if not lines or not _is_kerasrun(lines[0]):
            return lines
        body = "".join(lines[1:])
        kind = _body_kind(self.shell, body, bool(getattr(self.shell, "autoawait", False)))
        if kind == "syntax error":
            return ["\n", *lines[1:]]  # IPython compiles it as a plain cell and reports it
        if kind == "awaits":
            line = lines[0].strip()[len(MAGIC) :].strip()
            return [f"await {self.awaiting_call}({line!r}, {body!r})\n"]
        return lines


def _is_kerasrun(first_line: str) -> bool:
    words = first_line.split(maxsplit=1)
    return bool(words) and words[0] == MAGIC


@functools.lru_cache(maxsize=64)
def _body_kind(shell: Any, body: str, autoawait: bool) -> str:
    """'syntax error', 'awaits' (top-level await, async for/with) or 'plain'."""
    try:
        code = compile(
            _transform(shell, body),
            "<cell>",
            "exec",
            flags=AWAIT_FLAG if autoawait else 0,
            dont_inherit=True,
        )
    except (SyntaxError, ValueError):  # ValueError: a null byte in the source
        return "syntax error"
    return "awaits" if code.co_flags & inspect.CO_COROUTINE else "plain"


def inside_a_cell(shell: Any) -> bool:
    """Whether output now reaches a cell: a kernel's shell knows the request it is serving
    (none at start-up); a terminal or plain shell shows output wherever it is."""
    if not hasattr(shell, "parent_header"):
        return True
    return bool(shell.parent_header)
