"""Each cause built for real on a real shell with real Keras, named with the right number."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
from helpers import run

import keras_nbguard
from keras_nbguard.diagnosis.findings import DATASET_RUNS, MIN_RUNS
from keras_nbguard.records.formatting import fmt_seconds

MiB = 2**20


def only(kind: str, label: str):
    (finding,) = [f for f in keras_nbguard.diagnose(label) if f.kind == kind]
    return finding


def test_a_slow_callback_is_named_by_class_and_method(keras_shell):
    # The step is traced in a cell before: a first trace inside the fit took 10.6 s of a 12.4 s
    # fit under a load of 18 on 2 CPUs, and the callbacks' 0.6 s fell under CALLBACK_SHARE.
    assert run(keras_shell, "model = make_model()\nmodel.fit(x, y, epochs=1, verbose=0)").success
    cell = """%%kerasrun --label cb --quiet
import time
class Slow(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.2)
model.fit(x, y, epochs=3, verbose=0, callbacks=[Slow()])
"""
    assert run(keras_shell, cell).success
    finding = only("callbacks", "cb")
    fit = keras_nbguard.runs("cb")[-1].fits[0]
    (hook,) = fit.callbacks
    assert (hook.name, hook.calls) == ("Slow.on_epoch_end", 3)
    assert 0.6 <= hook.seconds <= fit.callback_seconds < fit.seconds  # 3 x 0.2 s
    assert 0.2 <= hook.slowest < hook.seconds / 2  # its slowest call: one of the three
    assert f"{fit.callback_seconds / fit.seconds:.0%})" in finding.message
    assert "Slow.on_epoch_end" in finding.message
    assert not [f for f in keras_nbguard.diagnose("cb") if f.kind == "checkpoint_io"]


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/io"), reason="Linux I/O counters")
def test_a_checkpoint_every_epoch_is_checkpoint_io_with_the_bytes(keras_shell, tmp_path):
    path = tmp_path / "best.keras"
    # The model is built and its step traced in a cell before: the run's fit is then one step an
    # epoch and a save, and the save's share stays far above CHECKPOINT_SHARE on a loaded machine
    # (a first trace inside the fit took 7 s of a 10 s fit under a load of 13 on 2 CPUs, and the
    # four saves' 10% was the tracing's noise).
    setup = "model = make_model(units=512)\nmodel.fit(x, y, batch_size=256, epochs=1, verbose=0)"
    assert run(keras_shell, setup).success
    cell = f"""%%kerasrun --label ckpt --quiet
saver = keras.callbacks.ModelCheckpoint({str(path)!r})
model.fit(x, y, batch_size=256, epochs=4, verbose=0, callbacks=[saver])
"""
    assert run(keras_shell, cell).success
    fit = keras_nbguard.runs("ckpt")[-1].fits[0]
    assert fit.steps == 1  # no trace in the run: the steps were traced in the setup cell
    finding = only("checkpoint_io", "ckpt")
    hooks = {h.name: h for h in keras_nbguard.runs("ckpt")[-1].fits[0].callbacks}
    hook = hooks["ModelCheckpoint.on_epoch_end"]  # it overrides the batch hooks too: no writes
    assert hook.calls == 4 and hooks["ModelCheckpoint.on_train_batch_end"].bytes_written == 0
    assert f"{hook.seconds / fit.seconds:.0%}) in ckpt #1" in finding.message  # the share measured
    saved = path.stat().st_size  # one save's file; four were written
    assert 4 * saved <= hook.bytes_written <= 4 * 4 * saved
    written_mib = float(re.search(r"wrote ([\d.,]+) MiB in 4 calls", finding.message).group(1))
    assert written_mib == round(hook.bytes_written / MiB, 1)
    assert not [f for f in keras_nbguard.diagnose("ckpt") if f.kind == "callbacks"]


def test_a_slow_generator_is_input_pipeline_with_the_time_per_batch(keras_shell):
    cell = """%%kerasrun --label gen --quiet
import time
def batches():
    while True:
        time.sleep(0.3)  # reading and decoding, say: far longer than a step, even under load
        yield x[:32], y[:32]
model = make_model()
model.fit(batches(), steps_per_epoch=4, epochs=3, verbose=0)
"""
    assert run(keras_shell, cell).success
    finding = only("input_pipeline", "gen")
    fit = keras_nbguard.runs("gen")[-1].fits[0]
    assert fit.input_kind == "generator" and fit.input_batches >= 12
    per_batch = fit.input_seconds / fit.input_batches
    assert per_batch >= 0.3  # each batch sleeps that long at least
    assert finding.message.startswith(
        f"your generator took {fmt_seconds(per_batch)} to make "
        f"each of its {fit.input_batches} batches"
    )
    assert "a keras.utils.PyDataset (batch i in __getitem__) with workers=4" in finding.advice


def test_a_slow_py_dataset_is_timed_too_and_a_fast_input_is_not_named(keras_shell):
    cell = """%%kerasrun --label pyds --quiet
import time
class Slow(keras.utils.PyDataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        time.sleep(0.6)  # far longer than a step, even under load (a step took 30-200 ms at a
        return x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32]  # load of 18 on 2 CPUs; CI once
        # saw no finding with 0.3 s: a step's share of an epoch under its load is not known)
model = make_model()
model.fit(Slow(), epochs=3, verbose=0)  # the step time: the median of the epochs after the first
"""
    assert run(keras_shell, cell).success
    fit = keras_nbguard.runs("pyds")[-1].fits[0]
    assert fit.input_kind == "PyDataset" and fit.input_batches == 12
    assert 0.6 * 12 <= fit.input_seconds < fit.seconds
    per_batch = fit.input_seconds / fit.input_batches
    found = [f for f in keras_nbguard.diagnose("pyds") if f.kind == "input_pipeline"]
    assert len(found) == 1, (fit.epoch_seconds, fit.steps, fit.input_seconds)
    assert found[0].message.startswith(
        f"your PyDataset took {fmt_seconds(per_batch)} to make each of its 12 batches"
    )
    assert "super().__init__(workers=4)" in found[0].advice  # its own, not a new one
    fast = (
        "%%kerasrun --label fastgen --quiet\ndef batches():\n    while True:\n"
        "        yield x[:32], y[:32]\nmodel.fit(batches(), steps_per_epoch=6, verbose=0)\n"
    )
    assert run(keras_shell, fast).success
    assert keras_nbguard.runs("fastgen")[-1].fits[0].input_seconds is not None
    assert keras_nbguard.diagnose("fastgen") == []


def test_an_image_data_generator_is_named_so_with_advice_it_can_take(keras_shell):
    # The code people copy from older tutorials: ImageDataGenerator(...).flow(x, y). Its batches
    # are a PyDataset the user never wrote, and flow() takes no workers.
    cell = """%%kerasrun --label idg --quiet
import time
from tensorflow.keras.preprocessing.image import ImageDataGenerator  # as tutorials import it
def decode(image):
    time.sleep(0.1)  # reading and augmenting one image, say: far longer than a step's share
    return image
images = np.random.default_rng(2).random((16, 8, 8, 3), dtype="float32")
datagen = ImageDataGenerator(horizontal_flip=True, preprocessing_function=decode)
pixels = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(1)])
pixels.compile("adam", "mse")
pixels.fit(datagen.flow(images, y[:16], batch_size=4), epochs=3, verbose=0)
"""
    assert run(keras_shell, cell).success
    fit = keras_nbguard.runs("idg")[-1].fits[0]
    assert fit.input_kind == "ImageDataGenerator" and fit.input_batches == 12
    assert fit.input_seconds >= 0.1 * 4 * 12  # four images a batch, each 0.1 s at least
    finding = only("input_pipeline", "idg")
    assert finding.message.startswith(
        f"your ImageDataGenerator took {fmt_seconds(fit.input_seconds / 12)} to make each of "
        "its 12 batches"
    )
    assert "RandomRotation" in finding.advice and "batches.workers = 4" in finding.advice
    assert "PyDataset with workers" not in finding.advice  # what flow() can't take


@pytest.mark.slow
def test_a_dataset_built_in_every_run_is_dataset_rebuilt(keras_shell):
    cell = """%%kerasrun --label rebuilt --quiet
import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a / 2, b)).batch(32)
model = make_model()
model.fit(ds, epochs=1, verbose=0)
"""
    for _ in range(DATASET_RUNS):
        assert run(keras_shell, cell).success
    assert not [f for f in keras_nbguard.diagnose("rebuilt") if f.kind == "dataset_rebuilt"]
    assert run(keras_shell, cell).success  # the third rebuild after the first
    finding = only("dataset_rebuilt", "rebuilt")
    assert "1 of its functions traced again in each of rebuilt #2–#4, " in finding.message
    # what it costs: the time those traces took, each run (the median in the message)
    took = [r.dataset_trace_seconds for r in keras_nbguard.runs("rebuilt")[1:]]
    assert all(
        t is not None and 0 < t < r.wall_seconds
        for t, r in zip(took, keras_nbguard.runs("rebuilt")[1:], strict=True)
    )
    median = sorted(took[-3:])[1]
    walls = sorted(r.wall_seconds for r in keras_nbguard.runs("rebuilt")[-3:])
    # and what share of a run that is (keras.io's Oxford pets cell: 28 ms, 0.2% of its 12.6 s)
    assert finding.message.endswith(
        f"{median * 1000:.0f} ms a run ({median / walls[1]:.1%} of it)"
    ), finding.message
    assert all(" tf.data traces in " in value for _, value in finding.evidence)


def test_a_list_growing_every_run_is_named_with_its_size(keras_shell):
    run(keras_shell, "hoard = []")
    cell = "%%kerasrun --label hoard --quiet\nhoard.append(np.ones(20 * 2**20 // 8))\n"
    for _ in range(MIN_RUNS + 1):
        assert run(keras_shell, cell).success
    finding = only("state_growth", "hoard")
    grown = keras_nbguard.runs("hoard")[-1].growth[0]
    assert (grown.name, grown.kind, grown.items) == ("hoard", "list", 1)
    assert 20 * MiB <= grown.bytes < 21 * MiB
    assert "`hoard` (list) +1 item, +20.0 MiB in the last run" in finding.message
    rate = float(re.search(r"grows ([\d.]+) MiB a run", finding.message).group(1))
    assert 18 <= rate <= 22


def test_a_list_grown_in_a_run_is_named_though_the_run_before_ended_higher():
    """memory_growth.ipynb under load, 1 in 5: the run before ended 30 MiB higher than the
    next started (a prediction's temporaries, freed by the next run's collection), so the 32 MiB
    the list kept read as no rise over that end; no name was named, the growth was judged as
    native memory, and the article's `state_growth` became a note."""
    import numpy as np
    from helpers import make_record

    from keras_nbguard.diagnosis.census import NamespaceCensus

    census = NamespaceCensus(warn=lambda message: None)
    kept = [np.ones(32 * MiB // 8)]
    before = make_record(run_number=1, rss_before=900 * MiB, rss_after=1100 * MiB)
    census.after_run(before, None, {"predictions": kept})
    kept.append(np.ones(32 * MiB // 8))
    this = make_record(run_number=2, rss_before=1070 * MiB, rss_after=1101 * MiB)
    (grown,) = census.after_run(this, before, {"predictions": kept}).growth
    assert (grown.name, grown.items, grown.bytes) == ("predictions", 1, 32 * MiB)
    # a run that kept nothing over where it started still names nothing
    flat = make_record(run_number=3, rss_before=1070 * MiB, rss_after=1071 * MiB)
    assert census.after_run(flat, this, {"predictions": [*kept, 0]}).growth == ()


def test_predict_called_batch_by_batch_is_named_with_what_to_call_instead():
    # keras.io's character-level text generation: 80 predicts of one sample, 58% of the run
    from helpers import make_record

    from keras_nbguard.diagnosis.diagnose import diagnose
    from keras_nbguard.records.calls import InferenceRecord

    def with_calls(kind: str, count: int, seconds: float, steps: int | None = 1, wall=8.0):
        one = InferenceRecord(kind=kind, seconds=seconds / count, batch_size=32, steps=steps)
        folded = one
        for _ in range(count - 1):
            folded = folded.folded(one)
        return make_record(label="gen", run_number=1, wall_seconds=wall, inference=(folded,))

    found = diagnose([with_calls("predict", 80, 4.67)])
    (finding,) = found
    assert finding.kind == "inference_loop"
    # in a notebook the call to type reads as code, not between backticks
    assert "call <code>model.predict_on_batch(x)</code>: no setup" in found._repr_html_()
    assert finding.message.startswith(
        "80 predict calls of one batch each took 4.67 s in gen #1 (58 ms a call, 58% of the run)"
    )
    assert "`model.predict_on_batch(x)`" in finding.advice
    # isolated, the kernel's wait adds the process's start-up: the share is of the cell's time
    isolated = dataclasses.replace(with_calls("predict", 20, 1.16, wall=8.9), cell_seconds=4.3)
    (loop,) = diagnose([isolated])
    assert "(58 ms a call, 27% of the cell)" in loop.message
    assert not diagnose([with_calls("predict", 20, 1.16, wall=8.9)])  # 13% of the run
    evaluate = diagnose([with_calls("evaluate", 20, 2.0)])
    assert [f.kind for f in evaluate] == ["inference_loop"]
    assert "`model.test_on_batch(x, y)`" in evaluate[0].advice
    # a few calls, a small share of the run, calls of many batches, or unknown steps: nothing
    for quiet in (
        with_calls("predict", 9, 4.0),
        with_calls("predict", 80, 1.0, wall=20.0),
        with_calls("predict", 80, 0.4, wall=0.8),  # 50% of the run, but 0.4 s in all
        with_calls("predict", 80, 4.67, steps=8),
        with_calls("predict", 80, 4.67, steps=None),
    ):
        assert diagnose([quiet]) == [], quiet.inference


def test_fit_called_step_by_step_is_a_fit_loop_with_train_on_batch_as_the_advice(keras_shell):
    """A DQN as tutorials write it: ``model.fit(state, target, epochs=1)`` at every step of the
    agent. Each call sets up Keras' data adapter, callbacks and progress: 61 ms a call for a
    Dense(32) model on a CPU, 0.95 ms with ``train_on_batch``."""
    cell = (
        "%%kerasrun --label agent --quiet\nmodel = make_model()\n"
        "for i in range(30):\n    model.fit(x[i : i + 1], y[i : i + 1], epochs=1, verbose=0)\n"
    )
    assert run(keras_shell, cell).success
    (record,) = keras_nbguard.runs("agent")
    assert len(record.fits) == 30 and all(f.steps == 1 and f.epochs == 1 for f in record.fits)
    finding = only("fit_loop", "agent")  # 30 calls: 0.5 s in all even at 20 ms a call
    assert finding.message.startswith("30 fit calls of one batch each took ")
    assert "fit sets up its data adapter, callbacks and progress for every call" in finding.message
    assert "`model.train_on_batch(x, y)`" in finding.advice
    # the same steps in one fit: no loop to speak of
    whole = (
        "%%kerasrun --label whole --quiet\nmodel = make_model()\n"
        "model.fit(x[:20], y[:20], batch_size=1, verbose=0)\n"
    )
    assert run(keras_shell, whole).success
    assert not [f for f in keras_nbguard.diagnose("whole") if f.kind == "fit_loop"]


def test_a_fit_loop_needs_many_one_batch_fits_taking_a_share_of_the_run():
    from helpers import make_record

    from keras_nbguard.diagnosis.diagnose import diagnose
    from keras_nbguard.records.calls import FitRecord

    def with_fits(count: int, seconds: float, steps: int | None = 1, epochs=1, wall=8.0):
        fit = FitRecord(seconds=seconds / count, epochs=epochs, steps=steps, batch_size=32)
        return make_record(label="dqn", run_number=1, wall_seconds=wall, fits=(fit,) * count)

    (finding,) = diagnose([with_fits(100, 6.1)])
    assert finding.kind == "fit_loop" and "(61 ms a call, 76% of the run)" in finding.message
    for quiet in (
        with_fits(9, 4.0),  # a few calls
        with_fits(100, 1.0, wall=20.0),  # a small share of the run
        with_fits(100, 0.4, wall=0.8),  # half of the run, but 0.4 s in all
        with_fits(100, 6.1, steps=8),  # fits of many batches
        with_fits(100, 6.1, epochs=3),  # several epochs a call: steps of their own
        with_fits(100, 6.1, steps=None),  # steps unknown
    ):
        assert diagnose([quiet]) == [], quiet.fits[0]


def test_a_one_sample_predict_records_one_step_and_folds_into_a_bounded_record(keras_shell):
    cell = (
        "%%kerasrun --label onebyone --quiet\nmodel = make_model()\n"
        "for i in range(20):\n    model.predict(x[i : i + 1], verbose=0)\n"
    )
    assert run(keras_shell, cell).success
    (record,) = keras_nbguard.runs("onebyone")
    assert all(c.kind == "predict" and c.steps == 1 for c in record.inference)
    assert sum(c.calls for c in record.inference) == 20 and len(record.inference) == 16


def test_a_callbacks_one_time_work_is_not_named_as_its_cost_per_batch():
    # keras.io's guide to the built-in training methods: TensorBoard writes the model's graph
    # at its first batch end (~130 ms): with the rest, 11% of a 1.45 s fit; ~0.2 ms a batch after
    from helpers import make_record

    from keras_nbguard.diagnosis.diagnose import diagnose
    from keras_nbguard.records.calls import CallbackTime, FitRecord

    def fit_with(*hooks: CallbackTime):
        fit = FitRecord(seconds=1.45, epochs=3, epoch_seconds=(0.6, 0.45, 0.4), callbacks=hooks)
        return make_record(label="tb", run_number=1, fits=(fit,), fit_seconds=1.45)

    once = CallbackTime("TensorBoard.on_train_batch_end", 0.160, 150, 0, slowest=0.130)
    assert diagnose([fit_with(once)]) == []
    # every batch slow: named, with the whole time
    every = CallbackTime("Logger.on_train_batch_end", 0.300, 150, 0, slowest=0.003)
    (finding,) = diagnose([fit_with(every)])
    assert finding.kind == "callbacks" and "took 300 ms of the 1.45 s fit (21%)" in finding.message
    # a hook called once per fit is all one-time work and counts whole (a slow on_train_begin)
    begin = CallbackTime("Setup.on_train_begin", 0.300, 1, 0, slowest=0.300)
    assert [f.kind for f in diagnose([fit_with(begin)])] == ["callbacks"]
    # a record from before the slowest call was kept: judged on the whole time, as before
    old = CallbackTime("TensorBoard.on_train_batch_end", 0.160, 150, 0)
    assert [f.kind for f in diagnose([fit_with(old)])] == ["callbacks"]


XLA_RUNS = """
import json, os, sys, tempfile
os.environ["KERAS_NBGUARD_DB"] = os.path.join(tempfile.mkdtemp(), "runs.sqlite")
from IPython.core.interactiveshell import InteractiveShell
sys.path.insert(0, {tests!r})
from helpers import SETUP_CELL
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "keras_nbguard")
assert shell.run_cell(SETUP_CELL).success
cell = "%%kerasrun --label xla --quiet\\nm = make_model(64)\\n{{compile}}m.fit(x, y, verbose=0)\\n"
xla = cell.format(compile="m.compile('adam', 'mse', jit_compile=True)\\n")
for _ in range({runs}):
    assert shell.run_cell(xla).success
assert shell.run_cell(cell.format(compile="").replace("xla", "plain")).success
import keras_nbguard
runs = keras_nbguard.runs("xla")
print(json.dumps({{
    "xla": [f.xla for r in runs for f in r.fits],
    "plain": [f.xla for f in keras_nbguard.runs("plain")[-1].fits],
    "note": runs[-1].memory_note,
}}))
"""


@pytest.mark.slow
def test_memory_xla_keeps_is_said_to_be_xlas_with_the_way_out():
    """jit_compile=True (Keras 3's default on a GPU): TensorFlow keeps every program XLA
    compiled, and each run's new model is a new one; clear and deep clean can't free them. In
    a fresh interpreter: after other tests, the heap they freed took the programs in (CI: no
    growth over six runs, no note)."""
    script = XLA_RUNS.format(tests=os.path.dirname(__file__), runs=MIN_RUNS + 1)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["xla"] == [True] * (MIN_RUNS + 1)
    assert seen["plain"] == [False]  # "auto" on a CPU
    note = seen["note"]
    assert note is not None and "TensorFlow keeps every program it compiles" in note, note
    assert note.endswith("jit_compile=False compiles nothing to keep")


@pytest.mark.slow
def test_a_pipeline_a_models_own_fit_builds_at_every_call_is_not_yours_rebuilt(keras_shell):
    # KerasHub's tasks (keras.io's BERT classifier: classifier.fit(x=features, y=labels)) turn
    # the arrays into a tf.data pipeline inside their own fit, at every call, as Keras' data
    # adapters do: nothing the user could build once
    cell = """%%kerasrun --label pipelined --quiet
import tensorflow as tf
class Pipelined(keras.Sequential):
    def fit(self, x=None, y=None, batch_size=32, **kwargs):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a / 2, b))
        return super().fit(ds.batch(batch_size), **kwargs)
model = Pipelined([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, epochs=1, verbose=0)
"""
    for _ in range(DATASET_RUNS + 1):
        assert run(keras_shell, cell).success
    assert [r.dataset_traces for r in keras_nbguard.runs("pipelined")] == [0] * (DATASET_RUNS + 1)
    assert not [f for f in keras_nbguard.diagnose("pipelined") if f.kind == "dataset_rebuilt"]
