"""Reset has one meaning: earlier runs hidden (kept on disk, a way back), numbers never repeat,
and a restarted kernel honours it. A real shell and a real database."""

from __future__ import annotations

import pytest
from helpers import make_record, run

import keras_nbguard
from keras_nbguard.session.history import RunHistory

CELL = "%%kerasrun --label a --quiet\nz = 1"


def numbers() -> list[int]:
    return [r.run_number for r in keras_nbguard.runs("a")]


@pytest.mark.slow
def test_reset_hides_runs_numbers_go_on_and_undo_brings_them_back(shell):
    for _ in range(3):
        run(shell, CELL)
    report = shell.run_line_magic("nbguard", "reset")
    assert report.status == "done" and "hid 3 run(s)" in report.message
    assert keras_nbguard.runs() == [] and keras_nbguard.get_session().history == []
    run(shell, CELL)
    (after,) = keras_nbguard.runs()
    assert after.run_number == 4 and after.previous_run == 3  # vs the run really before
    undone = shell.run_line_magic("nbguard", "reset --undo")
    assert "showing 3 hidden run(s) again" in undone.message
    assert numbers() == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_restarted_kernel_honours_the_reset(shell, history_database):
    for _ in range(2):
        run(shell, CELL)
    shell.run_line_magic("nbguard", "reset")
    run(shell, CELL)
    shell.run_line_magic("reload_ext", "keras_nbguard")  # a new session on the same database
    assert numbers() == [3]  # the two before the reset stay hidden
    run(shell, CELL)
    assert numbers() == [3, 4]  # and numbering goes on, never 1 again
    shell.run_line_magic("nbguard", "reset --undo")
    assert numbers() == [1, 2, 3, 4]


@pytest.mark.slow
def test_reset_of_one_label_hides_only_its_runs_and_a_restart_honours_it(shell):
    for label in ("a", "b", "a"):
        run(shell, f"%%kerasrun --label {label} --quiet\nz = 1")
    report = shell.run_line_magic("nbguard", "reset --label a")
    assert report.status == "done" and "hid 2 run(s) of 'a'" in report.message
    assert [r.label for r in keras_nbguard.runs()] == ["b"]  # b's run is still there
    run(shell, CELL)
    assert numbers() == [3]  # numbers go on
    shell.run_line_magic("reload_ext", "keras_nbguard")  # the mark is in the database
    assert [(r.label, r.run_number) for r in keras_nbguard.runs()] == [("b", 1), ("a", 3)]
    undone = shell.run_line_magic("nbguard", "reset --undo --label a")
    assert "showing 2 hidden run(s) of 'a' again" in undone.message
    assert numbers() == [1, 2, 3]
    # a reset of every label hides b too; --undo --label b can't show what that hid
    shell.run_line_magic("nbguard", "reset")
    assert keras_nbguard.runs() == []
    assert "stay hidden" in shell.run_line_magic("nbguard", "reset --undo --label b").message
    shell.run_line_magic("nbguard", "reset --undo")
    assert len(keras_nbguard.runs()) == 4


def test_reset_of_an_unknown_label_says_which_labels_there_are(shell):
    run(shell, CELL)
    message = shell.run_line_magic("nbguard", "reset --label typo").message
    assert "hid 0 run(s) of 'typo'" in message and "labels: a" in message
    assert numbers() == [1]


def test_this_kernels_runs_by_label_follow_the_list_however_it_grows():
    past = RunHistory("nb.ipynb", warn=print)
    past.add(make_record(label="a", run_number=1, started_at=1.0))
    past.add(make_record(label="b", run_number=1, started_at=2.0))
    assert [r.label for r in past.runs("a", this_kernel=True)] == ["a"]
    past.mine.extend(make_record(label="a", run_number=n, started_at=2.0 + n) for n in (2, 3))
    assert [r.run_number for r in past.runs("a", this_kernel=True)] == [1, 2, 3]
    assert past.last_run("a").run_number == 3 and past.next_number("a") == 4
    assert past.next_number("b") == 2 and past.next_number("c") == 1
    assert [r.run_number for r in past.latest("a", 2)] == [2, 3]
    past.reset_at = 3.5  # hidden from runs(), still counted for the numbers
    assert [r.run_number for r in past.runs("a", this_kernel=True)] == [2, 3]
    assert [r.run_number for r in past.latest("a", 5)] == [2, 3]
    assert past.next_number("a") == 4
    past.mine = past.mine[:1]  # replaced by a shorter list: indexed anew
    assert past.last_run("a").run_number == 1 and past.last_run("b") is None
