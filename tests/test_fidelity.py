"""The numbers agree with the truth: fit time against a timer in the cell, and RSS peaks."""

from __future__ import annotations

import time

import numpy as np
import pytest

import keras_nbguard
from keras_nbguard.collectors.process import RssSampler, default_rss_reader

MB = 2**20


def test_fit_time_agrees_with_a_timer_around_fit_within_2_percent(keras_shell):
    cell = """%%kerasrun --label timed --quiet
import time
model = make_model(64)
t0 = time.perf_counter()
model.fit(x, y, epochs=4, batch_size=16, verbose=0)
inner = time.perf_counter() - t0
"""
    for _ in range(2):
        assert keras_shell.run_cell(cell).success
        inner = keras_shell.user_ns["inner"]
        recorded = keras_nbguard.runs("timed")[-1].fit_seconds
        assert abs(recorded - inner) / inner <= 0.02, (recorded, inner)


def test_a_fits_cpu_time_agrees_with_the_process_clock_around_it(keras_shell):
    """The CPU time a fit records (what tells a busier machine from a slower run) is the
    process's, all threads: TensorFlow's pools count, a sleep in a callback does not."""
    cell = """%%kerasrun --label cpu --quiet
import time
class Nap(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.5)
model = make_model(64)
c0 = time.process_time()
model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[Nap()])
inner = time.process_time() - c0
"""
    assert keras_shell.run_cell(cell).success
    record = keras_nbguard.runs("cpu")[-1]
    inner = keras_shell.user_ns["inner"]
    assert abs(record.fit_cpu_seconds - inner) <= 0.02 + 0.05 * inner, (record.fits, inner)
    assert record.fit_seconds - record.fit_cpu_seconds >= 0.5  # 1 s of naps: time, not CPU


def test_sampler_catches_200_mb_held_for_50_ms():
    sampler = RssSampler(interval=0.01)
    sampler.start()
    try:
        time.sleep(0.05)
        base = sampler.peak
        block = np.ones(200 * MB // 8)  # touched pages: really resident
        time.sleep(0.05)
        del block
        time.sleep(0.05)
    finally:
        sampler.stop()
    assert sampler.peak - base >= 190 * MB
    assert sampler.samples[-1][1] < sampler.peak - 150 * MB  # and it was freed again


def test_run_peak_includes_a_short_spike(keras_shell):
    cell = (
        "%%kerasrun --label spike --quiet --no-clear\nimport numpy as np, time\n"
        "block = np.ones(200 * 2**20 // 8); time.sleep(0.05); del block\n"
    )
    keras_shell.run_cell(cell)
    record = keras_nbguard.runs("spike")[-1]
    assert record.rss_peak - record.rss_before >= 190 * MB


def test_sampler_series_stays_bounded_and_keeps_its_shape():
    values = iter(range(10**6))
    sampler = RssSampler(read=lambda: next(values), interval=0.0005, max_samples=64)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    assert len(sampler.samples) < 64
    times = [t for t, _ in sampler.samples]
    assert times == sorted(times) and sampler.peak == max(v for _, v in sampler.samples)


def test_broken_reader_stops_the_sampler_not_the_run():
    calls = iter([100, 200])
    sampler = RssSampler(read=lambda: next(calls), interval=0.001)
    sampler.start()
    time.sleep(0.05)
    sampler.stop()
    assert sampler.peak == 200 and "StopIteration" in sampler.error


def test_statm_reader_agrees_with_psutil():
    import psutil

    ours, theirs = default_rss_reader()(), psutil.Process().memory_info().rss
    assert abs(ours - theirs) < 8 * MB


WRAP_FIT = """
import {keras} as wrapped_keras
_keras_fit = wrapped_keras.Model.__dict__.get("fit")  # Keras 3's is inherited: none of its own
_base_fit = wrapped_keras.Model.fit
def fit(self, *args, **kwargs):  # a tool's wrapper, without functools.wraps
    return _base_fit(self, *args, **kwargs)
wrapped_keras.Model.fit = fit
"""


@pytest.mark.parametrize("keras", ["keras", "tf_keras"])
def test_a_fit_wrapped_without_functools_wraps_is_still_read_or_says_why(keras_shell, keras):
    """A tool that puts ``def fit(self, *args, **kwargs)`` on ``Model``: bound by its own
    signature the call had no ``callbacks`` to add ours to, and the summary read ``epochs
    [n/a], batch set by your input`` for ``fit(x, y, batch_size=16, epochs=2)``, with no
    reason. Keras 3's own ``fit`` is still on a base class: the call is read by its names; on
    Keras 2 the wrapper replaced the only one: the summary says why it can't be read."""
    pytest.importorskip(keras)
    assert keras_shell.run_cell(WRAP_FIT.format(keras=keras)).success
    cell = f"""%%kerasrun --label wrapped --quiet
import {keras} as k
model = k.Sequential([k.Input((8,)), k.layers.Dense(4), k.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, epochs=2, batch_size=16, verbose=0)
"""
    try:
        # a run that fits nothing says so, not the wrapper's reason (a tf_keras walkthrough: a
        # typo before the fit read "fit n/a: … a wrapper without functools.wraps")
        keras_shell.run_cell(f"%%kerasrun --label unfit --quiet\nimport {keras}\n")
        result = keras_shell.run_cell(cell)
    finally:
        restore = (
            "wrapped_keras.Model.fit = _keras_fit"
            if keras == "tf_keras"
            else "del wrapped_keras.Model.fit"
        )
        assert keras_shell.run_cell(restore).success  # as it was: no fit of Model's own
    assert result.success, result.error_in_exec
    unfit = dict(keras_nbguard.runs("unfit")[-1].summary_rows())["fit"]
    assert "wrapper" not in unfit and "no fit" in unfit, unfit
    record = keras_nbguard.runs("wrapped")[-1]
    (fit,) = record.fits
    row = dict(record.summary_rows())["fit"]
    if keras == "keras":
        assert (len(fit.epoch_seconds), fit.batch_size) == (2, 16), row
    else:
        assert fit.epoch_seconds == () and fit.completed
        assert "epochs and batch n/a (tf_keras.Model.fit is fit() of __main__, a wrapper " in row
