"""A cell under %%kerasrun runs with room on Python's frame stack (run/frame_room.py).

Page faults, not time: a call that crosses the end of a 16 KiB chunk of frames maps a new chunk and
faults its first page in; its return unmaps it. Counted by the kernel per thread, deterministic.
"""

from __future__ import annotations

import pytest

from keras_nbguard.run.frame_room import ROOM_SLOTS, call_with_room

# Every depth from 0 to 300 frames, and at each a few hundred calls one frame deeper: somewhere
# on the way a call crosses a chunk's end, hundreds of times, wherever the code starts.
ACROSS_CHUNK_ENDS = """
import resource
def leaf():
    return 1
def bounce(times):
    for _ in range(times):
        leaf()
def down(n, times):
    if n:
        return down(n - 1, times)
    bounce(times)
def across(depths=300, times=300):
    for depth in range(depths):
        down(depth, times)
def faults(function, *args):
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    function(*args)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
"""


def _namespace() -> dict:
    namespace: dict = {}
    exec(ACROSS_CHUNK_ENDS, namespace)
    return namespace


def test_it_is_a_plain_call():
    assert call_with_room(lambda a, b=2: a + b, 1) == 3
    with pytest.raises(KeyError, match="x"):
        call_with_room({}.__getitem__, "x")
    assert call_with_room.__code__.co_stacksize >= ROOM_SLOTS


def test_calls_across_a_chunk_end_fault_without_room_and_not_with_it():
    space = _namespace()
    without = space["faults"](space["across"])
    with_room = space["faults"](call_with_room, space["across"])
    assert without > 250, f"no chunk end crossed ({without} faults): the test proves nothing"
    assert with_room < without / 10, (without, with_room)


def test_a_kerasrun_cell_runs_with_room_and_a_plain_cell_does_not(shell):
    assert shell.run_cell(ACROSS_CHUNK_ENDS).success
    assert shell.run_cell("plain = faults(across)").success
    result = shell.run_cell("%%kerasrun --no-clear --quiet\nunder_magic = faults(across)")
    assert result.success, result.error_in_exec
    plain, under_magic = shell.user_ns["plain"], shell.user_ns["under_magic"]
    assert plain > 250, f"no chunk end crossed in the plain cell ({plain} faults)"
    assert under_magic < plain / 10, (plain, under_magic)


def test_the_room_is_left_out_of_a_failing_cells_traceback(shell, capsys):
    shell.run_cell("%%kerasrun --no-clear --quiet\n1 / 0")
    shown = capsys.readouterr().out
    assert "ZeroDivisionError" in shown
    assert "frame_room" not in shown and "call_with_room" not in shown
    assert "_execute" not in shown


def test_a_deep_recursion_still_stops_at_the_recursion_limit(shell):
    cell = "%%kerasrun --no-clear --quiet\ndef deep(n):\n    return deep(n + 1)\ndeep(0)"
    # IPython's default traceback looks up each of the ~1,000 frames' module among every module
    # loaded (inspect.getmodule): 15-40 s once TensorFlow is imported, plain cells alike
    shell.run_line_magic("xmode", "Plain")
    try:
        result = shell.run_cell(cell)
    finally:
        shell.run_line_magic("xmode", "Context")
    assert isinstance(result.error_in_exec, RecursionError)
    assert shell.run_cell("%%kerasrun --no-clear --quiet\nx = 1").success
