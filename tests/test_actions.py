"""Resets: run now when idle, queued while a run is going (never clear_session mid-fit)."""

from __future__ import annotations

import threading

import pytest

import keras_nbguard
from keras_nbguard.session.core import Session, using


def test_a_reset_during_a_run_is_queued_and_done_when_the_run_ends():
    session = Session()
    done_during_run = []
    session.actions["probe"] = lambda: done_during_run.append(session.current) or "probed"
    seen = []
    session.events.subscribe("action", seen.append)
    with using(session), keras_nbguard.track("busy"):
        # a click arriving on another thread (a kernel subshell) while the cell runs
        reports = []
        clicker = threading.Thread(target=lambda: reports.append(session.perform("probe")))
        clicker.start()
        clicker.join()
        assert reports[0].status == "queued" and "'busy'" in reports[0].message
        assert done_during_run == []
    assert done_during_run == [None]  # ran after the run ended, with no run in progress
    assert [r.status for r in seen] == ["queued", "done"]
    assert seen[1].rss_before and seen[1].rss_after


def test_a_run_waits_for_a_reset_in_progress():
    session = Session()
    started, release = threading.Event(), threading.Event()
    order = []

    def slow_reset():
        started.set()
        release.wait(5)
        order.append("reset")
        return "slow"

    session.actions["slow"] = slow_reset
    clicker = threading.Thread(target=session.perform, args=("slow",))
    clicker.start()
    started.wait(5)
    threading.Timer(0.2, release.set).start()
    with using(session), keras_nbguard.track("after"):
        order.append("run")
    clicker.join()
    assert order == ["reset", "run"]


def test_failing_reset_is_reported_not_raised():
    session = Session()
    session.actions["bad"] = lambda: 1 / 0
    report = session.perform("bad")
    assert report.status == "failed" and "ZeroDivisionError" in report.message
    with pytest.raises(ValueError, match="unknown action"):
        session.perform("nope")


def test_reset_history_and_clear_output_cache(keras_shell):
    keras_shell.run_cell(
        "%%kerasrun --quiet\nmodel = make_model()\nmodel.fit(x, y, verbose=0)\n", store_history=True
    )
    assert "History" in type(keras_shell.user_ns["_"]).__name__
    session = keras_nbguard.get_session()
    report = session.perform("clear_output_cache")
    assert report.status == "done" and keras_shell.user_ns["_"] == ""
    assert not keras_shell.user_ns["Out"]
    assert session.perform("reset_history").message.startswith("hid ")
    assert keras_nbguard.runs() == []
    assert "RSS" in session.perform("clear_session").text()


def test_the_clear_session_reset_keeps_the_users_mixed_precision():
    import keras

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        report = Session(store=None).perform("clear_session")
        assert report.status == "done"
        assert keras.config.dtype_policy().name == "mixed_bfloat16"  # clear_session alone: float32
    finally:
        keras.config.set_dtype_policy("float32")
