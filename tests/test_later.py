"""Work left for after the cell's reply (session/later.py): done in order, never lost."""

from __future__ import annotations

import atexit
from collections.abc import Callable

import pytest

from keras_nbguard.session.later import Later


def test_work_waits_for_its_schedule_and_runs_in_order() -> None:
    later = Later(warn=print)
    scheduled: list[Callable[[], None]] = []
    later.schedule = lambda callback: scheduled.append(callback) is None
    done: list[int] = []
    later.add(lambda: done.append(1))
    later.add(lambda: done.append(2))
    assert done == [] and len(scheduled) == 1  # one callback for all the work left
    scheduled[0]()
    assert done == [1, 2]
    later.add(lambda: done.append(3))
    later.run()  # the next run's begin: what is left goes first
    assert done == [1, 2, 3]
    scheduled[1]()  # its callback comes later and finds nothing
    assert done == [1, 2, 3]
    later.close()


def _closed_loop(callback: Callable[[], None]) -> bool:
    raise RuntimeError("Event loop is closed")


@pytest.mark.parametrize("schedule", [None, lambda callback: False, _closed_loop])
def test_without_a_kernel_loop_the_work_is_done_at_once(schedule) -> None:
    later = Later(warn=print)
    later.schedule = schedule
    done: list[int] = []
    later.add(lambda: done.append(1))
    assert done == [1]


def test_a_failing_piece_is_said_and_the_rest_still_runs() -> None:
    said: list[str] = []
    later = Later(warn=said.append)
    later.schedule = lambda callback: True
    done: list[int] = []
    later.add(lambda: 1 / 0)  # type: ignore[func-returns-value]
    later.add(lambda: done.append(2))
    later.run()
    assert done == [2]
    assert said and "ZeroDivisionError" in said[0]
    later.close()


def test_work_left_at_the_interpreters_exit_is_done_then(monkeypatch) -> None:
    done: list[int] = []
    registered: list[Callable[[], None]] = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(atexit, "unregister", registered.remove)
    flushed: list[bool] = []
    later = Later(warn=print, at_exit=lambda: flushed.append(bool(done)))
    later.schedule = lambda callback: True  # a kernel whose loop never turns again
    later.add(lambda: done.append(1))
    assert registered == [later._exit]
    registered[0]()  # the exit: the work, then what the session asks for after it
    assert done == [1] and flushed == [True]
    later.add(lambda: done.append(2))
    later.close()  # unload: done, and no exit hook left behind
    assert done == [1, 2] and registered == []


def test_the_next_cell_of_any_kind_writes_the_last_runs_row_before_its_code(
    shell, history_database
) -> None:
    """An ipykernel that takes the next request before the loop's callback (Run All) must not
    leave the row waiting while that cell runs: the magic's pre_run_cell writes it first, a
    plain cell's too."""
    import sqlite3

    from keras_nbguard import get_session

    session = get_session()
    session.later.schedule = lambda callback: True  # a callback that never comes

    def finished() -> int:
        with sqlite3.connect(history_database) as db:
            sql = "SELECT count(*) FROM runs WHERE status = 'ok'"
            return int(db.execute(sql).fetchone()[0])

    assert shell.run_cell("%%kerasrun --no-clear --quiet --label a\nx1 = 1").success
    assert finished() == 0  # left for after the reply
    shell.user_ns["finished"] = finished
    result = shell.run_cell("seen = finished()")  # a plain cell, as its code runs
    assert result.success and shell.user_ns["seen"] == 1


def test_a_stop_pressed_while_the_last_row_is_written_stops_after_it(history_database) -> None:
    """The next cell writes what was left under the held stop button (session/held_interrupt.py):
    the row is whole, then the stop acts."""
    import os
    import signal

    from keras_nbguard.session.core import Session

    session = Session(store=None)
    session.later.schedule = lambda callback: True
    done: list[int] = []

    def write() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the stop button, mid-write
        done.append(1)

    session.later.add(write)
    with pytest.raises(KeyboardInterrupt, match="wrote the last run's row"):
        session.settle_later()
    assert done == [1] and not session.later.pending
    session.close()
