"""A re-run of an unchanged %%kerasrun cell executes the code objects of its first run, so that
TensorFlow's never-emptied cache of op stacks (keyed by code objects) stops growing with every
run (keras_nbguard/ipython/stable_code.py); any change to the cell compiles anew."""

from __future__ import annotations

import sys
import textwrap

from helpers import run

# Every frame of the running cell that is a notebook cell's (IPython's and ours), by code object:
# TensorFlow keys each op's stack by exactly these.
CELL_FRAMES = """
import sys, weakref
frame, here = sys._getframe(), []
while frame is not None:
    if frame.f_code.co_filename.startswith("<ipython-input-"):
        here.append(weakref.ref(frame.f_code))
    frame = frame.f_back
seen.append(here)
"""


def test_an_unchanged_cell_runs_the_same_code_objects_and_tensorflow_keeps_no_old_ones(keras_shell):
    keras_shell.user_ns["seen"] = []
    cell = (
        "%%kerasrun --label same --quiet\n"
        + CELL_FRAMES
        + "model = make_model()\nmodel.fit(x, y, epochs=1, verbose=0);\n"
    )
    for _ in range(4):
        assert run(keras_shell, cell).success
    seen = keras_shell.user_ns["seen"]
    assert [len(frames) for frames in seen] == [2, 2, 2, 2]  # the cell's and the body's
    first = [ref() for ref in seen[0]]
    assert all([ref() for ref in frames] == first for frames in seen)  # the very same objects

    # Without the reuse each run's code stays alive, held by TensorFlow's stack cache alone.
    # (one statement: IPython compiles each top-level statement of a plain cell on its own)
    plain = "if True:\n" + textwrap.indent(
        CELL_FRAMES + "model = make_model()\nmodel.fit(x, y, verbose=0)\n", "    "
    )
    for _ in range(3):
        assert run(keras_shell, plain).success
    fresh = [frames[0] for frames in keras_shell.user_ns["seen"][4:]]
    assert len({id(ref()) for ref in fresh}) == 3 and all(ref() is not None for ref in fresh)


# The code objects of IPython's timing magics on the running stack (kept: ids alone could
# be reused once one is freed).
TIMED_FRAMES = """
import sys
def note_timed():
    frame, here = sys._getframe(), []
    while frame is not None:
        if frame.f_code.co_filename.startswith(("<timed ", "<magic-timeit>")):
            here.append(frame.f_code)
        frame = frame.f_back
    seen.append(here)
"""


def test_timing_magics_in_a_cell_run_the_code_of_its_last_run(keras_shell):
    """``%time model.fit(...)`` compiles its statement at every call: a new code object in the
    stack of every op TensorFlow traces, a new key of its stack cache (+1.5 MiB a run on a
    small MLP). In a ``%%kerasrun`` cell each timing magic runs the code of its last run."""
    keras_shell.user_ns["seen"] = []
    assert run(keras_shell, TIMED_FRAMES).success
    cell = (
        "%%kerasrun --label timed --quiet\n"
        "model = make_model()\n"
        "%time model.fit(x, y, epochs=1, verbose=0); note_timed()\n"
        "%timeit -n1 -r1 note_timed()\n"
    )
    for _ in range(3):
        assert run(keras_shell, cell).success
    seen = keras_shell.user_ns["seen"]
    assert [len(frames) for frames in seen] == [1, 1] * 3  # <timed exec>, then <magic-timeit>
    timed, timeit = [[frames[0] for frames in seen[i::2]] for i in (0, 1)]
    assert all(code is timed[0] for code in timed) and timed[0].co_filename == "<timed exec>"
    assert all(code is timeit[0] for code in timeit) and timeit[0] is not timed[0]

    # %%time above the magic: its cell, and the expression it compiles the rest into, are the
    # same again (with the body: three code objects under every op).
    keras_shell.user_ns["seen"] = []
    outer = "%%time\n%%kerasrun --label timed --quiet\nnote_timed()\n" + CELL_FRAMES
    for _ in range(2):
        assert run(keras_shell, outer).success
    seen = keras_shell.user_ns["seen"]  # each run: its <timed eval> code, then its cells'
    (timed, cells), (timed_again, cells_again) = seen[0:2], seen[2:4]
    assert [code.co_filename for code in timed] == ["<timed eval>"] and len(cells) == 2
    assert timed[0] is timed_again[0]
    assert [ref() for ref in cells] == [ref() for ref in cells_again]  # the body's, the cell's

    # A plain cell's %time compiles anew, as IPython does.
    keras_shell.user_ns["seen"] = []
    plain = "%time model = make_model(); model.fit(x, y, epochs=1, verbose=0); note_timed()"
    for _ in range(2):
        assert run(keras_shell, plain).success
    fresh = [frames[0] for frames in keras_shell.user_ns["seen"]]
    assert len(fresh) == 2 and fresh[0] is not fresh[1]


def test_a_changed_cell_compiles_anew(shell):
    assert run(shell, "%%kerasrun --label v --quiet\nvalue = 1").success
    assert run(shell, "%%kerasrun --label v --quiet\nvalue = 2").success
    assert shell.user_ns["value"] == 2
    assert run(shell, "%%kerasrun --label v --quiet\nvalue = 1").success
    assert shell.user_ns["value"] == 1
    assert run(shell, "%%kerasrun --label w --quiet\nvalue = 3\nvalue").result == 3


def test_a_traceback_of_a_rerun_names_the_cell_that_failed(shell):
    cell = "%%kerasrun --label fails --quiet\nx = 1\n1 / 0\n"
    numbers = []
    for _ in range(2):
        result = run(shell, cell)
        assert isinstance(result.error_in_exec, ZeroDivisionError)
        cells = []
        tb = result.error_in_exec.__traceback__
        while tb is not None:
            name = shell.compile.format_code_name(tb.tb_frame.f_code.co_filename)
            if name is not None:
                cells.append((name[1], tb.tb_lineno))
            tb = tb.tb_next
        numbers.append(result.execution_count)
        assert cells == [
            (f"In[{result.execution_count}]", 1),  # the magic's line
            (f"In[{result.execution_count}]", 3),
        ]  # 1 / 0, as on screen
    assert numbers[1] == numbers[0] + 1
    assert not run(shell, "%%kerasrun --label fails --quiet\nx = 1\n1 / 0 +\n").success


def test_other_cells_and_unloading_leave_ipythons_compiler_as_it_was(shell):
    compiler_class = type(shell.compile)
    assert (
        compiler_class.__name__ == "CachingCompiler"
        and compiler_class.__call__
        is not sys.modules["IPython.core.compilerop"].CachingCompiler.__call__
    )
    first = run(shell, "import sys\ncode = sys._getframe().f_code")
    second = run(shell, "import sys\ncode2 = sys._getframe().f_code")
    assert first.success and second.success
    assert shell.user_ns["code"] is not shell.user_ns["code2"]  # plain cells: IPython's way
    shell.run_line_magic("unload_ext", "keras_nbguard")
    try:
        assert type(shell.compile) is sys.modules["IPython.core.compilerop"].CachingCompiler
    finally:
        shell.run_line_magic("load_ext", "keras_nbguard")


def test_an_ast_transformer_that_rewrites_a_cell_is_never_given_stale_code(shell):
    import ast

    class Stamp(ast.NodeTransformer):
        """Rewrites the name ``stamp`` into how many times the shell has transformed a cell."""

        count = 0

        def visit_Module(self, node):
            Stamp.count += 1
            return self.generic_visit(node)

        def visit_Name(self, node):
            if node.id == "stamp":
                return ast.copy_location(ast.Constant(Stamp.count), node)
            return node

    shell.ast_transformers.append(Stamp())
    try:
        stamps = []
        for _ in range(2):
            assert run(shell, "%%kerasrun --label stamped --quiet\nseen_stamp = stamp").success
            stamps.append(shell.user_ns["seen_stamp"])
        assert stamps[0] != stamps[1]  # the second run ran its own transformed code
    finally:
        shell.ast_transformers[:] = [t for t in shell.ast_transformers if not isinstance(t, Stamp)]
