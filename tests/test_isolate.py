"""``%%kerasrun --isolate`` and ``--sweep`` with real processes, a real shell, real TensorFlow in
the children: names in and out, the last value, streamed prints, a child killed, an interrupt,
what can't be sent, a sweep run two at a time, and a kernel that imports no TensorFlow for it."""

from __future__ import annotations

import _thread
import gc
import glob
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
import warnings
import weakref

import numpy as np
import pytest
from helpers import alive_at_each_load, one_ray_at_a_time, run
from IPython.utils.capture import capture_output

import keras_nbguard

pytestmark = pytest.mark.slow

FIT = """%%kerasrun --isolate --label iso
import keras
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(scale(x), y, epochs=2, verbose=0)
print("hello from", "the child")
scores = {"loss": float(model.evaluate(x, y, verbose=0))}
scores["loss"] >= 0
"""


@pytest.fixture
def iso_shell(shell):
    assert run(
        shell,
        "import numpy as np\nx = np.ones((64, 8), 'float32')\n"
        "y = np.zeros((64, 1), 'float32')\ndef scale(a):\n    return a * 2\n",
    ).success
    return shell


def test_names_go_in_and_come_back_with_the_value_and_prints(iso_shell):
    with capture_output() as seen:
        result = run(iso_shell, FIT)
    assert result.success, result.error_in_exec
    assert result.result is True  # the last expression, as in a plain cell
    assert "hello from the child" in seen.stdout  # streamed from the child
    ns = iso_shell.user_ns
    assert isinstance(ns["scores"], dict) and ns["scores"]["loss"] >= 0
    assert ns["model"].predict(ns["x"][:2], verbose=0).shape == (2, 1)  # a model that predicts
    (record,) = keras_nbguard.runs("iso")
    assert record.status == "ok" and record.cleared and record.isolated
    assert "fresh process" in record.isolated and "not sent back" not in record.isolated
    # the cell's `import keras` comes back as the notebook's own module (it said "keras (a
    # module: import it in the notebook)", and a later cell using it failed)
    assert ns["keras"] is sys.modules["keras"]
    # the cell's own time, apart from the kernel's wait (its loops' shares are of it)
    assert 0 < record.cell_seconds < record.wall_seconds
    (fit,) = record.fits  # the child's own measurements
    assert fit.epochs == 2 and record.inference[0].kind == "evaluate"
    assert record.pid == os.getpid()  # the kernel's run: its history, its numbering
    assert record.rss_samples  # and the child's RSS, as it went


ENDS_IN_FIT = """%%kerasrun --isolate --quiet --label last
import keras
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, epochs=1, verbose=0)
"""


def test_a_cell_ending_in_fit_brings_its_model_back_once_and_lets_the_last_one_go(iso_shell):
    """The cell's value, a History, holds the model that came back as ``model``, not a second
    copy that ``Out[n]`` keeps; an earlier run's model goes once the next run starts, as an
    in-process run's does (Keras' own examples end in ``model.fit(...)``)."""
    models = []
    for _ in range(3):
        result = run(iso_shell, ENDS_IN_FIT)
        assert result.success, result.error_in_exec
        assert result.result.model is iso_shell.user_ns["model"]
        models.append(weakref.ref(iso_shell.user_ns["model"]))
        del result
    gc.collect()  # what the next run's start does: the last run cut its History's link
    assert [m() is not None for m in models] == [False, False, True]
    # each run says which earlier model it let go (they were said a run late: #3 said #1's)
    runs = keras_nbguard.runs("last")
    assert [r.released_models.runs if r.released_models else () for r in runs] == [(), (1,), (2,)]
    last = runs[-1]
    assert "back 1 model + the cell's value " in last.isolated, last.isolated  # not "1 name"
    parts = [part for part, _ in last.own_time]  # the child's leak check and the kernel's: one
    assert len(parts) == len(set(parts)), last.own_time


ESTIMATOR = """%%kerasrun --isolate --quiet --label est
import keras
from keras.wrappers import SKLearnRegressor
def build(X, y):
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
est = SKLearnRegressor(model=build, fit_kwargs=dict(epochs=1, verbose=0))
est.fit(x, y.ravel())
"""


def test_a_cell_ending_in_an_estimators_fit_shows_that_estimator_not_a_copy(iso_shell):
    """``est.fit(X, y)`` returns ``est``: the cell's value is the name's object, as in a plain
    cell, not a second copy of it (and of its model) that ``Out[n]`` kept, one a run."""
    models = []
    for _ in range(2):
        result = run(iso_shell, ESTIMATOR)
        assert result.success, result.error_in_exec
        assert result.result is iso_shell.user_ns["est"]
        models.append(weakref.ref(iso_shell.user_ns["est"].model_))
        del result
    gc.collect()
    assert [m() is not None for m in models] == [False, True]  # run 1's left Out[n] with it
    shown = [v for v in iso_shell.user_ns["Out"].values() if type(v).__name__ == "SKLearnRegressor"]
    assert shown == [iso_shell.user_ns["est"]]


BEST_MODELS = """%%kerasrun --isolate --quiet --label best
import keras
def build(units):
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(units), keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
models = [build(4), build(2)]  # as KerasTuner's get_best_models(num_models=2) gives them
best_model = models[0]
by_name = {"best": best_model, "runner-up": models[1]}
best_model.fit(x, y, epochs=1, verbose=0)
"""


def test_a_model_in_several_names_comes_back_once_and_stays_one_object(iso_shell):
    """keras.io's KerasTuner guide: ``models = tuner.get_best_models(2)``, ``best_model =
    models[0]``. Each name pickled on its own brought two copies back: ``best_model is
    models[0]`` was False, the same weights twice in the kernel."""
    result = run(iso_shell, BEST_MODELS)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    assert ns["best_model"] is ns["models"][0] is ns["by_name"]["best"]
    assert ns["by_name"]["runner-up"] is ns["models"][1]
    assert [m.layers[0].units for m in ns["models"]] == [4, 2]
    assert ns["best_model"].predict(ns["x"][:2], verbose=0).shape == (2, 1)
    (record,) = keras_nbguard.runs("best")
    assert "back 2 models + 3 names + the cell's value" in record.isolated, record.isolated


NESTED = """%%kerasrun --isolate --label nested
import keras
base_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)], name="base")
inputs = keras.Input((8,))
model = keras.Model(inputs, keras.layers.Dense(1)(base_model(inputs)))
model.compile("adam", halved_mse)  # a loss of the notebook's, found by name as it comes back
model.fit(x, y, epochs=2, verbose=0)
end_to_end_model = keras.Model(inputs, model(inputs))
end_to_end_model.compile("adam", "mse")
"""


def test_a_model_that_is_another_ones_layer_comes_back_as_that_layer(iso_shell):
    """keras.io's transfer learning guide builds ``model`` on ``base_model`` and then unfreezes
    it (``base_model.trainable = True``) to fine-tune; its text example builds
    ``end_to_end_model`` on ``model``. Each came back in a file of its own with a copy of the
    other inside, and the unfreezing no longer reached ``model``."""
    loss = "import keras\ndef halved_mse(y, p):\n    return keras.ops.mean((y - p) ** 2) / 2\n"
    assert run(iso_shell, loss).success
    result = run(iso_shell, NESTED)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    base, model, outer = ns["base_model"], ns["model"], ns["end_to_end_model"]
    assert any(layer is model for layer in outer.layers)
    assert any(layer is base for layer in model.layers)
    assert int(model.optimizer.iterations.numpy()) == 4  # its own training state came along
    trainable = len(model.trainable_weights)
    base.trainable = False  # the guide's step, in the kernel
    assert len(model.trainable_weights) == trainable - 2
    model.fit(ns["x"], ns["y"], epochs=1, verbose=0)  # still compiled: Adam goes on
    assert int(model.optimizer.iterations.numpy()) == 6
    x = ns["x"][:2] + 1
    assert np.allclose(outer.predict(x, verbose=0), model.predict(x, verbose=0))
    (record,) = keras_nbguard.runs("nested")
    assert "back 3 models" in record.isolated and "a copy of" not in record.isolated


SHARED = """%%kerasrun --isolate --label shared
import keras
initial_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="a"),
                                  keras.layers.Dense(4, name="b"), keras.layers.Dense(1)])
feature_extractor = keras.Model(initial_model.inputs, initial_model.get_layer("b").output)
initial_model.compile("adam", "mse")
initial_model.fit(x, y, epochs=1, verbose=0)
"""


def test_a_model_built_on_anothers_layers_comes_back_on_those_layers(iso_shell):
    """keras.io's Sequential guide: ``feature_extractor = keras.Model(initial_model.inputs,
    initial_model.get_layer(...).output)`` shares ``initial_model``'s layers. Each came back
    with its own copy of them; the smaller one is rebuilt on the larger one's layers now."""
    result = run(iso_shell, SHARED)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    extractor, initial = ns["feature_extractor"], ns["initial_model"]
    assert extractor.layers[1] is initial.layers[0] and extractor.layers[2] is initial.layers[1]
    assert int(initial.optimizer.iterations.numpy()) == 2  # the larger one stays as it loaded
    initial.layers[1].bias.assign(np.full(4, 7.0, "float32"))
    initial.layers[1].kernel.assign(np.zeros((4, 4), "float32"))
    assert np.allclose(extractor.predict(ns["x"][:2], verbose=0), 7.0)
    (record,) = keras_nbguard.runs("shared")
    assert "back 2 models" in record.isolated and "copy" not in record.isolated


def test_an_isolated_cell_names_layers_on_from_the_kernels_names_and_back(iso_shell):
    """keras.io's lstm_seq2seq inference cell, isolated: it joins a model's own inputs to new
    ``keras.Input``s. A fresh process named the new ones ``input_layer``, ``input_layer_1``
    again, beside the sent model's ``input_layer_1``, and the cell failed ('The name
    "input_layer_1" is used 2 times in the model'); it runs in the kernel. The child now names
    on past the kernel's names, and the kernel on past the child's; the kernel's keras.config
    and dtype policy hold there (a setup cell's mixed precision was float32 in the child)."""
    # the kernel's names from the start, as a fresh process has them
    assert run(iso_shell, "import keras\nkeras.utils.clear_session()").success
    assert run(
        iso_shell,
        "a, b = keras.Input((4,)), keras.Input((4,))\n"
        "pair = keras.Model([a, b], keras.layers.Add()([a, b]))\n"
        "keras.config.disable_interactive_logging()\n"
        "keras.config.set_dtype_policy('mixed_bfloat16')\n"
        "keras.config.set_image_data_format('channels_first')",
    ).success
    try:
        joined = run(
            iso_shell,
            "%%kerasrun --isolate --quiet --label joined\n"
            "c, d = keras.Input((4,)), keras.Input((4,))\n"
            "joined = keras.Model([pair.inputs[1], d], keras.layers.Add()([pair.inputs[1], d]))\n"
            "there = (keras.config.is_interactive_logging_enabled(), "
            "keras.config.dtype_policy().name, keras.config.image_data_format())\n",
        )
        assert joined.success, joined.error_in_exec
        ns = iso_shell.user_ns
        assert [t.name for t in ns["joined"].inputs] == ["input_layer_1", "input_layer_3"]
        assert ns["there"] == (False, "mixed_bfloat16", "channels_first")  # as in the kernel
        assert run(iso_shell, "keras.layers.InputLayer(shape=(4,)).name").result == "input_layer_4"
    finally:
        run(iso_shell, "keras.config.enable_interactive_logging()")
        run(iso_shell, "keras.config.set_dtype_policy('float32')")
        run(iso_shell, "keras.config.set_image_data_format('channels_last')")


def test_a_model_compiled_with_a_loss_a_function_made_comes_back_compiled(iso_shell):
    """keras.io's siamese example compiles with ``loss(margin)``, which returns its inner
    ``contrastive_loss``: the model's file names it only, the kernel found no such name, and
    the model stayed in the child ("could not locate function 'contrastive_loss'")."""
    assert run(
        iso_shell,
        "import keras\n"
        "def loss(margin=1):\n"
        "    def contrastive_loss(y_true, y_pred):\n"
        "        return keras.ops.mean(keras.ops.square(margin - y_pred) * y_true)\n"
        "    return contrastive_loss\n",
    ).success
    cell = (
        "%%kerasrun --isolate --quiet --label siamese\n"
        "siamese = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])\n"
        "siamese.compile(loss=loss(margin=2), optimizer='rmsprop')\n"
        "siamese.fit(x, y, epochs=1, verbose=0)\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    siamese = iso_shell.user_ns["siamese"]
    assert siamese.loss.__name__ == "contrastive_loss"
    # the closure's margin came with it: 2 - 0 squared, times y (all ones here)
    ones = np.ones((4, 1), "float32")
    assert siamese.loss(ones, np.zeros((4, 1), "float32")).numpy() == pytest.approx(4.0)
    assert np.isfinite(siamese.evaluate(iso_shell.user_ns["x"], ones.repeat(16, 0), verbose=0))
    (record,) = keras_nbguard.runs("siamese")
    assert "not sent back" not in record.isolated


def test_a_model_with_a_lambda_layer_comes_back_and_goes_in_again(iso_shell):
    """Keras' safe mode refuses a ``Lambda(lambda t: ...)`` loaded from a file, and the model
    stayed in the child; the file is the cell's own, from the process the kernel started."""
    cell = (
        "%%kerasrun --isolate --quiet --label lam\n"
        "import keras\n"
        "inputs = keras.Input((8,))\n"
        "doubled = keras.layers.Lambda(lambda t: t * 2.0)(inputs)\n"
        "model = keras.Model(inputs, keras.layers.Dense(1)(doubled))\n"
        "model.compile('adam', 'mse')\n"
        "model.fit(x, y, epochs=1, verbose=0)\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    model = iso_shell.user_ns["model"]
    assert model.layers[1].function(np.ones(2, "float32")).tolist() == [2.0, 2.0]
    again = run(
        iso_shell, "%%kerasrun --isolate --quiet --label lam\np = model.predict(x, verbose=0)"
    )
    assert again.success, again.error_in_exec
    assert iso_shell.user_ns["p"].shape == (64, 1)


REGISTERED = """
import keras
@keras.saving.register_keras_serializable(package="MyLayers")
class Scale(keras.layers.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor
    def call(self, inputs):
        return inputs * self.factor
    def get_config(self):
        return {**super().get_config(), "factor": self.factor}
base = keras.Sequential([keras.Input((8,)), Scale(3.0), keras.layers.Dense(1)])
base.compile("adam", "mse")
"""


def test_a_model_of_a_layer_registered_under_a_package_goes_in_and_comes_back(iso_shell):
    """keras.io's saving guide registers custom layers (``register_keras_serializable(package=
    "MyLayers")``): Keras saves them as ``MyLayers>Scale``, a name the child's Keras never
    registered (the class arrives by value), and the model could not be sent in."""
    assert run(iso_shell, REGISTERED).success
    cell = (
        "%%kerasrun --isolate --quiet --label registered\n"
        "base.fit(x, y, epochs=1, verbose=0)\n"
        "model = keras.Sequential([keras.Input((8,)), Scale(5.0), keras.layers.Dense(1)])\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    assert type(ns["model"].layers[0]) is ns["Scale"] and ns["model"].layers[0].factor == 5.0
    assert int(ns["base"].optimizer.iterations.numpy()) == 2  # trained there, back here


SAVING_GUIDE = """
import keras
@keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
def custom_fn(x):
    return x**2
@keras.saving.register_keras_serializable(package="MyLayers")
class CustomLayer(keras.layers.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor
    def call(self, x):
        return x * self.factor
    def get_config(self):
        return {"factor": self.factor}
def get_model():
    inputs = keras.Input(shape=(8,))
    x = keras.layers.Lambda(custom_fn)(CustomLayer(2.0)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    model.compile(optimizer="adam", loss="mean_squared_error")
    return model
"""


@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_the_saving_guides_cell_saves_and_loads_its_registered_layer_and_function(
    iso_shell, tmp_path, flavour
):
    """keras.io's saving guide: a layer and a function registered in a setup cell, a model of
    them saved and loaded back by the cell. In the child the decorator never ran (both arrive
    by value inside ``get_model``): "Could not locate class 'CustomLayer'", the run failed.
    (Keras 2 saves any function in a ``Lambda`` as bytecode: there it is an activation.)"""
    setup = SAVING_GUIDE
    if flavour == "tf_keras":
        pytest.importorskip("tf_keras")
        setup = setup.replace("import keras", "import tf_keras as keras").replace(
            "keras.layers.Lambda(custom_fn)", "keras.layers.Activation(custom_fn)"
        )
    assert run(iso_shell, setup).success
    path = tmp_path / "my_model.keras"
    cell = (
        "%%kerasrun --isolate --quiet --label saving\n"
        f"model = get_model()\nmodel.fit(x, y, verbose=0)\nmodel.save('{path}')\n"
        f"reconstructed = keras.models.load_model('{path}')\n"
        "same = bool((model.predict(x, verbose=0) == reconstructed.predict(x, verbose=0)).all())\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    assert ns["same"] is True
    layer, function_layer = ns["reconstructed"].layers[1:3]
    assert type(layer) is ns["CustomLayer"] and layer.factor == 2.0
    function = getattr(function_layer, "function", None) or function_layer.activation
    assert function is ns["custom_fn"]  # found here by its registered name
    # and the kernel's model of them goes in (saved here by the registered names)
    again = run(
        iso_shell, "%%kerasrun --isolate --quiet --label saving\np = reconstructed.predict(x)"
    )
    assert again.success, again.error_in_exec
    assert ns["p"] == pytest.approx(ns["model"].predict(ns["x"], verbose=0))
    run(iso_shell, "import keras")  # the name the other tests use


def test_an_isolated_cells_new_layer_never_takes_a_sent_layers_name(iso_shell):
    """A setup cell's ``encoder`` (named ``sequential``) sent to a fresh process, where the
    cell's new ``Sequential`` was named ``sequential`` too: the joining model failed there."""
    setup = "import keras\nencoder = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])"
    assert run(iso_shell, setup).success
    cell = (
        "%%kerasrun --isolate --quiet --label encoder\n"
        "head = keras.Sequential([keras.layers.Dense(1)])\ninputs = keras.Input((8,))\n"
        "model = keras.Model(inputs, head(encoder(inputs)))\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    assert ns["head"].name != ns["encoder"].name


REUSES_ITS_ENCODER = """%%kerasrun{flag} --quiet --label reuses
if "kept" not in globals():
    kept = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
head = keras.Sequential([keras.layers.Dense(1)])
inputs = keras.Input((8,))
model = keras.Model(inputs, head(kept(inputs)))
"""


def test_a_cell_reusing_its_first_runs_layer_runs_isolated_then_here(iso_shell):
    """Run 1 (isolated) makes ``kept``, which comes back, loaded (its name counted nowhere
    here); run 3, in the kernel, restarted the label's names and its new head took the
    name of ``kept``: "The name "sequential" is used 2 times in the model". Layers that come
    back are the label's names, as if made here."""
    assert run(iso_shell, "import keras").success
    for flag in (" --isolate", " --isolate", ""):
        result = run(iso_shell, REUSES_ITS_ENCODER.format(flag=flag))
        assert result.success, (flag, result.error_in_exec)
        ns = iso_shell.user_ns
        assert ns["head"].name != ns["kept"].name
    # no model of an earlier run is left: run 2's came back, and goes as a run's here does
    record = keras_nbguard.runs("reuses")[-1]
    assert record.stale_models is None, record.stale_models


def test_an_isolated_runs_head_on_a_kept_layer_goes_when_the_next_run_here_replaces_it(
    iso_shell,
):
    """In, in, isolated, in: the isolated run's ``head`` came back on the loaded ``kept``,
    called there by loading, and after the next run here it stayed alive through
    ``kept._outbound_nodes``, listed stale ("its outbound node (made outside a tracked run)").
    The nodes loading makes are the isolated run's, and go as a run's here do."""
    assert run(iso_shell, "import keras").success
    for flag in ("", "", " --isolate", ""):
        result = run(iso_shell, REUSES_ITS_ENCODER.format(flag=flag))
        assert result.success, (flag, result.error_in_exec)
    record = keras_nbguard.runs("reuses")[-1]
    assert record.stale_models is None, record.stale_models
    released = record.released_models
    assert released is not None and 3 in released.runs, released
    report = keras_nbguard.leaks()
    assert not [leak for leak in report.leaks if leak.stale], report


CLASSES_IN_THE_CELL = """%%kerasrun --isolate --quiet --label made-there
@keras.saving.register_keras_serializable()
class CustomModel(keras.Model):  # keras.io's "customizing fit", re-run with its class
    def train_step(self, data):
        return super().train_step(data)
class Doubled(keras.layers.Layer):
    def call(self, inputs):
        return inputs * 2
inputs = keras.Input((8,))
model = CustomModel(inputs, keras.layers.Dense(1)(Doubled()(inputs)))
model.compile("adam", "mse")
model.fit(x, y, verbose=0)
"""


def test_a_model_of_classes_the_isolated_cell_defined_comes_back(iso_shell):
    """The class was defined in the isolated cell, so never in the kernel: the model stayed
    there ("Could not locate class 'CustomModel'"), and ``model`` was not bound. The classes
    come back first, what the cell registered is registered here, and the model loads."""
    assert run(iso_shell, "import keras").success
    result = run(iso_shell, CLASSES_IN_THE_CELL)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    model = ns["model"]
    assert type(model) is ns["CustomModel"] and type(model.layers[1]) is ns["Doubled"]
    line = keras_nbguard.runs("made-there")[-1].isolated
    assert "back 1 model + 2 names" in line and "model (" not in line, line  # not left there
    saving = iso_shell.ev("keras.saving")
    assert saving.get_registered_object("Custom>CustomModel") is ns["CustomModel"]
    model.fit(ns["x"], ns["y"], verbose=0)  # trains on here
    assert int(model.optimizer.iterations.numpy()) == 4


POSITIONAL_EMBEDDING = """
import keras
class PositionalEmbedding(keras.layers.Layer):  # keras.io's translation example: no build()
    def __init__(self, vocab_size, embed_dim, **kwargs):
        super().__init__(**kwargs)
        self.token_embeddings = keras.layers.Embedding(vocab_size, embed_dim)
        self.vocab_size, self.embed_dim = vocab_size, embed_dim
    def call(self, inputs):
        return self.token_embeddings(inputs)
    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "embed_dim": self.embed_dim}
tokens = np.ones((64, 8), "int32")
"""


def test_a_model_coming_back_brings_no_warning_of_its_transport(iso_shell):
    """Loaded back, a model of a layer without ``build()`` made Keras warn "`build()` was
    called on layer 'positional_embedding' ... may cause failures down the line", four lines a
    layer the user never loaded; the model works (its call builds the layer)."""
    assert run(iso_shell, POSITIONAL_EMBEDDING).success
    cell = (
        "%%kerasrun --isolate --quiet --label embed\ninputs = keras.Input((8,), dtype='int32')\n"
        "x = keras.layers.Flatten()(PositionalEmbedding(20, 4)(inputs))\n"
        "model = keras.Model(inputs, keras.layers.Dense(1)(x))\nmodel.compile('adam', 'mse')\n"
        "model.fit(tokens, y, verbose=0)\n"
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    assert not [w for w in seen if "was called on layer" in str(w.message)], seen
    model = iso_shell.user_ns["model"]
    assert len(model.layers[1].weights) == 1  # its embedding came back, with its weights
    assert model.predict(iso_shell.user_ns["tokens"], verbose=0).shape == (64, 1)


NESTED_TF_KERAS = """%%kerasrun --isolate --label nested2
import tf_keras
inputs = tf_keras.Input((8,))
model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(inputs))
model.compile("adam", "mse")
model.fit(x, y, epochs=2, verbose=0)
end_to_end_model = tf_keras.Model(inputs, model(inputs))
"""


def test_on_tf_keras_a_nested_model_gets_its_compiled_state_from_its_own_file(iso_shell):
    """tf_keras loads a model that is another one's layer uncompiled, without its optimizer:
    the state comes from the model's own file (Keras 3 restores it with the container)."""
    pytest.importorskip("tf_keras")
    result = run(iso_shell, NESTED_TF_KERAS)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    model = ns["model"]
    assert any(layer is model for layer in ns["end_to_end_model"].layers)
    assert int(model.optimizer.iterations.numpy()) == 4
    model.fit(ns["x"], ns["y"], epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 6


SCALE_TF_KERAS = """import tf_keras
class Scale(tf_keras.layers.Layer):  # keras.io's pattern: an __init__ without **kwargs
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, inputs):
        return inputs * self.factor

    def get_config(self):
        config = super().get_config()
        config.update({"factor": self.factor})
        return config
"""


def test_on_tf_keras_a_model_of_a_class_without_kwargs_comes_back_rebuilt(iso_shell):
    """Keras 2 passes a layer its config's ``name``, ``trainable`` and ``dtype`` as Keras 3
    does, so ``tf_keras.models.load_model`` can't load this model either: rebuilt from what
    ``Scale.__init__`` takes, the saved name set after, the trained weights and optimizer as
    the child left them, and said."""
    pytest.importorskip("tf_keras")
    assert run(iso_shell, SCALE_TF_KERAS).success
    cell = (
        "%%kerasrun --isolate --label scaled\n"
        "inputs = tf_keras.Input((8,))\n"
        "model = tf_keras.Model(inputs, tf_keras.layers.Dense(1)(Scale(3.0)(inputs)))\n"
        "model.compile('adam', 'mse')\nmodel.fit(x, y, epochs=2, verbose=0)\n"
        "trained, names = model.get_weights(), [layer.name for layer in model.layers]\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    model = ns["model"]
    assert type(model).__module__.startswith("tf_keras")
    assert type(model.layers[1]) is ns["Scale"] and model.layers[1].factor == 3.0
    assert [layer.name for layer in model.layers] == ns["names"]
    for came, went in zip(model.get_weights(), ns["trained"], strict=True):
        np.testing.assert_array_equal(came, went)
    assert int(model.optimizer.iterations.numpy()) == 4
    model.fit(ns["x"], ns["y"], epochs=1, verbose=0)  # and it trains on here
    assert int(model.optimizer.iterations.numpy()) == 6
    (record,) = keras_nbguard.runs("scaled")
    assert "rebuilt without **kwargs: Scale in model" in record.isolated, record.isolated
    assert "from_config" not in vars(ns["Scale"])  # the notebook's class left as it was


WRAPPER = """import keras
import tensorflow as tf
class Wrapper(keras.Model):  # as keras.io's VAE: no get_config, a model passed in, never built
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((self.inner(x) - y) ** 2)
        grads = tape.gradient(loss, self.inner.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.inner.trainable_weights))
        return {"loss": loss}

base = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
untouched = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
"""


def test_a_model_sent_in_and_trained_through_another_comes_back_trained(iso_shell):
    """keras.io's VAE and GAN: ``vae = VAE(encoder, decoder)``, ``vae.fit(...)`` trains the
    setup cell's ``encoder`` and ``decoder`` without naming them; they came back untrained.
    ``vae`` itself can't travel (no ``get_config``): said in Keras' first paragraph only."""
    assert run(iso_shell, WRAPPER).success
    ns = iso_shell.user_ns
    before, kept = ns["base"].get_weights(), ns["untouched"]
    cell = (
        "%%kerasrun --isolate --label wrapped\n"
        "wrapped = Wrapper(base)\nwrapped.compile('adam', 'mse')\n"
        "wrapped.fit(x, y, epochs=2, verbose=0)\nuntouched.summary(print_fn=lambda *a: None)\n"
    )
    with capture_output() as seen:
        result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    assert "not yet been built" not in seen.stderr  # our try at saving it: not the user's to see
    after = ns["base"].get_weights()
    assert not all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert ns["untouched"] is kept  # read, not changed: it stays the kernel's own
    (record,) = keras_nbguard.runs("wrapped")
    assert "back 1 model" in record.isolated, record.isolated
    assert "(base: trained there, though the cell does not bind it)" in record.isolated
    assert "wrapped (a Keras model that could not be saved: Object Wrapper" in record.isolated
    assert "Example:" not in record.isolated and "\n" not in record.isolated


EMBEDDING = """%%kerasrun --isolate --label embed
import keras
model = keras.Sequential([keras.Input((6,), dtype="int32"), keras.layers.Embedding(4096, 256),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(np.zeros((8, 6), "int32"), np.zeros((8, 1)), verbose=0)
"""


def test_a_model_that_comes_back_keeps_its_weights_in_tensorflows_memory(iso_shell):
    """Keras' loader let each variable adopt a NumPy array made from the file (glibc's heap),
    outside TensorFlow's pool where the model it replaced lay: keras.io's text example's kernel
    moved by its embedding from run to run (isolation/loaded_weights.py). NumPy's arrays are
    the ones tracemalloc sees; TensorFlow's buffers it doesn't."""
    assert run(iso_shell, EMBEDDING).success  # the imports a first run makes, not traced
    tracemalloc.start()
    try:
        result = run(iso_shell, EMBEDDING)
        gc.collect()
        numpy_made = [t for t in tracemalloc.take_snapshot().traces if t.size >= 2**20]
    finally:
        tracemalloc.stop()
    assert result.success, result.error_in_exec
    model = iso_shell.user_ns["model"]
    assert model.layers[0].embeddings.shape == (4096, 256)  # 4 MiB, and Adam's two slots
    assert not numpy_made, [str(t.traceback) for t in numpy_made]
    assert model.predict(np.zeros((1, 6), "int32"), verbose=0).shape == (1, 1)


def test_a_rerun_lets_the_names_earlier_model_go_before_its_new_one_loads(iso_shell, monkeypatch):
    """Both in the kernel at once, TensorFlow's CPU pool kept the larger footprint: the text
    example's kernel grew 3 MiB a run (isolation/back.py ``_make_room``). The cell ends in
    ``model.fit(...)``: its History, IPython's output cache, still held the model through the
    next load; it is released before the load now, as a run's end releases it."""
    cell = ENDS_IN_FIT.replace("--label last", "--label room")  # its value: a History
    assert run(iso_shell, cell).success
    earlier = weakref.ref(iso_shell.user_ns["model"])
    alive_at_load = alive_at_each_load(monkeypatch, earlier)
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    assert alive_at_load == [False]
    ns = iso_shell.user_ns
    assert result.result.model is ns["model"]  # the new value holds the new model
    assert ns["model"].predict(ns["x"][:1], verbose=0).shape == (1, 1)
    # said by the run that let it go (it was said a run late, by the run after)
    released = keras_nbguard.runs("room")[-1].released_models
    assert released is not None and released.runs == (1,), released


def test_the_symbolic_tensors_of_a_functional_model_stay_in_the_child(iso_shell):
    """``inputs``/``outputs`` of a Functional model built in the cell: pickled, each took the
    whole graph along (97 MiB a run on Keras' text example); the model comes back, they don't."""
    cell = (
        "%%kerasrun --isolate --quiet --label functional\n"
        "import keras\n"
        "inputs = keras.Input((8,))\n"
        "outputs = keras.layers.Dense(1)(inputs)\n"
        "model = keras.Model(inputs, outputs)\n"
    )
    result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    ns = iso_shell.user_ns
    assert ns["model"].predict(ns["x"][:2], verbose=0).shape == (2, 1)
    assert "inputs" not in ns and "outputs" not in ns
    (record,) = keras_nbguard.runs("functional")
    # one reason, said once for both names
    said = "inputs and outputs (each a symbolic tensor of the cell's Keras graph: it stays there)"
    assert said in record.isolated and record.isolated.count("symbolic") == 1, record.isolated


def test_unsendable_input_is_a_usage_error_before_anything_runs(iso_shell):
    assert run(iso_shell, "import threading\nlock = threading.Lock()").success
    with capture_output() as seen:
        result = run(iso_shell, "%%kerasrun --isolate --label locked\nwith lock:\n    pass\n")
    assert not result.success
    assert "can't send 'lock' (lock)" in seen.stderr + seen.stdout
    assert keras_nbguard.runs("locked") == []  # nothing started, nothing recorded


def test_a_child_killed_is_recorded_died_and_the_kernel_goes_on(iso_shell):
    cell = (
        "%%kerasrun --isolate --label killed\nimport os, signal\nprint('going')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    with capture_output():
        result = run(iso_shell, cell)
    assert not result.success  # the cell fails, so Run All stops
    (record,) = keras_nbguard.runs("killed")
    assert record.status == "died" and "SIGKILL" in record.error
    assert record.rss_samples and record.rss_peak  # its last samples, taken by the kernel
    assert run(iso_shell, "1 + 1").success


def test_a_fit_on_a_pydataset_with_worker_processes_runs_isolated(iso_shell):
    """Keras' ``PyDataset(use_multiprocessing=True)`` forks its workers from the child and ends
    them with SIGTERM after the fit: they inherited the child's SIGTERM handler, which took the
    child's whole process group down (every run "died: SIGKILL")."""
    setup = (
        "import keras, math\nclass Batches(keras.utils.PyDataset):\n"
        "    def __init__(self, x, y, **kwargs):\n"
        "        super().__init__(**kwargs)\n        self.x, self.y = x, y\n"
        "    def __len__(self):\n        return math.ceil(len(self.x) / 16)\n"
        "    def __getitem__(self, i):\n"
        "        return self.x[i * 16:(i + 1) * 16], self.y[i * 16:(i + 1) * 16]\n"
    )
    assert run(iso_shell, setup).success
    cell = (
        "%%kerasrun --isolate --label workers --quiet\n"
        "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])\n"
        "model.compile('adam', 'mse')\n"
        "model.fit(Batches(x, y, workers=2, use_multiprocessing=True), epochs=2, verbose=0)\n"
    )
    result = run(iso_shell, cell)
    (record,) = keras_nbguard.runs("workers")
    assert result.success, record.error
    assert record.status == "ok" and len(record.fits[0].epoch_seconds) == 2


def test_an_isolated_cell_reads_the_kernels_argv(iso_shell):
    """``args, _ = parser.parse_known_args()`` in a notebook reads the kernel's argv; in the child
    it read the child's own (two file descriptors, taken for positional arguments)."""
    cell = "%%kerasrun --isolate --label argv --quiet\nimport sys\nseen = list(sys.argv)\n"
    assert run(iso_shell, cell).success
    assert iso_shell.user_ns["seen"] == sys.argv


def test_a_child_that_died_says_its_fit_is_unknown_and_keeps_no_zero_rss(iso_shell):
    """The kernel's view of a child that died mid-fit: its fit is not known ("no fit in this run"
    said it had none), and the last RSS sample is the child's, not the 0 a zombie reads."""
    cell = (
        "%%kerasrun --isolate --label gone --quiet\nimport os, signal, time\n"
        "time.sleep(0.5)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    with capture_output():
        assert not run(iso_shell, cell).success
    (record,) = keras_nbguard.runs("gone")
    assert record.status == "died" and record.fit_reason == "the isolated process ended first"
    assert all(rss > 0 for _, rss in record.rss_samples), record.rss_samples
    assert record.rss_after and record.rss_after > 0


def test_interrupting_the_kernel_stops_the_child(iso_shell):
    cell = "%%kerasrun --isolate --label stopme\nimport time\nprint('started')\ntime.sleep(60)\n"
    threading.Timer(3.0, _thread.interrupt_main).start()
    start = time.perf_counter()
    with capture_output():
        result = run(iso_shell, cell)
    assert time.perf_counter() - start < 20
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    (record,) = keras_nbguard.runs("stopme")
    assert record.status == "interrupted"


def test_a_sweep_shows_one_table_not_a_summary_per_point(iso_shell):
    cell = '%%kerasrun --sweep "units=2,4" --label onetable\nwidth = units * 2\n'
    with capture_output() as seen:
        result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    shown = "\n".join(str(o.data.get("text/html", "")) for o in seen.outputs)
    assert "units=2" in shown and "units=4" in shown  # a row per point
    assert "kerasrun 'onetable' #" not in shown  # no per-point summary
    assert [r.status for r in keras_nbguard.runs("onetable")] == ["ok", "ok"]


def test_a_sweep_runs_every_point_two_at_a_time(iso_shell):
    cell = (
        '%%kerasrun --sweep "units=2,4; scale_by=1.0,2.0" --parallel 2 --label sweep --quiet\n'
        "import os\nwidth = units * scale_by\npid = os.getpid()\n"
    )
    with capture_output():
        result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    points = result.result
    assert sorted(points) == [(("units", u), ("scale_by", s)) for u in (2, 4) for s in (1.0, 2.0)]
    assert points[(("units", 4), ("scale_by", 2.0))]["width"] == 8.0
    assert len({p["pid"] for p in points.values()}) == 4  # a fresh process each
    records = keras_nbguard.runs("sweep")
    assert sorted((r.params["units"], r.params["scale_by"]) for r in records) == [
        (2, 1.0),
        (2, 2.0),
        (4, 1.0),
        (4, 2.0),
    ]
    assert [r.run_number for r in records] == [1, 2, 3, 4]
    table = iso_shell.run_line_magic("nbguard", "runs --label sweep").text()
    assert "units=4, scale_by=2.0" in table  # which point each run was
    frame = keras_nbguard.runs_frame("sweep")
    assert frame.groupby("param_units").size().to_dict() == {2: 2, 4: 2}
    assert frame["isolated"].all()


def test_a_sweep_with_a_failing_point_fails_once_every_point_has_run(iso_shell):
    """Run All must stop at a sweep whose points failed, as at a failing --isolate run: after
    the last point, in one line naming the point and its error (no frames of ours)."""
    from keras_nbguard.isolation import IsolatedRunFailed

    assert run(iso_shell, "base = 10").success
    cell = '%%kerasrun --sweep "d=0,2" --label somefail --quiet\nq = base / d\n'
    with capture_output() as seen:
        result = run(iso_shell, cell)
    assert not result.success
    error = result.error_in_exec
    assert isinstance(error, IsolatedRunFailed)
    assert str(error) == (
        "1 of 2 points of the sweep 'somefail' failed: d=0 error "
        "(ZeroDivisionError: division by zero)"
    )
    assert error.results[(("d", 2),)] == {"q": 5.0}  # the point that ran is not lost
    assert [(r.params["d"], r.status) for r in keras_nbguard.runs("somefail")] == [
        (0, "error"),
        (2, "ok"),
    ]
    shown = seen.stdout + seen.stderr
    assert f"SweepFailed: {error}" in shown
    assert "keras_nbguard/isolation" not in shown  # the child's traceback, then our one line


def test_a_failing_isolated_run_says_so_in_one_line_after_the_childs_traceback(iso_shell):
    """A user's walkthrough: the child's traceback, then a second one through magic.py and
    isolation/__init__.py for IsolatedRunFailed. Ours is one line."""
    with capture_output() as seen:
        result = run(iso_shell, "%%kerasrun --isolate --label boom --quiet\nq = 1 / 0\n")
    assert not result.success
    shown = seen.stdout + seen.stderr
    assert "ZeroDivisionError" in shown  # the child's own traceback
    assert "IsolatedRunFailed: the isolated run 'boom' #1 ended error: " in shown, shown
    assert "keras_nbguard/isolation" not in shown and "magic.py" not in shown, shown


def test_a_parallel_sweep_shows_its_points_running_and_the_time_left_moving(iso_shell):
    cell = (
        '%%kerasrun --sweep "s=1,2,3" --parallel 2 --label side\n'
        "import time\ntime.sleep(1.5)\nz = s\n"
    )
    with capture_output() as seen:
        result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    tables = [str(o.data.get("text/plain", "")) for o in seen.outputs]
    heads = [t.splitlines()[0] for t in tables if t.startswith("sweep side: ")]
    assert any(h.startswith("sweep side: 0 done, 2 running, 1 left of 3") for h in heads), heads
    assert any("s=3  running" in t for t in tables)  # its row, with its time so far
    # the last point alone: its estimate is redrawn as the clock moves, not only at ends
    last = [h for h in heads if h.startswith("sweep side: 2 done, 1 running, 0 left of 3, about")]
    assert len(set(last)) > 1, heads
    assert heads[-1] == "sweep side: 3 done, 0 running, 0 left of 3"


@pytest.mark.parametrize(
    ("spec", "words"),
    [("units", "is not name=value"), ("units=", "has no values"), ("a=1; a=2", "given twice")],
)
def test_a_bad_sweep_is_a_usage_error(iso_shell, spec, words):
    with capture_output() as seen:
        assert not run(iso_shell, f'%%kerasrun --sweep "{spec}"\nx\n').success
    assert words in seen.stderr + seen.stdout


KERNEL = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("%load_ext keras_nbguard")
shell.run_cell("import numpy as np\\nx = np.ones((32, 4), 'float32')")
result = shell.run_cell('''%%kerasrun --isolate --label no_tf --quiet
import keras
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
m.compile("adam", "mse")
loss = float(m.fit(x, x[:, :1], verbose=0).history["loss"][0])
del m
''')
assert result.success, result.error_in_exec
print("LOSS", shell.user_ns["loss"], "tensorflow" in sys.modules, "keras" in sys.modules)
"""


def test_the_kernel_imports_no_tensorflow_for_an_isolated_run(tmp_path):
    env = {
        **os.environ,
        "KERAS_NBGUARD_DB": str(tmp_path / "h.db"),
        "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    }
    done = subprocess.run(
        [sys.executable, "-c", KERNEL], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOSS"))
    assert line.endswith("False False"), line  # the fit happened in the child only


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (the test extra installs it)")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)
    from keras_nbguard.isolation import ray_cluster

    with one_ray_at_a_time():
        ray_cluster.connect()  # a local Ray, as --cluster ray starts one: on 127.0.0.1 only
        yield ray
        ray.shutdown()


def test_a_sweep_on_a_real_local_ray_cluster(iso_shell, local_ray):
    cell = (
        '%%kerasrun --cluster ray --sweep "units=2,4" --label on_ray --quiet\n'
        "import os\nprint('from the worker')\nwidth = units * 2\npid = os.getpid()\n"
    )
    with capture_output() as seen:
        result = run(iso_shell, cell)
    assert result.success, result.error_in_exec
    assert seen.stdout.count("from the worker") == 2  # what each task printed
    points = result.result
    assert {k: v["width"] for k, v in points.items()} == {(("units", 2),): 4, (("units", 4),): 8}
    assert os.getpid() not in {v["pid"] for v in points.values()}
    assert len({v["pid"] for v in points.values()}) == 2  # max_calls=1: a fresh worker each
    records = keras_nbguard.runs("on_ray")
    assert sorted(r.params["units"] for r in records) == [2, 4]
    assert all(r.status == "ok" and r.isolated.startswith("Ray task") for r in records)


def test_cluster_ray_without_ray_says_which_extra(iso_shell, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with capture_output() as seen:
        assert not run(iso_shell, "%%kerasrun --cluster ray\nx = 1\n").success
    assert "pip install 'keras_nbguard[ray]'" in seen.stderr + seen.stdout


def test_a_large_array_goes_through_shared_memory_read_only(iso_shell):
    assert run(iso_shell, "import numpy as np\nbig = np.arange(2**19, dtype='float64')").success
    segments = set(glob.glob("/dev/shm/psm_*"))
    cell = (
        "%%kerasrun --isolate --label shm --quiet\n"
        "total = float(big.sum())\nshared = not big.flags.owndata\n"
        "writable = big.flags.writeable\n"
    )
    assert run(iso_shell, cell).success
    ns = iso_shell.user_ns
    assert ns["total"] == float(ns["big"].sum())
    assert ns["shared"] and not ns["writable"]  # mapped, not unpickled: the kernel's copy
    assert set(glob.glob("/dev/shm/psm_*")) <= segments  # unlinked once the run is over


def test_prestart_hands_the_next_run_a_process_with_the_imports_loaded(iso_shell):
    cell = (
        "%%kerasrun --isolate --prestart --label warm --quiet\n"
        "import sys\nwas_loaded = 'keras' in sys.modules\nimport keras\nimport os\n"
        "pid = os.getpid()\n"
    )
    assert run(iso_shell, cell).success
    assert iso_shell.user_ns["was_loaded"] is False  # a fresh process: nothing imported yet
    first_pid = iso_shell.user_ns["pid"]
    from keras_nbguard.isolation import _SPARES

    spares = _SPARES[keras_nbguard.get_session()]
    spare = spares.child
    assert spare is not None and spare.alive()
    assert run(iso_shell, cell).success
    assert iso_shell.user_ns["pid"] == spare.popen.pid != first_pid
    assert iso_shell.user_ns["was_loaded"] is True  # the cell's imports, loaded beforehand
    assert len(keras_nbguard.runs("warm")) == 2  # (wall times not compared: a busy machine)
    waiting = spares.child  # the next run's, started as this one ended
    assert waiting is not None and waiting.alive()
    spares.close()
    assert spares.child is None and waiting.popen.poll() is not None


FLAT = """
import json, psutil
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("%load_ext keras_nbguard")
rss = []
for _ in range(7):
    assert shell.run_cell('''%%kerasrun --isolate --prestart --label flat --quiet
import keras
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
m.compile("adam", "mse")
m.fit(keras.ops.ones((64, 4)), keras.ops.ones((64, 1)), verbose=0)
del m
''').success
    rss.append(psutil.Process().memory_info().rss)
print(json.dumps(rss))
"""


def test_the_kernels_rss_stays_flat_over_isolated_runs(tmp_path):
    env = {
        **os.environ,
        "KERAS_NBGUARD_DB": str(tmp_path / "h.db"),
        "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    }
    done = subprocess.run(
        [sys.executable, "-c", FLAT], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rss = [r / 2**20 for r in json.loads(done.stdout.splitlines()[-1])][1:]
    n = len(rss)
    mean_x, mean_y = (n - 1) / 2, sum(rss) / n
    slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(rss)) / sum(
        (i - mean_x) ** 2 for i in range(n)
    )
    assert slope <= 0.3, rss  # MiB a run; in-process runs grow ~0.8 (bench/bench_isolate.py)


def test_a_module_comes_back_as_the_notebooks_own_where_it_has_it():
    """An isolated cell's `import random` was not sent back ("a module: import it in the
    notebook"): by name, it is the notebook's own module; one the notebook has not imported is
    not imported for it (TensorFlow would load into the kernel what isolation keeps out)."""
    import pickle

    from keras_nbguard.isolation.names import ModuleByName

    assert pickle.loads(pickle.dumps(ModuleByName("random"))) is sys.modules["random"]
    with pytest.raises(ImportError, match="the notebook has not imported: import no_such_mod"):
        pickle.loads(pickle.dumps(ModuleByName("no_such_mod")))
    assert "no_such_mod" not in sys.modules
