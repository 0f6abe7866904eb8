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
    assert re.search(r"most: \w+ \d+×", traces)  # what was traced: steady traces read right
    # and it survives the history store
    assert keras_nbguard.runs("infer")[0].inference == record.inference


def test_a_fit_that_fails_before_training_is_na_not_zero(keras_shell):
    bad = "%%kerasrun --label broken\nmodel = make_model()\nmodel.fit(x[:, :3], y, verbose=0)\n"
    with capture_output():  # the user's traceback
        assert not run(keras_shell, bad).success
    (record,) = keras_nbguard.runs("broken")
    assert record.status == "error" and len(record.fits) == 1
    assert record.fit_seconds is None  # the time spent failing is not fit time
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
