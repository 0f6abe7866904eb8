"""evaluate and predict measured next to fit (real TensorFlow, a real shell), a fit that fails at
once reading n/a, and a Keras we can't handle named instead of a false "no fit"."""

from __future__ import annotations

import re
import sys
import types

import pytest
from helpers import run
from IPython.utils.capture import capture_output

import keras_nbguard
from keras_nbguard.records.formatting import fmt_seconds

CELL = """%%kerasrun --label infer
model = make_model()
model.fit(x, y, epochs=2, batch_size=64, verbose=0, validation_split=0.25)
model.evaluate(x, y, batch_size=128, verbose=0)
model.predict(x, verbose=0)
model.predict(x[:10], batch_size=5, verbose=0)
"""


def test_every_evaluate_and_predict_is_timed_in_call_order(keras_shell):
    assert run(keras_shell, CELL).success
    (record,) = keras_nbguard.runs("infer")
    (fit,) = record.fits  # the validation inside fit is the fit's, not an evaluate
    assert fit.steps == 3 and fit.rss_peak > 0  # 192 training rows, batch 64
    # from on_train_end to fit's return: part of the fit's time outside its epochs
    assert 0 <= fit.closing_seconds <= fit.seconds - sum(fit.epoch_seconds)
    assert [(c.kind, c.batch_size, c.steps) for c in record.inference] == [
        ("evaluate", 128, 2),
        ("predict", 32, 8),
        ("predict", 5, 2),
    ]
    for call in record.inference:
        assert 0 < call.seconds < record.wall_seconds and call.completed
        assert 0 < call.rss_peak <= record.rss_peak
    assert record.gpu.tf_peak is None  # no GPU: n/a, never 0
    assert all(c.gpu_peak is None for c in record.inference)
    summary = record.summary_text().splitlines()
    line = next(line for line in summary if line.strip().startswith("inference"))
    assert "evaluate" in line and line.count("predict") == 2 and "peak RSS" in line
    assert "vs fit" in line
    traces = next(line for line in summary if line.strip().startswith("traces"))
    # what was traced, and how: fit's and evaluate's steps share a name; not retracing
    assert re.search(r"most: \w+ \d+× \((one function for \d inputs|several functions)", traces)
    # and it survives the history store
    assert keras_nbguard.runs("infer")[0].inference == record.inference


def test_a_fit_that_fails_before_training_is_na_not_zero(keras_shell):
    bad = "%%kerasrun --label broken\nmodel = make_model()\nmodel.fit(x[:, :3], y, verbose=0)\n"
    with capture_output():  # the user's traceback
        assert not run(keras_shell, bad).success
    (record,) = keras_nbguard.runs("broken")
    assert record.status == "error" and len(record.fits) == 1
    assert record.fit_seconds is None  # the time spent failing is not fit time
    assert record.fits[0].closing_seconds is None  # it never ended training
    assert "failed before its first epoch ended" in record.summary_text()


@pytest.fixture
def odd_keras(monkeypatch):
    """A Keras 2 we don't know how to patch: a ``tf_keras`` without a public Model."""
    module = types.ModuleType("tf_keras")
    module.__version__ = "2.99.0"
    monkeypatch.setitem(sys.modules, "tf_keras", module)
    return module


@pytest.mark.filterwarnings("ignore::keras_nbguard.NbguardWarning")
def test_a_keras_we_cannot_patch_is_named_not_a_false_no_fit(shell, odd_keras):
    assert run(shell, "%%kerasrun --label odd\nx = 1\n").success
    (record,) = keras_nbguard.runs("odd")
    assert record.fits == () and "tf_keras 2.99.0 has no public Model class" in record.fit_reason
    assert "n/a: tf_keras 2.99.0 has no public Model class" in record.summary_text()
    assert any("no public Model class" in w for w in record.warnings)


LOOP_CELL = """%%kerasrun --label loop
model = make_model()
for _ in range(6):  # keras.io's text generation: fit a round, then predict char by char
    model.fit(x, y, epochs=1, batch_size=64, verbose=0)
model.fit(x, y, epochs=10, batch_size=64, verbose=0)
for i in range(24):
    model.predict(x[i : i + 1], verbose=0)
model.evaluate(x, y, verbose=0)
try:
    model.predict(x[:, :3], verbose=0)
except Exception:
    pass
"""


def test_calls_in_a_loop_are_counted_in_a_bounded_record_and_summed_in_the_summary(keras_shell):
    from keras_nbguard.records.calls import KEPT_INFERENCE

    assert run(keras_shell, LOOP_CELL).success
    (record,) = keras_nbguard.runs("loop")
    # every call counted, in a bounded number of records (a loop of 10,000 keeps as many)
    assert len(record.inference) <= KEPT_INFERENCE + 2
    by_kind = {
        kind: sum(c.calls for c in record.inference if c.kind == kind and c.completed)
        for kind in ("predict", "evaluate")
    }
    assert by_kind == {"predict": 24, "evaluate": 1}
    assert [c.completed for c in record.inference].count(False) == 1  # the bad predict, apart
    assert all(0 < c.rss_peak <= record.rss_peak for c in record.inference)
    summary = record.summary_text()
    inference = next(line for line in summary.splitlines() if line.strip().startswith("inference"))
    total = sum(c.seconds for c in record.inference if c.kind == "predict")
    assert f"predict 25× {fmt_seconds(total)} (1 raised)" in inference, inference
    assert "evaluate " in inference and "peak RSS" in inference
    # seven fits read as totals, and the ten-epoch fit's epochs would read the same way
    fit = next(line for line in summary.splitlines() if line.strip().startswith("fit"))
    assert re.search(r"in 7 fits: [\d.]+ m?s first, then [\d.]+( m?s)?–[\d.]+ m?s each", fit), fit
    assert "; 16 epochs, batch 64, your callbacks " in fit, fit
    assert keras_nbguard.runs("loop")[0].inference == record.inference  # stored as it is


def test_a_long_fits_epochs_read_first_last_and_a_count():
    from helpers import make_record

    from keras_nbguard.records.calls import FitRecord
    from keras_nbguard.records.formatting import fmt_fit

    epochs = (0.839, 0.512, 0.498, *([0.5] * 94), 0.502, 0.497)
    record = make_record(fits=(FitRecord(seconds=sum(epochs), epochs=99, epoch_seconds=epochs),))
    assert "epochs [839 ms, 512 ms, 498 ms, … 94 more …, 502 ms, 497 ms]" in fmt_fit(record)


def test_a_fits_time_outside_its_epochs_is_said_where_they_dont_add_up():
    # keras.io's weather forecasting: 1-2.4 s after on_train_end before fit returned, some runs
    from helpers import make_record

    from keras_nbguard.records.calls import FitRecord
    from keras_nbguard.records.formatting import fmt_fit

    def fit_row(
        seconds: float,
        epochs: tuple[float, ...],
        completed: bool = True,
        closing: float | None = None,
    ) -> str:
        fit = FitRecord(seconds=seconds, epochs=len(epochs), epoch_seconds=epochs,
                        completed=completed, closing_seconds=closing)  # fmt: skip
        return fmt_fit(make_record(fit_seconds=seconds, fits=(fit,)))

    assert "epochs [3.88 s] (+2.05 s outside them), batch" in fit_row(5.93, (3.88,))
    # most of it after training ended: tf.data's iterators closing (the bidirectional LSTM)
    assert (
        "epochs [10.05 s] (+5.13 s outside them, 5.02 s of it after training ended, as the fit "
        "let go of its data), batch" in fit_row(15.18, (10.05,), closing=5.02)
    )
    assert "(+2.05 s outside them), batch" in fit_row(5.93, (3.88,), closing=0.4)  # before
    assert "+700 ms outside them" in fit_row(1.2, (0.5,))
    assert "outside" not in fit_row(1.2, (0.9,))  # under half a second: an iterator made
    assert "outside" not in fit_row(30.0, (29.0,))  # a second, but not a fifth of the fit
    assert "outside" not in fit_row(9.0, (3.88,), completed=False)  # stopped inside an epoch


def test_fits_in_a_loop_that_all_failed_read_so():
    from helpers import make_record

    from keras_nbguard.records.calls import FitRecord
    from keras_nbguard.records.formatting import fmt_fit

    failed = FitRecord(seconds=0.1, epochs=None, completed=False)
    text = fmt_fit(make_record(fits=(failed,) * 5, fit_seconds=None))
    assert text == "n/a in 5 fits; 5 failed before their first epoch ended"
