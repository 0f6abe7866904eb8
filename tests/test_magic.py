"""%%kerasrun on a real InteractiveShell with real TensorFlow (CPU) and tiny models."""

from __future__ import annotations

import re
import signal
import sys

import pytest
from helpers import run
from IPython.utils.capture import capture_output

import keras_nbguard

FIT_CELL = """%%kerasrun --label mlp
model = make_model()
history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
model.layers[0].name
"""


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.slow
def test_five_runs_are_recorded_with_fit_figures(keras_shell):
    for _ in range(5):
        assert run(keras_shell, FIT_CELL).success
    records = keras_nbguard.runs("mlp")
    assert [r.run_number for r in records] == [1, 2, 3, 4, 5]
    for r in records:
        assert r.status == "ok" and r.cleared
        (fit,) = r.fits
        assert fit.epochs == 3 and len(fit.epoch_seconds) == 3
        assert fit.batch_size == 32 and fit.steps == 8 and fit.completed
        assert r.fit_seconds == pytest.approx(fit.seconds)
        assert sum(fit.epoch_seconds) <= fit.seconds <= r.wall_seconds
        assert r.rss_before > 0 and r.rss_peak >= max(r.rss_before, r.rss_after)
        assert r.gpu.tf_peak is None and r.gpu.reason  # CPU only: unknown, with a reason
    assert records[0].previous_run is None
    assert records[4].previous_run == 4 and records[4].delta_fit_seconds is not None


DICT_CELL = """%%kerasrun --label dict
a, b = keras.Input((8,), name="a"), keras.Input((8,), name="b")
two = keras.Model([a, b], keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
two.compile("adam", "mse")
two.fit({"a": x, "b": x}, y, epochs=1, verbose=0)
two.fit([x, x], y, epochs=1, steps_per_epoch=4, verbose=0)
two.fit((x, x), y, epochs=1, steps_per_epoch=5, validation_split=0.1, verbose=0)
two.fit([x, x], y, epochs=1, steps_per_epoch=4, validation_split=0.5,
        validation_data=([x, x], y), verbose=0)
two.evaluate({"a": x, "b": x}, y, steps=2, verbose=0)
"""


@pytest.mark.slow
def test_a_fit_on_several_arrays_without_a_batch_size_has_the_batch_keras_chose(keras_shell):
    """keras.io's endpoint layer pattern fits on a dict of three arrays, no ``batch_size``:
    Keras slices them 32 at a time, as it does one array. The summary said "batch set by your
    input", as for a pipeline that batches itself. With ``steps_per_epoch``, Keras divides the
    samples it trains on by the steps (``steps`` for evaluate and predict)."""
    with capture_output() as shown:
        assert run(keras_shell, DICT_CELL).success
    record = keras_nbguard.runs("dict")[-1]
    # 256/4; Keras trains on floor(256 x 0.9) = 230: ceil(230/5); no split with validation_data
    assert [f.batch_size for f in record.fits] == [32, 64, 46, 64]
    assert [f.steps for f in record.fits] == [8, 4, 5, 4]  # what Keras ran, each at that size
    assert [i.batch_size for i in record.inference] == [128]  # evaluate's steps=2
    summary = plain("".join(o.data.get("text/plain", "") for o in shown.outputs))
    assert "set by your input" not in summary and "batch 32" in summary, summary


PAIR_CELL = """%%kerasrun --label pair
a, b = keras.Input((4,)), keras.Input((4,))
pair = keras.Model([a, b], keras.layers.Add()([a, b]))
"""
JOINED_CELL = """%%kerasrun --label joined
c, d = keras.Input((4,)), keras.Input((4,))
joined = keras.Model([pair.inputs[1], d], keras.layers.Add()([pair.inputs[1], d]))
"""


@pytest.mark.slow
def test_the_clear_resets_keras_but_a_new_input_never_takes_a_kept_inputs_name(keras_shell):
    """keras.io's lstm_seq2seq: its inference cell joins the trained model's input to new ones.
    Our clear restarted Keras' name counters, the new inputs took the kept input's name, and the
    cell that runs bare failed: 'The name "input_layer_1" is used 2 times in the model'."""
    mark = "global_state.set_global_attribute('marked', True)"
    run(keras_shell, f"from keras.src.backend.common import global_state\n{mark}")
    cell = f"{FIT_CELL}\nmarked = global_state.get_global_attribute('marked')\n{mark}\n"
    names = []
    for _ in range(3):
        assert run(keras_shell, cell).success
        assert keras_shell.user_ns["marked"] is None  # what clear_session resets was reset
        names.append(keras_shell.user_ns["model"].layers[0].name)
    assert len(set(names)) == 1  # each run's layers named as the last run's (their variables too)
    assert run(keras_shell, PAIR_CELL).success
    joined = run(keras_shell, JOINED_CELL)
    assert joined.success, joined.error_in_exec
    assert keras_nbguard.runs()[-1].cleared


ENCODER = "encoder = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])"
JOINS_ENCODER = """%%kerasrun --quiet --label {label}
head = keras.Sequential([keras.layers.Dense(1)])
inputs = keras.Input((8,))
{model} = keras.Model(inputs, head(encoder(inputs)))
"""


def test_a_new_layer_never_takes_the_name_of_one_made_outside_the_run(keras_shell):
    """A setup cell's ``encoder`` is named ``sequential``; the clear restarted the counters,
    the run's new ``head`` was named ``sequential`` too, and a model joining them failed ("The
    name "sequential" is used 2 times in the model"): a cell that runs bare broke under the
    magic. A run's layers skip the names kept layers have, and still repeat run after run."""
    assert run(keras_shell, ENCODER).success
    heads = []
    for _ in range(3):
        result = run(keras_shell, JOINS_ENCODER.format(label="joins", model="model"))
        assert result.success, result.error_in_exec
        heads.append(keras_shell.user_ns["head"].name)
    assert len(set(heads)) == 1 and heads[0] != keras_shell.user_ns["encoder"].name
    # another label's latest run keeps its names too, and neither label's names move
    assert run(keras_shell, "encoder = model").success  # the last run's model, now an encoder
    for _ in range(2):
        result = run(keras_shell, JOINS_ENCODER.format(label="other", model="model2"))
        assert result.success, result.error_in_exec
    assert keras_shell.user_ns["head"].name != heads[0]
    assert run(keras_shell, "encoder = model2").success
    again = []
    for _ in range(2):  # an encoder that holds the label's own last head: a name of its own
        result = run(keras_shell, JOINS_ENCODER.format(label="joins", model="model"))
        assert result.success, result.error_in_exec
        again.append(keras_shell.user_ns["head"].name)
        names = [layer.name for layer in keras_shell.user_ns["model"]._flatten_layers()]
        assert len(set(names)) == len(names), names
    assert again[0] == again[1]


REUSES_ITS_ENCODER = """%%kerasrun --quiet --label reuses
try:
    encoder
except NameError:
    encoder = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
head = keras.Sequential([keras.layers.Dense(1)])
inputs = keras.Input((8,))
model = keras.Model(inputs, head(encoder(inputs)))
"""


def test_a_layer_the_cell_reuses_from_its_last_run_keeps_its_name_to_itself(keras_shell):
    """Run 1 makes ``encoder`` (``sequential``) and ``head`` (``sequential_1``); run 2 reuses
    the encoder and the run's restarted counters named its new head ``sequential``: "The name
    "sequential" is used 2 times in the model", where a bare re-run works."""
    heads = []
    for _ in range(3):
        result = run(keras_shell, REUSES_ITS_ENCODER)
        assert result.success, result.error_in_exec
        heads.append(keras_shell.user_ns["head"].name)
    assert len(set(heads)) == 1 and heads[0] != keras_shell.user_ns["encoder"].name
    # the cell edited to make its encoder anew each run: the names of its first run again
    makes_it = REUSES_ITS_ENCODER.replace("try:\n    encoder\nexcept NameError:\n    ", "")
    assert makes_it.count("encoder = ") == 1 and "try" not in makes_it
    result = run(keras_shell, makes_it)
    assert result.success, result.error_in_exec
    assert keras_shell.user_ns["head"].name == heads[0]
    # a cache of the user's own under a private name keeps its layer too
    private = REUSES_ITS_ENCODER.replace("encoder", "_encoder").replace("reuses", "private")
    for _ in range(2):
        result = run(keras_shell, private)
        assert result.success, result.error_in_exec


def test_last_expression_is_the_cell_result_and_names_stay(keras_shell):
    before = set(keras_shell.user_ns)
    result = run(keras_shell, "%%kerasrun --quiet\nvalue = 40\nvalue + 2\n")
    assert result.result == 42
    assert keras_shell.user_ns["value"] == 40
    assert keras_shell.user_ns["_"] == 42
    added = set(keras_shell.user_ns) - before
    # IPython's own output-cache names (_, __, ___, _N, _iN) are not ours
    ours = {n for n in added if not re.fullmatch(r"_{1,3}|_\d+|_i+\d*|value", n)}
    assert ours == set(), f"names left in the user namespace: {ours}"


def test_a_trailing_semicolon_hides_the_value_as_in_a_plain_cell(keras_shell):
    result = run(keras_shell, "%%kerasrun --quiet\nseen = []\nseen.append(1) or 42;  # quiet\n")
    assert result.result is None and keras_shell.user_ns["seen"] == [1]  # still evaluated
    assert run(keras_shell, "%%kerasrun --quiet\n'a;b'\n").result == "a;b"


def test_summary_is_shown_as_text_and_html(keras_shell):
    with capture_output() as cap:
        run(keras_shell, FIT_CELL)
    (summary,) = [o.data for o in cap.outputs if "text/html" in o.data]
    assert "kerasrun 'mlp'" in summary["text/plain"] and "fit" in summary["text/plain"]
    assert "epochs [" in summary["text/plain"]
    assert "<table" in summary["text/html"]


def test_quiet_shows_no_summary(keras_shell):
    with capture_output() as cap:
        run(keras_shell, "%%kerasrun --quiet\nmodel = make_model()\n")
    assert not cap.outputs
    assert keras_nbguard.runs()[-1].fits == ()


def test_error_keeps_user_traceback_records_run_and_stops_run_all(keras_shell):
    with capture_output() as cap:
        result = run(keras_shell, "%%kerasrun --label boom\na = 1\nb = 1 / 0\nc = 3\n")
    assert not result.success and isinstance(result.error_in_exec, ZeroDivisionError)
    text = plain(cap.stdout)
    assert "----> 3 b = 1 / 0" in text and "line 3" in text
    assert "keras_nbguard" not in text.replace("%%kerasrun", "")
    assert "c" not in keras_shell.user_ns or keras_shell.user_ns.get("c") != 3
    record = keras_nbguard.runs("boom")[-1]
    assert record.status == "error" and record.error == "ZeroDivisionError: division by zero"


def started_runs():
    """The Run objects the session starts from now on (to look at their collectors after)."""
    seen = []
    keras_nbguard.get_session().events.subscribe("start", seen.append)
    return seen


def test_keyboard_interrupt_is_recorded_as_interrupted(keras_shell):
    runs = started_runs()
    run(keras_shell, "%%kerasrun --label stop --quiet\nraise KeyboardInterrupt\n")
    assert keras_nbguard.runs("stop")[-1].status == "interrupted"
    assert runs and not runs[0].sampler.running  # the sampler thread ended


def _press_stop(*_: object) -> None:
    """The kernel's stop button: SIGINT, to whichever handler is in force."""
    signal.raise_signal(signal.SIGINT)


def test_a_stop_pressed_while_the_run_is_prepared_keeps_it_and_runs_no_cell(keras_shell):
    """Pressed in our preparation (here: as the run starts), the run was never recorded and
    stayed claimed: every later %%kerasrun said "run is still going" until a restart."""
    events = keras_nbguard.get_session().events
    events.subscribe("start", _press_stop)
    try:
        result = run(keras_shell, "%%kerasrun --label stop --quiet\nran = True\n")
    finally:
        events.unsubscribe("start", _press_stop)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert "the cell did not run" in str(result.error_in_exec)
    assert "ran" not in keras_shell.user_ns
    assert keras_nbguard.runs("stop")[-1].status == "interrupted"
    assert run(keras_shell, "%%kerasrun --label stop --quiet\nran = True\n").success
    assert [r.status for r in keras_nbguard.runs("stop")] == ["interrupted", "ok"]


def test_a_second_stop_press_stops_our_preparation_at_once_and_frees_the_kernel(keras_shell):
    """Held, one press waits for our work to end: a second one must stop it (our work may hang),
    and the run must not stay claimed."""
    events = keras_nbguard.get_session().events

    def press_twice(*_: object) -> None:
        _press_stop()
        _press_stop()

    events.subscribe("start", press_twice)
    try:
        result = run(keras_shell, "%%kerasrun --label twice --quiet\nran = True\n")
    finally:
        events.unsubscribe("start", press_twice)
    assert "pressed twice" in str(result.error_in_exec)
    assert "ran" not in keras_shell.user_ns
    assert run(keras_shell, "%%kerasrun --label twice --quiet\nran = True\n").success


def test_a_stop_pressed_while_the_record_is_kept_stops_the_cell_after_it(keras_shell):
    """Pressed as the record is handed round, it cut the round short: the dashboard and the
    other subscribers after the press never heard of the run."""
    events = keras_nbguard.get_session().events
    heard: list = []
    events.subscribe("record", _press_stop)
    events.subscribe("record", heard.append)
    try:
        result = run(keras_shell, "%%kerasrun --label late --quiet\nran = True\n")
    finally:
        events.unsubscribe("record", _press_stop)
        events.unsubscribe("record", heard.append)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert keras_shell.user_ns["ran"] is True
    assert [r.status for r in heard] == ["ok"]  # the cell had ended well: its record says so
    assert run(keras_shell, "%%kerasrun --label late --quiet\nran = 2\n").success


STOP_ONCE = """
import signal
import tensorflow as tf
STOPS = [1]
class StopOnce(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if STOPS and batch == 3:
            STOPS.pop()
            signal.raise_signal(signal.SIGINT)  # the stop button, mid-fit, once
"""


def test_a_fit_stopped_while_caching_to_a_file_runs_again(keras_shell, tmp_path):
    """The stopped fit's frames, kept in the last traceback, hold its tf.data iterator and with
    it the cache file's lock: bare, every re-run of the cell failed (AlreadyExistsError: "a
    concurrent caching iterator running"). A run forgets its cell's last failure's traceback
    first, and only that one: another cell's error since is left for %debug."""
    run(keras_shell, STOP_ONCE)
    cache = str(tmp_path / "c")
    cell = (
        "%%kerasrun --label cached --quiet\n"
        f"ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).cache({cache!r})\n"
        "model = make_model()\nmodel.fit(ds, epochs=2, verbose=0, callbacks=[StopOnce()])\n"
    )
    assert isinstance(run(keras_shell, cell).error_in_exec, KeyboardInterrupt)
    again = run(keras_shell, cell)
    assert again.success, again.error_in_exec
    assert [r.status for r in keras_nbguard.runs("cached")] == ["interrupted", "ok"]
    run(keras_shell, "%%kerasrun --label other --quiet\nraise ValueError('kept')\n")
    assert run(keras_shell, cell).success
    assert str(sys.last_value) == "kept"  # not this cell's failure: left alone


def test_resource_exhausted_is_oom_with_advice_from_the_run(keras_shell):
    cell = """%%kerasrun --label big --quiet
import tensorflow as tf
model = make_model()
class Boom(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
model.fit(x, y, epochs=2, batch_size=64, verbose=0, callbacks=[Boom()])
"""
    assert not run(keras_shell, cell).success
    record = keras_nbguard.runs("big")[-1]
    assert record.status == "oom"
    (fit,) = record.fits
    assert fit.completed is False and fit.batch_size == 64
    advice = " ".join(record.advice)
    assert "batch_size=64" in advice and "batch_size=32" in advice
    assert "--mixed-precision" in advice and "optimizer state" in advice


@pytest.mark.parametrize(
    "raised",
    [
        # as torch raises it on a GPU (seen on an H200, through Keras' LSTM.call)
        "import torch\nraise torch.cuda.OutOfMemoryError("
        "'CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0 has a total capacity')",
        # as XLA reports it under JAX
        "import jax.errors\nraise jax.errors.JaxRuntimeError("
        "'RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.20GiB.')",
    ],
    ids=["torch", "jax"],
)
def test_torch_and_jax_out_of_memory_is_oom(keras_shell, raised):
    run(keras_shell, f"%%kerasrun --label gpu_oom --quiet\n{raised}\n")
    record = keras_nbguard.runs("gpu_oom")[-1]
    assert record.status == "oom" and record.advice
    if "CUDA" in raised:  # the error names the GPU: its memory, not the host's (no GPU here)
        assert "ran out of GPU memory" in record.advice[0], record.advice


def test_memory_error_is_oom(keras_shell):
    run(keras_shell, "%%kerasrun --label mem --quiet\nraise MemoryError()\n")
    record = keras_nbguard.runs("mem")[-1]
    assert record.status == "oom" and record.advice


@pytest.mark.parametrize(
    "options, message",
    [
        ("--bogus", "unrecognized arguments"),
        ("--gpu-limit 0", "positive number of MiB"),
        ("--gpu-limit lots", "invalid int value"),
        ("--mixed-precision float8", "unknown policy"),
        # --parallel without --sweep: refused, never ignored (isolated or not)
        ("--isolate --parallel 2", "--parallel 2 runs the points of a --sweep side by side"),
        ("--parallel 2", "it needs --sweep"),
        ("--isolate --yes", "--yes runs a --sweep of more than 100 points: it needs --sweep"),
        ("--isolate --gpus 1", "--gpus is what each Ray task asks for: it needs --cluster ray"),
        ("--outputs a --prestart", "--outputs and --prestart act on a run in another process"),
    ],
)
def test_bad_options_are_usage_errors_and_the_cell_does_not_run(keras_shell, options, message):
    keras_shell.user_ns.pop("ran", None)
    with capture_output() as cap:
        result = run(keras_shell, f"%%kerasrun {options}\nran = True\n")
    assert not result.success
    assert "UsageError" in plain(cap.stderr + cap.stdout)
    assert message in plain(cap.stderr + cap.stdout)
    assert "Traceback" not in plain(cap.stdout)
    assert "ran" not in keras_shell.user_ns


def test_mixed_precision_is_reapplied_after_each_clear(keras_shell):
    cell = (
        "%%kerasrun --label mp --quiet --mixed-precision\n"
        "model = make_model()\nmodel.layers[0].dtype_policy.name\n"
    )
    assert [run(keras_shell, cell).result for _ in range(2)] == ["mixed_float16"] * 2
    run(keras_shell, "keras.config.set_dtype_policy('float32')")


def test_users_own_dtype_policy_survives_our_clear(keras_shell):
    run(keras_shell, "keras.config.set_dtype_policy('mixed_bfloat16')")
    try:
        result = run(keras_shell, "%%kerasrun --quiet\nkeras.config.dtype_policy().name\n")
        assert result.result == "mixed_bfloat16"
    finally:
        run(keras_shell, "keras.config.set_dtype_policy('float32')")


def test_users_own_keras_config_survives_our_clear(keras_shell):
    """clear_session resets keras.config's switches and set_random_seed's seed: a user who
    silenced the progress bars in a setup cell got them back in every run (a plain cell keeps
    them off)."""
    switches = (
        "(keras.config.is_interactive_logging_enabled(), "
        "keras.config.is_traceback_filtering_enabled(), "
        "keras.src.utils.rng_utils.get_random_seed())"
    )
    run(
        keras_shell,
        "keras.config.disable_interactive_logging()\nkeras.config.disable_traceback_filtering()\n"
        "keras.utils.set_random_seed(7)",
    )
    try:
        result = run(keras_shell, f"%%kerasrun --quiet\n{switches}\n")
        assert keras_nbguard.runs()[-1].cleared
        assert result.result == (False, False, 7)
    finally:
        run(
            keras_shell,
            "keras.config.enable_interactive_logging()\nkeras.config.enable_traceback_filtering()",
        )


def test_several_fits_in_one_cell_and_no_fit(keras_shell):
    cell = """%%kerasrun --label two --quiet
model = make_model()
model.fit(x, y, epochs=1, batch_size=16, verbose=0)
model.fit(x, y, epochs=2, batch_size=64, verbose=0)
"""
    run(keras_shell, cell)
    record = keras_nbguard.runs("two")[-1]
    assert [(f.epochs, f.batch_size) for f in record.fits] == [(1, 16), (2, 64)]
    assert record.fit_seconds == pytest.approx(sum(f.seconds for f in record.fits))
    run(keras_shell, "%%kerasrun --label none --quiet\npass\n")
    none = keras_nbguard.runs("none")[-1]
    assert none.fits == () and none.fit_seconds is None


def test_user_callbacks_are_timed_and_ours_keeps_async_dispatch(keras_shell):
    cell = """%%kerasrun --label cb --quiet
import time
class Slow(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.05)
slow = Slow()
model = make_model()
model.fit(x, y, epochs=3, batch_size=32, verbose=0, callbacks=[slow])
"""
    run(keras_shell, cell)
    (fit,) = keras_nbguard.runs("cb")[-1].fits
    assert 0.15 <= fit.callback_seconds < fit.seconds
    assert "on_epoch_end" not in vars(keras_shell.user_ns["slow"])  # our wrapper was removed

    import keras
    from keras.src import utils

    from keras_nbguard.collectors.finalizer_stops import StopsInFinalizers
    from keras_nbguard.collectors.fit import _epoch_clock_class

    ours = _epoch_clock_class(keras.callbacks.Callback)(None, lambda: 0.0, [], StopsInFinalizers())
    # evaluate and predict too: ours is in their callbacks for their steps
    for hook in (
        "on_train_batch_begin",
        "on_train_batch_end",
        "on_batch_end",
        "on_test_batch_begin",
        "on_test_batch_end",
        "on_predict_batch_begin",
        "on_predict_batch_end",
    ):
        assert utils.is_default(getattr(ours, hook)), hook


def test_fit_patch_and_sampler_are_gone_after_every_run(keras_shell):
    import keras

    runs = started_runs()
    run(keras_shell, "%%kerasrun --quiet\nmodel = make_model()\nmodel.fit(x, y[:3], verbose=0)\n")
    record = keras_nbguard.runs()[-1]
    assert record.status == "error"
    assert record.fits and record.fits[0].completed is False
    assert "fit" not in keras.Model.__dict__
    assert not runs[0].sampler.running


def test_retracing_is_counted(keras_shell):
    run(keras_shell, FIT_CELL)
    assert keras_nbguard.runs("mlp")[-1].traces >= 1
    same = "%%kerasrun --label again --quiet --no-clear\nmodel.fit(x, y, epochs=1, verbose=0)\n"
    run(keras_shell, same)
    again = keras_nbguard.runs("again")[-1]
    # same model; Keras' own pipeline for the arrays is not the user's to fix
    assert again.traces == 0 and again.dataset_traces == 0 and again.dataset_trace_seconds == 0
    built = (
        "%%kerasrun --label built --quiet --no-clear\nimport tensorflow as tf\n"
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b))"
        ".batch(8)\nmodel.fit(ds, epochs=1, verbose=0)\n"
    )
    run(keras_shell, built)
    rebuilt = keras_nbguard.runs("built")[-1]
    assert rebuilt.dataset_traces == 1  # the map, traced anew, and the time it took
    assert 0 < rebuilt.dataset_trace_seconds < rebuilt.wall_seconds
    took = f"1 tf.data of yours ({rebuilt.dataset_trace_seconds * 1000:.0f} ms)"
    assert took in rebuilt.summary_text()


def test_a_strategys_own_functions_are_counted_apart_from_the_users(keras_shell):
    # keras.io's distributed training guide: a MirroredStrategy (one CPU replica here) traces
    # six tf.functions of its multi-device iterator for every iterator, 84 in a small fit and
    # evaluate; they read as "_init_func 14x" in the user's count before
    cell = (
        "%%kerasrun --label mirrored\nimport tensorflow as tf\n"
        "strategy = tf.distribute.MirroredStrategy()\n"
        "with strategy.scope():\n    model = make_model()\n"
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)\n"
        "model.fit(ds, epochs=2, validation_data=ds, verbose=0)\n"
    )
    with capture_output() as cap:
        run(keras_shell, cell)
    record = keras_nbguard.runs("mirrored")[-1]
    assert record.framework_traces and record.framework_traces >= 6
    assert record.traces is not None and record.traces <= 3  # the train and validation steps
    assert not any(name.startswith("_") and "func" in name for name, _ in record.traced)
    (summary,) = [o.data["text/plain"] for o in cap.outputs if "text/html" in o.data]
    assert f"{record.framework_traces} more of TensorFlow's own functions" in summary


def test_a_rerun_cell_gets_no_retracing_warning_from_tensorflow(keras_shell):
    """Each run's new model traces its steps once; TensorFlow counts traces per Keras' code
    across models and, from the fifth run of a cell on, warned "5 out of the last 5 calls ...
    triggered tf.function retracing" under the magic too. A clear starts its count anew."""
    import logging

    warned = []
    handler = logging.Handler()
    handler.emit = lambda record: warned.append(record.getMessage())
    tensorflow_log = logging.getLogger("tensorflow")
    tensorflow_log.addHandler(handler)
    # one step each (a predict on one sample, as Keras' FeatureSpace example ends): the calls
    # that find their trace cached are too few to hide the first one's
    cell = "m = make_model()\nm.fit(x[:8], y[:8], verbose=0)\np = m.predict(x[:1], verbose=0)\n"
    try:
        for _ in range(7):
            assert run(keras_shell, "%%kerasrun --label reruns --quiet\n" + cell).success
        assert not [w for w in warned if "triggered tf.function retracing" in w]
        # retracing within a run is still warned of (a new Python number each call)
        retraces = "%%kerasrun --label within --quiet\nimport tensorflow as tf\n"
        retraces += "f = tf.function(lambda v: v * 2)\nfor i in range(6):\n    f(i)\n"
        assert run(keras_shell, retraces).success
        assert [w for w in warned if "lambda" in w and "triggered tf.function retracing" in w]
        warned.clear()
        for _ in range(7):  # the same cell plain: TensorFlow warns, so the check above can fail
            assert run(keras_shell, cell).success
        assert [w for w in warned if "triggered tf.function retracing" in w]
    finally:
        tensorflow_log.removeHandler(handler)
    assert {r.findings for r in keras_nbguard.runs("reruns")} == {()}  # and we name nothing


def test_default_label_is_stable_across_reruns(keras_shell):
    cell = "%%kerasrun --quiet\nsteps = 1  # a comment\n"
    run(keras_shell, cell)
    run(keras_shell, cell)
    label = keras_nbguard.runs()[-1].label
    assert label == "steps = 1  # a comment"
    assert [r.run_number for r in keras_nbguard.runs(label)] == [1, 2]


def test_nbguard_subcommands(keras_shell):
    run(keras_shell, FIT_CELL)
    table = keras_shell.run_line_magic("nbguard", "runs --label mlp")
    assert "mlp" in table.text() and "status" in table.text()
    status = keras_shell.run_line_magic("nbguard", "status").text()
    assert "runs" in status and re.search(r"keras\s+Keras 3\.\S+ \(tensorflow\)", status)
    config = keras_shell.run_line_magic("nbguard", "config --no-clear --gpu-limit 512").text()
    assert "off (--no-clear)" in config and "512 MiB" in config
    assert keras_nbguard.get_session().options.clear is False
    keras_shell.run_line_magic("nbguard", "config --clear --no-gpu-limit")
    assert keras_nbguard.get_session().options.gpu_limit_mb is None
    assert keras_nbguard.get_session().options.clear is True


def test_an_operand_after_an_option_is_still_the_operand(shell, tmp_path):
    """``%nbguard export --label a FILE`` as ``export FILE --label a``: argparse's parse_args
    gave the operands only the words before the first option ("unrecognized arguments: FILE")."""
    for _ in range(2):
        assert run(shell, "%%kerasrun --label a --quiet\nz = 1\n").success
    assert run(shell, "%%kerasrun --label b --quiet\nz = 2\n").success
    table = shell.run_line_magic("nbguard", "runs --this-kernel a").text()
    assert re.findall(r"^(\w+) +\d+ +ok", table, re.MULTILINE) == ["a", "a"], table
    assert shell.run_line_magic("nbguard", "diagnose --label a a") is not None
    compared = shell.run_line_magic("nbguard", "compare --this-kernel a:1 a:2").text()
    assert "a #1" in compared and "a #2" in compared
    shell.run_line_magic("nbguard", f"export --label a {tmp_path / 'a.csv'} --force")
    shell.run_line_magic("nbguard", f"export --this-kernel {tmp_path / 'all.csv'}")
    assert (tmp_path / "a.csv").read_text().count("\n") == 3  # the header, a #1, a #2
    assert (tmp_path / "all.csv").read_text().count("\n") == 4


def test_help_comes_from_magic_arguments(shell):
    doc = shell.magics_manager.magics["cell"]["kerasrun"].__doc__
    for option in (
        "--label",
        "--no-clear",
        "--gpu-growth",
        "--no-gpu-growth",
        "--gpu-limit",
        "--mixed-precision",
        "--quiet",
    ):
        assert option in doc
    assert "status" in shell.magics_manager.magics["line"]["nbguard"].__doc__


@pytest.mark.slow
def test_deep_clean_purges_the_dead_runs_gradient_entries(keras_shell):
    # Run 1's model dies while run 2 rebinds `model`; the collection that frees it comes before
    # run 3, and the purge (before a run's one collection) sees it dead at run 4.
    for _ in range(4):
        run(keras_shell, FIT_CELL.replace("--label mlp", "--label deep --quiet"))
    cleans = [r.deep_clean for r in keras_nbguard.runs("deep")]
    assert all(c.available for c in cleans) and sum(c.entries for c in cleans) > 0
    purged = next(r for r in keras_nbguard.runs("deep") if r.deep_clean.entries)
    assert "gradient entries" in dict(purged.summary_rows())["deep clean"]  # shown: it freed some
    run(keras_shell, FIT_CELL.replace("--label mlp", "--label deep --quiet --no-deep-clean"))
    assert keras_nbguard.runs("deep")[-1].deep_clean is None


@pytest.mark.slow
def test_nbguard_leaks_and_free_through_the_magic(keras_shell):
    run(keras_shell, FIT_CELL.replace("--label mlp", "--label lk --quiet"))
    run(keras_shell, "old = model")
    run(keras_shell, FIT_CELL.replace("--label mlp", "--label lk --quiet"))
    report = keras_shell.run_line_magic("nbguard", "leaks")
    stale = [leak for leak in report.leaks if leak.stale]
    assert any("old" in leak.paths for leak in stale)
    freed = keras_shell.run_line_magic("nbguard", "free")
    assert "old" not in keras_shell.user_ns and "model" in keras_shell.user_ns
    assert freed.rss_before is not None


def test_a_fit_that_fails_inside_shows_none_of_our_frames(keras_shell):
    """JupyterLab, keras.io's VAE given the wrong shape: the traceback went through
    `keras_nbguard/collectors/traces.py … traced`, twice, and a user suspects the extension.
    Every wrapper of ours between the user's code and the error hides its frame from IPython,
    in a callback's error too (the callback clock's hook)."""
    cells = {
        "shape": "model = make_model()\nmodel.fit(x[:, :3], y, epochs=1, verbose=0)\n",
        "callback": (
            "class Boom(keras.callbacks.Callback):\n"
            "    def on_epoch_end(self, epoch, logs=None):\n"
            "        raise RuntimeError('boom in a callback')\n"
            "model = make_model()\n"
            "model.fit(x, y, epochs=1, verbose=0, callbacks=[Boom()])\n"
        ),
    }
    for label, body in cells.items():
        with capture_output() as cap:
            result = run(keras_shell, f"%%kerasrun --quiet --label {label}\n{body}")
        assert not result.success
        text = plain(cap.stdout)
        assert "Traceback" in text or "Error" in text, text[-500:]
        assert "keras_nbguard" not in text.replace("%%kerasrun", ""), text
        if label == "shape":  # as bare: Keras' innermost frame, where the error was raised
            assert "keras/src/layers/input_spec.py" in text, text
    filters = sys.modules["keras.src.utils.traceback_utils"]._EXCLUDED_PATHS
    assert not [path for path in filters if "keras_nbguard" in path]  # restored after the run
