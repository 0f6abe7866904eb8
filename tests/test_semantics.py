"""The magic keeps IPython's semantics: shell quoting for options, the cell's own In[n] in
tracebacks, top-level await, syntax errors as in a plain cell, and a run start that two threads
can't both win. A real shell, real Keras."""

from __future__ import annotations

import re
import threading
import time

from helpers import run
from IPython.core.error import UsageError

import keras_nbguard


def test_a_quoted_label_is_the_words_inside_the_quotes(shell):
    assert run(shell, "%%kerasrun --label 'my model' --quiet\nz = 1").success
    assert run(shell, '%%kerasrun -l "two  spaces" --quiet\nz = 2').success
    assert [r.label for r in keras_nbguard.runs()] == ["my model", "two  spaces"]


def test_an_unbalanced_quote_is_a_usage_error_and_the_cell_does_not_run(shell, capsys):
    result = run(shell, "%%kerasrun --label 'my model --quiet\nran = True")
    assert isinstance(result.error_in_exec, UsageError)
    assert "no closing quotation" in str(result.error_in_exec).lower()
    assert "ran" not in shell.user_ns and keras_nbguard.runs() == []
    assert "Traceback" not in capsys.readouterr().out


def test_a_traceback_names_the_cells_own_number(shell, capsys):
    run(shell, "1 + 1")
    result = run(shell, "%%kerasrun --quiet\nx = 1\nraise ValueError('boom')")
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # no colours
    assert f"Cell In[{result.execution_count}], line 3" in out
    assert f"In[{result.execution_count + 1}]" not in out


def test_autograph_converts_the_cells_lambdas_as_in_a_plain_cell(shell, capsys):
    """AutoGraph finds a lambda's source by parsing the cell's whole cached text, which began
    with the magic line: every ``ds.map(lambda ...)`` ran unconverted ("AutoGraph could not
    transform <lambda> ... invalid syntax"), and one that branches on a tensor failed."""
    cell = (
        "%%kerasrun --quiet --label mapped\nimport tensorflow as tf\n"
        "ds = tf.data.Dataset.from_tensor_slices(tf.constant([1.0, 5.0]))\n"
        "halved = [float(v) for v in ds.map(lambda v: v / 2 if v > 2 else v)]\n"
    )
    result = run(shell, cell)
    assert result.success, result.error_in_exec
    assert shell.user_ns["halved"] == [1.0, 2.5]
    assert "could not transform" not in capsys.readouterr().out


AWAITABLE = "import asyncio\nasync def double(x):\n    await asyncio.sleep(0)\n    return 2 * x"


def test_top_level_await_works_as_in_a_plain_cell(shell):
    run(shell, AWAITABLE)
    result = run(
        shell,
        "%%kerasrun --label awaits --quiet\n"
        "y = await double(3)\n"
        "async def pairs():\n    yield 1\n    yield 2\n"
        "seen = [p async for p in pairs()]\n"
        "await double(y)",
    )
    assert result.success, result.error_in_exec
    assert result.result == 12 and shell.user_ns["y"] == 6 and shell.user_ns["seen"] == [1, 2]
    assert shell.user_ns["_"] == 12  # the last expression is the cell's result, as always
    (record,) = keras_nbguard.runs()
    assert (record.label, record.status) == ("awaits", "ok")


def test_an_awaiting_cell_that_fails_is_recorded_with_its_own_lines(shell, capsys):
    run(shell, AWAITABLE)
    result = run(shell, "%%kerasrun --label awaits --quiet\nawait double(1)\nraise KeyError(9)")
    assert isinstance(result.error_in_exec, KeyError)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert f"Cell In[{result.execution_count}], line 3" in out
    assert [r.status for r in keras_nbguard.runs()] == ["error"]


def test_a_syntax_error_reads_as_in_a_plain_cell(shell, capsys):
    result = run(shell, "%%kerasrun --quiet\nx = 1\nfor i in range(3:\n    pass")
    assert isinstance(result.error_before_exec, SyntaxError)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert f"Cell In[{result.execution_count}], line 3" in out  # the line on screen
    assert "for i in range(3:" in out
    assert "keras_nbguard" not in out and "Traceback" not in out  # none of our frames
    assert "x" not in shell.user_ns and keras_nbguard.runs() == []  # nothing ran


def test_without_autoawait_an_awaiting_cell_is_the_same_syntax_error_as_a_plain_one(shell, capsys):
    shell.autoawait = False
    try:
        result = run(shell, "%%kerasrun --quiet\nawait something()")
    finally:
        shell.autoawait = True
    assert isinstance(result.error_before_exec, SyntaxError)
    assert "keras_nbguard" not in capsys.readouterr().out


def test_two_threads_never_both_start_a_run_and_fit_is_always_restored(keras_shell, monkeypatch):
    import keras

    from keras_nbguard.session.core import Session

    # widen the window between "is a run going?" and "this one is": a thread switch there
    last_run = Session.last_run
    monkeypatch.setattr(
        Session, "last_run", lambda self, label: time.sleep(0.0005) or last_run(self, label)
    )
    fit = keras.Model.fit
    inside, overlaps, refused = [0], [], []
    lock = threading.Lock()

    def runs() -> None:
        for _ in range(100):
            try:
                with keras_nbguard.track("threads", clear=False, deep_clean=False):
                    with lock:
                        inside[0] += 1
                        overlaps.append(inside[0])
                    with lock:
                        inside[0] -= 1
            except RuntimeError:
                refused.append(1)

    threads = [threading.Thread(target=runs) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert max(overlaps) == 1  # never two runs at once
    assert len(overlaps) + len(refused) == 200 and refused  # the other thread was told
    assert keras.Model.fit is fit  # the scoped patch is gone after every run
    assert keras_nbguard.get_session().current is None


def test_a_fit_patch_made_in_the_cell_stays_as_in_a_plain_cell_and_fits_are_still_timed(
    keras_shell,
):
    """Auto-logging (``mlflow.autolog()`` in the training cell) wraps ``Model.fit`` while ours is
    on: putting ours back at the run's end dropped theirs, and every later cell lost it."""
    run(keras_shell, "logged = []")
    cell = """%%kerasrun --label autolog --quiet
if not hasattr(keras.Model.fit, "logs"):  # patched once, as an autologger does
    _fit = keras.Model.fit
    def fit(self, *args, **kwargs):
        logged.append(self.name)
        return _fit(self, *args, **kwargs)
    fit.logs = True
    keras.Model.fit = fit
model = make_model()
model.fit(x, y, epochs=1, verbose=0)
"""
    try:
        for _ in range(3):
            assert run(keras_shell, cell).success
        assert run(keras_shell, "make_model().fit(x, y, epochs=1, verbose=0)").success
        assert hasattr(keras_shell.user_ns["keras"].Model.fit, "logs")  # theirs, still on
        assert len(keras_shell.user_ns["logged"]) == 4  # each run's fit, and the plain cell's
        assert [len(r.fits) for r in keras_nbguard.runs("autolog")] == [1, 1, 1]
    finally:
        Model = keras_shell.user_ns["keras"].Model
        if "fit" in vars(Model):
            del Model.fit
