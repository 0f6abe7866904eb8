"""A re-run of an unchanged ``%%kerasrun`` cell executes the very code objects of its last run.

Why: TensorFlow interns the Python stack of every op it creates, in a process-wide cache that is
never emptied (``StackTrace::Capture`` in tensorflow/python/util/stack_trace.cc: a static
``flat_hash_map`` keyed by the hash of the stack's (code object, line) pairs, holding those code
objects). IPython compiles every execution of a cell anew, so every re-run puts new code objects
at the bottom of every stack: each traced op is a new key, kept for the life of the process. That
is the native memory that Keras' examples grew by under the magic (0.5-5 MiB a run, more with a
bigger graph) which no ``clear_session``, gc or ``malloc_trim`` gives back. Given the same code
objects, a re-run's stacks are the same keys and the cache stops growing.

Two compilations make a ``%%kerasrun`` cell: IPython's of the cell (one call of
``run_cell_magic``, the outermost frame of every stack) and ours of its body (``cell.py``). A
third comes with IPython's timing magics, which compile their statement at every call:
``%time history = model.fit(...)`` in the cell grew the kernel by 1.5 MiB a run on a small MLP
(glibc's heap in use; 0.02 without ``%time``). All go through ``CodeCache``, keyed by the
compiler flags and the cell's text, or, when the shell has AST transformers that may rewrite it
(and for the magics' parsed statements), by the AST with positions (a dump costs more than the
compilation it saves, so only then). A reused code object keeps the file name of its
first compilation; IPython's file-name map is pointed at the running cell, so a traceback still
says ``Cell In[n]`` of the cell that failed.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
from collections import OrderedDict
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

MAGIC_NAME = "kerasrun"
AWAITING_CALL = "kerasrun_async"  # what cell.KerasrunCells turns an awaiting body into
# the file names IPython's %time, %%time and %timeit compile the code they run under
TIMING_MAGIC_FILES = frozenset({"<timed exec>", "<timed eval>", "<magic-timeit>"})


class CodeCache:
    """Compiled code by (what it was compiled from, context, flags); the ``limit`` most recent."""

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._codes: OrderedDict[tuple[str, str, int], Any] = OrderedDict()

    def get(self, source: str, context: str, flags: int) -> Any | None:
        """The code compiled before from the same key, if kept (None: compile it)."""
        code = self._codes.get((source, context, flags))
        if code is not None:
            self._codes.move_to_end((source, context, flags))
        return code

    def get_or_compile(
        self, source: str, context: str, flags: int, compile_now: Callable[[], Any]
    ) -> tuple[Any, bool]:
        """(the code, whether it was reused); ``source``: ``compiled_from()``'s, ``context``:
        whatever else the code depends on."""
        code = self.get(source, context, flags)
        if code is not None:
            return code, True
        code = compile_now()
        self._codes[(source, context, flags)] = code
        if len(self._codes) > self.limit:
            self._codes.popitem(last=False)
        return code, False


def compiled_from(tree: ast.AST, text: str | None, shell: Any) -> str:
    """What decides the code: the text, unless an AST transformer of the user's may rewrite it
    (then the transformed tree, with positions); the text when it is not known either."""
    if text is not None and not getattr(shell, "ast_transformers", None):
        return text
    return ast.dump(tree, include_attributes=True)


def point_traceback_at(compiler: Any, reused_filename: str, number: Any) -> None:
    """Tracebacks through a reused code object name the running cell's In[n]."""
    names = getattr(compiler, "_filename_map", None)
    if isinstance(names, dict) and number is not None:
        names[reused_filename] = number


def is_kerasrun_cell(tree: Any) -> bool:
    """Whether ``tree`` is what IPython makes of a ``%%kerasrun`` cell: one call of
    ``run_cell_magic('kerasrun', ...)`` (or, for an awaiting body, of ``kerasrun_async``), as a
    statement or, as ``%%time`` compiles it, an expression; or a cell magic above ours."""
    body = getattr(tree, "body", None)
    if isinstance(tree, ast.Expression):  # as %%time above it compiles the cell
        call = body
    elif not isinstance(body, list) or len(body) != 1 or not isinstance(body[0], ast.Expr):
        return False
    else:
        call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr == AWAITING_CALL:
        return True
    if call.func.attr != "run_cell_magic" or len(call.args) < 3:
        return False
    name, cell = call.args[0], call.args[2]
    if isinstance(name, ast.Constant) and name.value == MAGIC_NAME:
        return True
    # another cell magic above ours (%%time): it runs a %%kerasrun cell in its turn
    return isinstance(cell, ast.Constant) and str(cell.value).startswith(f"%%{MAGIC_NAME}")


class StableCellCode:
    """Makes the shell's compiler hand an unchanged ``%%kerasrun`` cell its earlier code object.

    The compiler is IPython's (or ipykernel's) ``CachingCompiler``, which the shell calls for every
    statement of every cell; only ``%%kerasrun`` cells are looked up, and the timing magics' code
    while a ``%%kerasrun`` body runs (``running_body``); any other cell compiles as before.
    Installed by swapping the compiler's class for a subclass, so everything else that holds or
    inspects the compiler sees the same object; ``remove`` swaps it back.
    """

    def __init__(self, shell: Any, cache: CodeCache) -> None:
        self.shell = shell
        self.compiler = getattr(shell, "compile", None)
        self.cache = cache
        self._original: type | None = None
        self._bodies_running = 0

    @contextlib.contextmanager
    def running_body(self) -> Iterator[None]:
        """While a ``%%kerasrun`` body runs: what a timing magic in it compiles is looked up."""
        self._bodies_running += 1
        try:
            yield
        finally:
            self._bodies_running -= 1

    def install(self) -> None:
        compiler = self.compiler
        if compiler is None or self._original is not None:
            return
        original = type(compiler)
        cache, shell, stable = self.cache, self.shell, self

        def __call__(
            self: Any, source: Any, filename: str, symbol: str, *args: Any, **kwargs: Any
        ) -> CodeType:
            if args or kwargs:
                return original.__call__(self, source, filename, symbol, *args, **kwargs)
            if filename in TIMING_MAGIC_FILES and (
                stable._bodies_running or is_kerasrun_cell(source)  # %%time above the magic
            ):
                code, _ = cache.get_or_compile(  # (a tree: the magic parsed its statement)
                    compiled_from(source, None, shell),
                    f"{filename} {symbol}",
                    getattr(self, "flags", 0),
                    lambda: original.__call__(self, source, filename, symbol),
                )
                return code
            if not is_kerasrun_cell(source):
                return original.__call__(self, source, filename, symbol)
            # IPython caches a cell's text (size, mtime, lines, name) before compiling it
            cached: Any = linecache.cache.get(filename)
            text = "".join(cached[2]) if isinstance(cached, tuple) and len(cached) == 4 else None
            code, reused = cache.get_or_compile(
                compiled_from(source, text, shell),
                symbol,
                getattr(self, "flags", 0),
                lambda: original.__call__(self, source, filename, symbol),
            )
            if reused:
                point_traceback_at(
                    self, code.co_filename, getattr(self, "_filename_map", {}).get(filename)
                )
            return code

        try:
            compiler.__class__ = type(
                original.__name__,
                (original,),
                {
                    "__call__": __call__,
                    "__module__": original.__module__,
                    "__doc__": original.__doc__,
                },
            )
        except TypeError:  # a compiler whose class can't be swapped: cells compile as before
            return
        self._original = original

    def remove(self) -> None:
        if self._original is not None and self.compiler is not None:
            self.compiler.__class__ = self._original
            self._original = None
