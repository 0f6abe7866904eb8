"""The stop button pressed at any moment of a ``%%kerasrun`` cell: wherever it lands in our own
bookkeeping, the run is kept and the next run goes through. A real shell and real Keras; the
press is SIGINT, raised (to whichever handler is in force) at a chosen line of keras_nbguard's
own code, as the kernel's interrupt lands at whatever line runs."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pytest
from helpers import run

import keras_nbguard

PACKAGE = os.path.dirname(keras_nbguard.__file__)
CELL = "%%kerasrun --label pressed --quiet\nmodel = make_model()\nmodel.fit(x, y, verbose=0)\n"
POINTS = 12  # presses, spread over the lines a run executes


class PressAt:
    """A tracer of keras_nbguard's own lines that presses the stop button at the ``at``-th."""

    def __init__(self, at: int) -> None:
        self.at, self.lines, self.where = at, 0, ""

    def calls(self, frame: Any, event: str, arg: Any) -> Any:
        return self.lines_of_ours if frame.f_code.co_filename.startswith(PACKAGE) else None

    def lines_of_ours(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines == self.at:
                sys.settrace(None)
                self.where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                signal.raise_signal(signal.SIGINT)
        return self.lines_of_ours


def traced(shell: Any, press: PressAt) -> Any:
    sys.settrace(press.calls)
    try:
        return run(shell, CELL)
    finally:
        sys.settrace(None)


@pytest.mark.slow
def test_a_stop_pressed_anywhere_keeps_the_run_and_the_next_run_goes_through(keras_shell):
    """Before the press was held (session/held_interrupt.py), 35 of 40 such presses went wrong:
    the run's record lost, or the run left claimed so that every later %%kerasrun failed with
    "run is still going" until a restart."""
    assert run(keras_shell, CELL).success
    count = PressAt(at=0)  # never presses: counts a run's lines of ours
    assert traced(keras_shell, count).success
    for point in range(1, POINTS + 1):
        press = PressAt(at=count.lines * point // (POINTS + 1))
        before = len(keras_nbguard.runs("pressed"))
        result = traced(keras_shell, press)
        assert isinstance(result.error_in_exec, KeyboardInterrupt), press.where
        assert len(keras_nbguard.runs("pressed")) == before + 1, press.where  # kept
        after = run(keras_shell, CELL)
        assert after.success, (press.where, after.error_in_exec)


@pytest.fixture
def python_prints_the_unraisable(monkeypatch):
    """Python's own hook, not pytest's (which turns what a finalizer raised into a warning)."""
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)


class PressIn:
    """A tracer that presses the stop button once, at the first line of our ``function``."""

    def __init__(self, function: str) -> None:
        self.function, self.where = function, ""

    def calls(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        ours = code.co_name == self.function and code.co_filename.startswith(PACKAGE)
        return self.press if ours and not self.where else None

    def press(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and not self.where:
            sys.settrace(None)
            self.where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            signal.raise_signal(signal.SIGINT)
        return None


@pytest.mark.slow
def test_a_stop_landing_in_the_iterators_hand_over_stops_the_fit_and_keeps_the_run(
    keras_shell, python_prints_the_unraisable, capsys
):
    """Keras lets go of a fit's tf.data iterator inside fit; our ``__del__`` hands it to a
    thread (iterator_closing.py). A stop landing there was printed as "Exception ignored" and
    dropped by Python, and the cell went on (1 of 3 CI runs of the test above)."""
    assert run(keras_shell, CELL).success
    before = len(keras_nbguard.runs("pressed"))
    press = PressIn("_hand_over")
    sys.settrace(press.calls)
    try:
        result = run(keras_shell, CELL)
    finally:
        sys.settrace(None)
    assert press.where, "no tf.data iterator was handed over in the fit"
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert "finalizer (_hand_over)" in str(result.error_in_exec)
    assert "returned" in str(result.error_in_exec) or "epoch" in str(result.error_in_exec)
    assert "Exception ignored" not in capsys.readouterr().err
    runs = keras_nbguard.runs("pressed")
    assert len(runs) == before + 1 and runs[-1].status == "interrupted"
    assert run(keras_shell, CELL).success


PRESSED_IN_A_FINALIZER = """\
import signal
class PressedInside:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # lands in this __del__, as a stop can
PressedInside()
went_on = True
"""


def test_a_stop_dropped_in_the_users_own_finalizer_stops_the_cell_as_it_ends(
    shell, python_prints_the_unraisable, capsys
):
    bare = run(shell, PRESSED_IN_A_FINALIZER)  # what Python does with it: prints and goes on
    assert bare.success and "Exception ignored" in capsys.readouterr().err
    shell.user_ns.pop("went_on")
    result = run(shell, "%%kerasrun --label pressed --quiet\n" + PRESSED_IN_A_FINALIZER)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert "(PressedInside.__del__)" in str(result.error_in_exec)
    assert "as it ended" in str(result.error_in_exec)
    assert shell.user_ns["went_on"]  # it stops the cell late, not never
    assert "Exception ignored" not in capsys.readouterr().err
    assert [r.status for r in keras_nbguard.runs("pressed")] == ["interrupted"]
    assert run(shell, "%%kerasrun --label pressed --quiet\nx = 1\n").success
    assert sys.unraisablehook is sys.__unraisablehook__  # ours is gone after the run


def test_what_finalizers_raise_besides_a_stop_goes_to_the_hook_before_ours(monkeypatch):
    from keras_nbguard.collectors.finalizer_stops import StopsInFinalizers

    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    stops = StopsInFinalizers()
    stops.install()

    class Failing:
        def __del__(self) -> None:
            raise ValueError("a finalizer's own error")

    Failing()
    assert [type(u.exc_value) for u in seen] == [ValueError] and not stops.pressed
    stops.uninstall()
    assert sys.unraisablehook == seen.append
    assert stops.take("anywhere") is None


def test_the_hook_goes_even_where_the_runs_end_fails_and_a_falsy_error_stays_an_error(
    keras_shell, python_prints_the_unraisable, monkeypatch
):
    """Where something of ours failed as the run ended, the hook stayed: every later stop in a
    finalizer vanished without a word, for the kernel's life."""
    from keras_nbguard.prepare import layer_names

    def broken() -> None:
        raise RuntimeError("a bug of ours as the run ends")

    monkeypatch.setattr(layer_names, "run_ended", broken)
    with pytest.warns(keras_nbguard.NbguardWarning, match="a bug of ours as the run ends"):
        assert run(keras_shell, "%%kerasrun --label broken --quiet\nmodel = make_model()\n").success
    assert sys.unraisablehook is sys.__unraisablehook__
    # nor any other patch of the run (Model.fit, the iterators' __del__ stayed: a CI worker's
    # next tests then ran every fit through a dead run's wrapper)
    import keras
    from tensorflow.python.data.ops import iterator_ops

    assert "fit" not in keras.Model.__dict__ and "__del__" not in vars(iterator_ops.OwnedIterator)
    assert keras_nbguard.runs("broken")[-1].status == "ok"  # recorded, the figure missing
    monkeypatch.undo()

    class Falsy(Exception):  # an exception may say it is false: still the run's error
        def __bool__(self) -> bool:
            return False

    with pytest.raises(Falsy), keras_nbguard.track("falsy"):
        raise Falsy()
    assert keras_nbguard.runs("falsy")[-1].status == "error"


def test_a_stop_noted_is_raised_on_the_main_thread_only():
    """A predict of a thread of the user's returns: the stop is the cell's, on the main thread."""
    import threading

    from keras_nbguard.collectors.finalizer_stops import StopsInFinalizers

    stops = StopsInFinalizers()
    stops.pressed, stops.where = True, "OwnedIterator.__del__"
    taken: list[object] = []
    worker = threading.Thread(target=lambda: taken.append(stops.take("in a thread")))
    worker.start()
    worker.join()
    assert taken == [None] and stops.pressed
    stop = stops.take("here")
    assert isinstance(stop, KeyboardInterrupt) and "(OwnedIterator.__del__)" in str(stop)
    assert stops.take("again") is None
