"""``%%kerasrun --isolate``: how the names a cell reads reach the new process, on a real shell
with real child processes and real TensorFlow there. Read-then-write names go in and come back
(``n += 1``, ``x[0] = ...``, ``items.append``, ``del``, ``global``); an adapted
``TextVectorization``, a sub-model with a custom layer and a tf.data pipeline built in a setup
cell reach the child (Keras' own serialization, or the setup cell's statements replayed, or
``tf.data`` save/load), and the run's record says which way each name took."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from helpers import run
from IPython.utils.capture import capture_output

import keras_nbguard

pytestmark = pytest.mark.slow


def _cell_number(shell) -> int:
    """The number of the cell last run (its place in ``In``)."""
    return len(shell.user_ns["_ih"]) - 1


def _sent(label: str) -> str:
    (record,) = keras_nbguard.runs(label)
    assert record.status == "ok", record.error
    return record.isolated


def _ran(shell, cell: str) -> None:
    """Run ``cell``; if it failed, say so with what it printed."""
    with capture_output() as seen:
        result = run(shell, cell)
    assert result.success, (result.error_in_exec, seen.stdout, seen.stderr)


def test_read_then_write_names_go_in_and_come_back(shell):
    setup = (
        "import numpy as np\nn = 5\nitems = [1]\ncounter = 0\ngone = 'x'\n"
        "arr = np.zeros(2**18)\n"
    )  # 2 MiB: shared memory, were it only read
    assert run(shell, setup).success
    cell = (
        "%%kerasrun --isolate --label rw --quiet\n"
        "n += 1\n"
        "items.append(n)\n"
        "arr[0] = 7\n"
        "del gone\n"
        "def bump():\n"
        "    global counter\n"
        "    counter += 1\n"
        "bump()\n"
    )
    kernels = shell.user_ns["arr"]
    _ran(shell, cell)
    ns = shell.user_ns
    assert ns["n"] == 6 and ns["items"] == [1, 6] and ns["counter"] == 1
    assert ns["arr"][0] == 7 and ns["arr"].flags.writeable  # changed there, and came back
    assert kernels[0] == 0  # what the child wrote was its own page, not the kernel's array
    assert "gone" not in ns
    words = _sent("rw")
    # the kernel's pages, copy-on-write in the child: no pickle of the array
    assert "n (pickle" in words and "arr (shared memory 2.0 MiB, writable)" in words, words
    assert "items (pickle" in words and "counter (pickle" in words


def test_the_notebooks_functions_read_the_names_the_isolated_cell_set(shell):
    """keras.io's examples keep their settings in names their functions read (``learning_rate``
    in ``run_experiment``). Isolated, such a function took copies of them as the run began: a
    cell that set ``learning_rate = 0.01`` and called it got 0.001, where a plain run gets 0.01.
    The names go on their own now (a function's function's too), and the function reads the
    child's. A name of the user's that begins with an underscore (``_scaled``) goes too: taken
    for one of IPython's, it was a NameError there."""
    setup = (
        "import numpy as np\n"
        "learning_rate = 0.001\n"
        "samples = np.ones(2**18)\n"  # 2 MiB, read only by a function
        "def _scaled():\n"
        "    return 2 * learning_rate\n"
        "def describe():\n"
        "    samples[0] += 1\n"  # a function may change what it reads: it comes back
        "    return f'lr={learning_rate} scaled={_scaled()} n={len(samples)}'\n"
        "def run_experiment():\n"
        "    return describe()\n"
    )
    assert run(shell, setup).success
    cell = (
        "%%kerasrun --isolate --label settings --quiet\n"
        "learning_rate = 0.01\n"
        "said = run_experiment()\n"
    )
    _ran(shell, cell)
    assert shell.user_ns["said"] == f"lr=0.01 scaled=0.02 n={2**18}"
    sent = _sent("settings")
    assert "_scaled (pickle" in sent and "samples (shared memory 2.0 MiB, writable)" in sent, sent
    assert shell.user_ns["samples"][0] == 2  # the function wrote into it: back, as plainly
    _ran(shell, "learning_rate = 0.001")
    assert shell.run_cell(cell.split("\n", 1)[1]).success  # the same cell, plain: the same
    assert shell.user_ns["said"] == f"lr=0.01 scaled=0.02 n={2**18}"


def test_a_sweep_reaches_the_settings_the_notebooks_functions_read(shell):
    """Every point of ``--sweep "learning_rate=0.1,0.2"`` ran the notebook's function with the
    notebook's 0.001: the function took its own copy along."""
    setup = "learning_rate = 0.001\ndef describe():\n    return f'lr={learning_rate}'\n"
    assert run(shell, setup).success
    _ran(shell, '%%kerasrun --sweep "learning_rate=0.1,0.2" --quiet\nsaid = describe()\n')
    points = shell.user_ns["_"]
    assert [point["said"] for point in points.values()] == ["lr=0.1", "lr=0.2"]


def test_the_notebooks_classes_read_the_names_the_isolated_cell_set(shell):
    """A class defined in a cell reads the notebook's names in its methods (a block's
    ``__init__`` reading ``dropout``): isolated, each method took copies of them as the run
    began, so ``--sweep "dropout=0.1,0.5"`` built every point at 0.1. An object of the class
    made before the run (``made``) reads them too: it is of the same class there."""
    setup = (
        "dropout = 0.1\n"
        "class Base:\n"
        "    def inherited(self):\n"
        "        return dropout\n"
        "class Block(Base):\n"
        "    def __init__(self):\n"
        "        self.rate = dropout\n"
        "        super().__init__()\n"
        "    def describe(self):\n"
        "        return f'rate={self.rate} now={dropout}'\n"
        "    @staticmethod\n"
        "    def static():\n"
        "        return dropout\n"
        "    @classmethod\n"
        "    def of_class(cls):\n"
        "        return dropout\n"
        "    @property\n"
        "    def read(self):\n"
        "        return dropout\n"
        "made = Block()\n"
    )
    assert run(shell, setup).success
    every_way = (
        "(Block().describe(), Block.static(), Block.of_class(), Block().read, "
        "made.describe(), made.inherited())"
    )
    _ran(shell, f"%%kerasrun --isolate --label block --quiet\ndropout = 0.5\nsaid = {every_way}\n")
    assert shell.user_ns["said"] == ("rate=0.5 now=0.5", 0.5, 0.5, 0.5, "rate=0.1 now=0.5", 0.5)
    _ran(shell, '%%kerasrun --sweep "dropout=0.2,0.3" --quiet\nsaid = Block().describe()\n')
    points = shell.user_ns["_"]
    assert [point["said"] for point in points.values()] == ["rate=0.2 now=0.2", "rate=0.3 now=0.3"]
    _ran(shell, "dropout = 0.9")
    assert shell.user_ns["Block"].static() == 0.9  # the kernel's class reads the kernel's names


def test_only_the_methods_written_in_the_notebook_are_given_the_childs_names(shell):
    """A ``NamedTuple``'s ``__new__``, an ``Enum``'s and a dataclass's machinery are made by
    Python with globals of their own: given the child's, ``P(1)`` was a NameError there
    (``_tuple_new``). Only the methods written in a cell are."""
    setup = (
        "import dataclasses, enum, typing\n"
        "scale = 2\n"
        "class P(typing.NamedTuple):\n"
        "    a: int\n"
        "    def f(self):\n"
        "        return self.a * scale\n"
        "class Color(enum.Enum):\n"
        "    RED = 1\n"
        "    def f(self):\n"
        "        return self.value * scale\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class D:\n"
        "    a: int = 1\n"
        "    def f(self):\n"
        "        return self.a * scale\n"
    )
    assert run(shell, setup).success
    cell = "%%kerasrun --isolate --label kinds --quiet\nscale = 10\n"
    cell += "said = (P(1).f(), Color.RED.f(), D().f())\n"
    _ran(shell, cell)
    assert shell.user_ns["said"] == (10, 10, 10)


def test_a_tf_function_of_the_notebook_updates_the_metric_the_cell_reads(shell):
    """keras.io's training loop from scratch: ``@tf.function def train_step`` in one cell updates
    ``train_acc_metric``, the loop cell reads ``train_acc_metric.result()``. Pickled whole, the
    ``tf.function`` took its own copy of the metric: isolated, the cell read 0.0 every epoch.
    Made again there, autograph reads its cell's source, which the child's process lacked."""
    setup = (
        "import tensorflow as tf\nimport keras\n"
        "total = keras.metrics.Sum()\n"
        "scale = 1.0\n"
        "@tf.function(reduce_retracing=True, experimental_attributes={'_noinline': True})\n"
        "def train_step(x):\n"
        "    total.update_state(x * scale)\n"
        "@tf.function\n"
        "def clipped(x):\n"  # a loop and a branch on tensors: autograph, from the cell's source
        "    out = tf.constant(0.0)\n"
        "    for v in x:\n"
        "        out += scale if v > scale else v\n"
        "    return out\n"
    )
    assert run(shell, setup).success
    cell = "%%kerasrun --isolate --label loop --quiet\nscale = 5.0\n"
    cell += "for x in (1.0, 2.0):\n    train_step(tf.constant(x))\nsaid = float(total.result())\n"
    cell += "options = (train_step._reduce_retracing, train_step._attributes)\n"
    _ran(shell, cell + "limited = float(clipped(tf.constant([1.0, 9.0])))\n")
    assert (shell.user_ns["said"], shell.user_ns["limited"]) == (15.0, 6.0)
    assert float(shell.user_ns["total"].result()) == 15.0  # the notebook's, as after a plain run
    assert shell.user_ns["options"] == (True, {"_noinline": True})  # made there as it was here
    assert "train_step (pickle" in _sent("loop") and "total (keras" in _sent("loop")


def test_a_metric_the_models_train_step_updates_and_a_layer_it_trains_change_in_place(shell):
    """keras.io's guide to customizing ``fit()``: ``loss_tracker = keras.metrics.Mean()`` at the
    notebook's top level, updated by ``CustomModel.train_step``; and a layer built in a setup
    cell, trained inside the cell's model. A plain run leaves both changed in the notebook;
    isolated, they changed in the child only, and the notebook's metric read 0.0 after the
    run. Their values are put into the notebook's own objects, so what else holds them sees
    them (a model's ``metrics`` list made before the run)."""
    setup = (
        "import numpy as np, keras, tensorflow as tf\n"
        "loss_tracker = keras.metrics.Mean(name='loss')\n"
        "class CustomModel(keras.Model):\n"
        "    def train_step(self, data):\n"
        "        x, y = data\n"
        "        with tf.GradientTape() as tape:\n"
        "            loss = keras.losses.mean_squared_error(y, self(x, training=True))\n"
        "        grads = tape.gradient(loss, self.trainable_variables)\n"
        "        self.optimizer.apply(grads, self.trainable_variables)\n"
        "        loss_tracker.update_state(loss)\n"
        "        return {'loss': loss_tracker.result()}\n"
        "    @property\n"
        "    def metrics(self):\n"
        "        return [loss_tracker]\n"
        "shared = keras.layers.Dense(4, name='shared')\n"
        "shared.build((None, 8))\n"
        "kept = [loss_tracker]\n"  # another holder of the notebook's metric
        "x, y = np.random.rand(64, 8), np.random.rand(64, 1)\n"
    )
    assert run(shell, setup).success
    untrained = shell.user_ns["shared"].kernel.numpy().copy()
    cell = (
        "%%kerasrun --isolate --label tracked --quiet\n"
        "inputs = keras.Input((8,))\n"
        "model = CustomModel(inputs, keras.layers.Dense(1)(shared(inputs)))\n"
        "model.compile(optimizer='adam')\n"
        "model.fit(x, y, epochs=2, batch_size=16, verbose=0)\n"
        "said = float(loss_tracker.result())\n"
    )
    _ran(shell, cell)
    ns = shell.user_ns
    assert ns["kept"][0] is ns["loss_tracker"]  # the same object, its values taken on
    assert float(ns["loss_tracker"].count.numpy()) == 64.0  # the last epoch's samples
    assert float(ns["loss_tracker"].result()) == pytest.approx(ns["said"])
    trained = ns["model"].get_layer("shared").kernel.numpy()
    assert not np.array_equal(ns["shared"].kernel.numpy(), untrained)
    assert np.allclose(ns["shared"].kernel.numpy(), trained)
    (record,) = keras_nbguard.runs("tracked")
    assert "the state of shared and loss_tracker " in record.isolated, record.isolated
    size = record.isolated.split("the state of shared and loss_tracker ")[1][:12]
    assert " KiB" in size or " B" in size, size  # not "0.0 MiB"


def test_a_metric_counts_on_from_the_notebooks_count_and_a_layer_built_there_comes_back(shell):
    """Keras 3 pickles a metric without its state: the child's copy of a metric the notebook
    had counted with started at zero, and the cell read 5.0 where a plain run reads 15.0. A
    layer made in a setup cell and built by the cell's model comes back built and trained; an
    optimizer made there and built for the cell's model stays the notebook's, and says so."""
    setup = (
        "import numpy as np, keras\n"
        "seen = keras.metrics.Sum()\n"
        "seen.update_state(10.0)\n"
        "hidden = keras.layers.Dense(3, name='hidden')\n"  # not built yet
        "held = {'h': hidden}\n"  # another holder, which the cell does not read
        "adam = keras.optimizers.Adam(0.01)\n"
        "x, y = np.random.rand(32, 4), np.random.rand(32, 1)\n"
        "f1 = keras.metrics.F1Score()\n"  # its variables are made on first use
        "f1.update_state(np.eye(2, dtype='float32'), np.eye(2, dtype='float32'))\n"
    )
    assert run(shell, setup).success
    cell = (
        "%%kerasrun --isolate --label counted --quiet\n"
        "seen.update_state(5.0)\n"
        "total = float(seen.result())\n"
        "model = keras.Sequential([keras.Input((4,)), hidden, keras.layers.Dense(1)])\n"
        "model.compile(optimizer=adam, loss='mse')\n"
        "model.fit(x, y, epochs=1, verbose=0)\n"
        "made = keras.metrics.Mean()\n"  # the cell's own, pickled back without its counts
        "made.update_state([1.0, 2.0, 3.0])\n"
        "f1.update_state(np.eye(2, dtype='float32'), np.eye(2, dtype='float32'))\n"
    )
    with capture_output() as shown:
        _ran(shell, cell)
    ns = shell.user_ns
    assert ns["total"] == 15.0 and float(ns["seen"].result()) == 15.0
    assert float(ns["made"].result()) == 2.0
    assert ns["hidden"].built and ns["held"]["h"] is ns["hidden"]  # built alike, in place
    assert np.allclose(ns["hidden"].kernel.numpy(), ns["model"].get_layer("hidden").kernel.numpy())
    (record,) = keras_nbguard.runs("counted")
    assert (
        "adam (its variables were made there, in the cell: the notebook's Adam is as it was)"
        in (record.isolated)
    ), record.isolated
    assert "Skipping variable loading" not in shown.stdout + shown.stderr
    # Keras 3 pickles it unbuilt: it counted from zero there, and that is said, not taken back
    assert "f1 (its counts could not be set there (its variables differ)" in record.isolated


def test_keras_objects_inside_the_notebooks_lists_and_dicts_change_as_after_a_plain_run(shell):
    """Metrics and layers held in a dict or a list, not by a name of their own: a dict of
    trackers the cell updates (``trackers['loss'].update_state``: the notebook's read 0.0
    after the run, never counted), one counted before the run (0.0 there: Keras 3 pickles a
    metric without its counts), a container that goes back whole (``models['a'] = model``: its
    metric came back at zero), a layer a list holds trained inside the cell's model (the
    notebook's kept its untrained weights). Each is found by the path a user would type."""
    setup = (
        "import numpy as np, keras\n"
        "trackers = {'loss': keras.metrics.Mean(name='loss'), 'seen': keras.metrics.Sum()}\n"
        "trackers['seen'].update_state(10.0)\n"
        "blocks = [keras.layers.Dense(4, name='block')]\n"
        "blocks[0].build((None, 8))\n"
        "unbuilt = (keras.layers.Dense(2, name='unbuilt'),)\n"
        "head = keras.layers.Dense(1, name='head')\n"  # not built yet
        "heads = {'out': head, 'again': head}\n"
        "kept = trackers['loss']\n"  # another holder of the notebook's metric
        "logs = {}\n"
        "x, y = np.random.rand(64, 8), np.random.rand(64, 1)\n"
    )
    assert run(shell, setup).success
    untrained = shell.user_ns["blocks"][0].kernel.numpy().copy()
    heads = shell.user_ns["heads"]
    cell = (
        "%%kerasrun --isolate --label contained --quiet\n"
        "layers = [keras.Input((8,)), blocks[0], unbuilt[0], heads['out']]\n"
        "model = keras.Sequential(layers)\n"
        "model.compile(optimizer='adam', loss='mse')\n"
        "history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)\n"
        "trackers['loss'].update_state(history.history['loss'])\n"
        "trackers['seen'].update_state(5.0)\n"
        "said = float(trackers['loss'].result())\n"
        "logs['mean'] = keras.metrics.Mean()\n"
        "logs['mean'].update_state([1.0, 2.0, 3.0])\n"
    )
    _ran(shell, cell)
    ns = shell.user_ns
    assert ns["kept"] is ns["trackers"]["loss"]  # the same object, its values taken on
    assert float(ns["trackers"]["loss"].result()) == pytest.approx(ns["said"]) != 0.0
    assert float(ns["trackers"]["seen"].result()) == 15.0
    assert float(ns["logs"]["mean"].result()) == 2.0  # the dict came back whole, counts too
    trained = ns["model"].get_layer("block").kernel.numpy()
    assert not np.array_equal(ns["blocks"][0].kernel.numpy(), untrained)
    assert np.allclose(ns["blocks"][0].kernel.numpy(), trained)
    (record,) = keras_nbguard.runs("contained")
    state = re.search(r"the state of (.+?) [\d.,]+ (?:B|KiB|MiB)", record.isolated)[1]
    assert sorted(state.replace(" and ", ", ").split(", ")) == [
        "blocks[0]",
        "trackers['loss']",
        "trackers['seen']",
    ], record.isolated
    # built there, inside a tuple: the notebook's own layer is built alike and trained
    assert ns["unbuilt"][0].built and "unbuilt[0]" not in record.isolated
    trained = ns["model"].get_layer("unbuilt").kernel.numpy()
    assert np.allclose(ns["unbuilt"][0].kernel.numpy(), trained)
    # built there inside a dict: it comes back whole, into its place in the notebook's dict
    assert ns["heads"] is heads and ns["heads"]["out"].built
    assert ns["heads"]["again"] is ns["heads"]["out"]  # one layer at two paths stays one
    assert ns["head"] is ns["heads"]["out"]  # the notebook's own layer, built as it was there
    assert np.allclose(ns["heads"]["out"].kernel.numpy(), ns["model"].get_layer("head").kernel)


def test_a_path_that_holds_another_object_after_the_cell_or_two_copies_of_one_takes_nothing(
    shell,
):
    """A container reordered there in a way not seen as a change (a function of the notebook
    swapping its items) holds other objects at its paths after the cell: their values must not
    go into the notebook's objects at those paths (each layer took the other's weights). One
    metric the cell reached by two names had a copy under each there, counted differently:
    neither's values are taken, and it is said."""
    setup = (
        "import numpy as np, keras\n"
        "pair = [keras.layers.Dense(2, name='p0'), keras.layers.Dense(2, name='p1')]\n"
        "for layer in pair:\n"
        "    layer.build((None, 3))\n"
        "def swap(xs):\n"
        "    xs[0], xs[1] = xs[1], xs[0]\n"
        "tracker = keras.metrics.Sum()\n"
        "box = {'t': tracker}\n"
    )
    assert run(shell, setup).success
    weights = [layer.kernel.numpy().copy() for layer in shell.user_ns["pair"]]
    cell = (
        "%%kerasrun --isolate --label moved --quiet\n"
        "swap(pair)\n"
        "tracker.update_state(1.0)\n"
        "box['t'].update_state(3.0)\n"
    )
    _ran(shell, cell)
    ns = shell.user_ns
    assert [layer.name for layer in ns["pair"]] == ["p0", "p1"]
    kernels = [layer.kernel.numpy() for layer in ns["pair"]]
    assert all(np.array_equal(k, w) for k, w in zip(kernels, weights, strict=True))
    assert ns["box"]["t"] is ns["tracker"] and float(ns["tracker"].result()) == 0.0
    (record,) = keras_nbguard.runs("moved")
    assert "pair[0] and pair[1] (each another object is there now" in record.isolated
    assert "tracker (changed there as box['t'] too, differently" in record.isolated


def test_keras_objects_are_found_by_the_paths_a_user_types_and_the_walk_is_bounded():
    """The paths both sides walk: dicts, lists, tuples, three levels down, keys one can type;
    a container past the item budget is cut short, one that can't be read is skipped; a metric
    whose counts could not be set there is said to come back with them only where its
    container goes back whole."""
    import keras

    from keras_nbguard.isolation import changed_state

    metric, layer = keras.metrics.Sum(), keras.layers.Dense(1)

    class Unreadable(dict):
        def items(self):
            raise ValueError("no")

    namespace = {
        "nested": {"a": [(1, metric)], 2: {"b": {"c": {"d": layer}}}, (1, 2): layer},
        "long": [0.0] * 5_000 + [metric],
        "odd": Unreadable(x=metric),
        "plain": metric,
    }
    found = dict(changed_state.keras_objects(namespace, namespace))
    assert found.pop("nested['a'][0][1]") is metric  # three containers down
    # not nested[2]['b']['c']['d'] (four), nested[(1, 2)], long[5000] (past the budget), odd['x']
    assert {key for key in found if "[" in key} == set()
    assert changed_state.objects_at(namespace, ["nested['a'][0][1]", "plain", "gone[0]"]) == {
        "nested['a'][0][1]": metric,
        "plain": metric,
    }
    # one metric under two keys: copies that agree (a NaN mean too) are taken once; copies
    # that differ, or that can't be set, are refused under both keys
    mean = keras.metrics.Mean()
    both = {"mean": mean, "box": {"m": mean}}
    sig = changed_state.signature(mean.variables)
    nan = (sig, [np.float32("nan"), np.float32(2.0)])
    assert changed_state.take_on(both, {"mean": nan, "box['m']": nan}) == {}
    assert float(mean.count.numpy()) == 2.0
    other = (sig, [np.float32(1.0), np.float32(3.0)])
    refused = changed_state.take_on(both, {"mean": nan, "box['m']": other})
    assert sorted(refused) == ["box['m']", "mean"] and "differently" in refused["mean"]
    wrong = ((("total", (2,), "float32"),), [np.zeros(2, "float32")])
    unset = changed_state.take_on(both, {"mean": wrong, "box['m']": wrong})
    assert sorted(unset) == ["box['m']", "mean"] and "its variables differ" in unset["box['m']"]
    # layers built there, into their places: two paths to one place that came back as two
    # layers put neither; one layer at two paths was sent once (aliases), put at both
    box = {"l": layer}
    places = {"box": box, "cfg": {"box": box}, "pair": [layer, layer]}
    built, other = keras.layers.Dense(1), keras.layers.Dense(1)
    refused = changed_state.put_in_place(places, {"box['l']": built, "cfg['box']['l']": other})
    assert sorted(refused) == ["box['l']", "cfg['box']['l']"] and box["l"] is layer
    assert changed_state.put_in_place(places, {"pair[0]": built, "pair[1]": built}) == {}
    assert places["pair"] == [built, built]
    assert changed_state.aliases({"a": built, "b": built, "c": other}) == {"b": "a"}
    said = changed_state.counted_from_zero(
        {"box['f1']": "its variables differ", "f1": "x"}, ["box"]
    )
    assert said["box['f1']"].endswith("came back with those counts")
    assert said["f1"].endswith("the notebook's keeps its own")


def test_a_layer_built_there_is_the_notebooks_own_where_its_build_can_be_repeated(shell):
    """The notebook's own layer, built alike in the kernel, stands in for the copy that came
    back (what else holds it sees it built and trained, as after a plain run), the cell's value
    too (``Out[n] is hidden``); a layer of layers with a build() of its own as well."""
    setup = (
        "import numpy as np, keras\n"
        "hidden = keras.layers.Dense(3, name='hidden')\n"
        "alias = hidden\n"
        "class Block(keras.layers.Layer):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.inner = keras.layers.Dense(2)\n"
        "    def build(self, input_shape):\n"
        "        self.inner.build(input_shape)\n"
        "    def call(self, x):\n"
        "        return self.inner(x)\n"
        "block = Block(name='block')\n"
        "also = block\n"
        "x, y = np.random.rand(32, 4), np.random.rand(32, 1)\n"
    )
    assert run(shell, setup).success
    cell = (
        "%%kerasrun --isolate --label alike --quiet\n"
        "model = keras.Sequential([keras.Input((4,)), hidden, block, keras.layers.Dense(1)])\n"
        "model.compile(optimizer='adam', loss='mse')\n"
        "model.fit(x, y, epochs=1, verbose=0)\n"
        "hidden\n"
    )
    with capture_output() as shown:
        _ran(shell, cell)
    ns = shell.user_ns
    assert ns["alias"] is ns["hidden"] and ns["hidden"].built and ns["_"] is ns["hidden"]
    trained = ns["model"].get_layer("hidden").kernel.numpy()
    assert np.allclose(ns["hidden"].kernel.numpy(), trained)
    assert ns["also"] is ns["block"] and ns["block"].inner.built
    inner = ns["model"].get_layer("block").inner.kernel.numpy()
    assert np.allclose(ns["block"].inner.kernel.numpy(), inner)
    assert "build()" not in shown.stdout + shown.stderr  # no Keras note on a build here


def test_a_function_inside_a_value_sent_reads_the_childs_names_and_its_changes_come_back(shell):
    """``keras.callbacks.LambdaCallback(on_epoch_end=log_epoch)`` made in a setup cell, with
    ``log_epoch`` appending to the notebook's ``losses``: pickled with the callback, the function
    appended to a copy of its own, and the cell printed ``[]``; a plain run fills the list, in
    the cell and in the notebook after it. A dict of the notebook's functions read by one stays
    the kernel's (only plain data comes back)."""
    setup = (
        "losses = []\n"
        "every = 1\n"
        "def log_epoch(epoch, logs):\n"
        "    if epoch % every == 0:\n"
        "        losses.append(logs['loss'])\n"
        "class Callback:\n"
        "    def __init__(self, on_epoch_end):\n"
        "        self.on_epoch_end = on_epoch_end\n"
        "logger = Callback(on_epoch_end=log_epoch)\n"
        "registry = {'log': log_epoch}\n"
        "import numpy as np\n"
        "tags = set('abcdefghijkl')\n"  # pickles in another order there: unchanged all the same
        "means = []\n"
        "def fit(epochs):\n"
        "    for epoch in range(epochs):\n"
        "        logger.on_epoch_end(epoch, {'loss': 1.0 / (epoch + 1)})\n"
        "    means.append(np.mean(losses))\n"  # a NumPy scalar: plain data all the same
        "    return registry, len(tags)\n"
    )
    assert run(shell, setup).success
    registry, tags = shell.user_ns["registry"], shell.user_ns["tags"]
    cell = "%%kerasrun --isolate --label lambda --quiet\nfit(2)\nseen = list(losses)\n"
    _ran(shell, cell)
    assert shell.user_ns["seen"] == [1.0, 0.5]  # the cell saw what the callback appended
    assert shell.user_ns["losses"] == [1.0, 0.5]  # and so does the notebook, as after a plain run
    assert shell.user_ns["registry"] is registry and shell.user_ns["tags"] is tags
    assert shell.user_ns["means"] == [0.75]
    assert "every (pickle" in _sent("lambda")  # read only by the function inside the callback


def test_a_notebook_layer_built_as_its_model_loads_reads_the_names_sent(shell):
    """keras.io's VAE: a ``Sampling`` layer whose ``__init__`` reads the notebook's ``keras``.
    Loading the encoder in the child builds it, so the names its methods read must be there
    first: made after the model, ``keras`` was not, and the run failed (``could not be
    deserialized properly``)."""
    setup = (
        "import numpy as np\nimport keras\n"
        "factor = 3.0\n"
        "class Scale(keras.layers.Layer):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.factor = keras.ops.convert_to_tensor(factor)\n"
        "    def call(self, x):\n"
        "        return x * self.factor\n"
        "model = keras.Sequential([keras.Input((2,)), Scale()])\n"
    )
    assert run(shell, setup).success
    cell = "%%kerasrun --isolate --label layer --quiet\n"
    _ran(shell, cell + "out = float(model(np.ones((1, 2))).numpy().sum())\n")
    assert shell.user_ns["out"] == 6.0


def test_what_the_notebooks_function_binds_with_global_comes_back(shell):
    """A ``run_experiment()`` that keeps its history with ``global history``: run
    plainly, the notebook has it after the call; isolated, only the cell's own bindings came
    back, and ``history`` was the old one. A name such a function may bind but the call did not
    (``best``) does not travel back; one it only binds does not travel in."""
    setup = (
        "history = None\n"
        "best = 'before'\n"
        "def run_experiment(epochs):\n"
        "    global history\n"
        "    history = f'trained {epochs}'\n"
        "    return epochs\n"
        "def keep_best():\n"
        "    global best\n"
        "    best = 'kept'\n"
    )
    assert run(shell, setup).success
    best = shell.user_ns["best"]
    _ran(shell, "%%kerasrun --isolate --label global --quiet\nscore = run_experiment(3)\n")
    assert (shell.user_ns["score"], shell.user_ns["history"]) == (3, "trained 3")
    assert shell.user_ns["best"] is best  # keep_best was never called: nothing came back for it
    # a name the function only binds needs nothing of the kernel's (a History, with its model)
    assert "history (" not in _sent("global") and "run_experiment (" in _sent("global")


def test_a_name_only_a_function_reads_that_cannot_go_is_left_behind_and_said(shell):
    """A lock the notebook's function uses, which the cell makes anew before calling it: the
    run goes on (as when the function took it along, it could not go either), and says so."""
    setup = (
        "import threading\nlock = threading.Lock()\ndef work():\n    with lock:\n        return 5\n"
    )
    assert run(shell, setup).success
    _ran(
        shell, "%%kerasrun --isolate --label lock --quiet\nlock = threading.Lock()\nsaid = work()\n"
    )
    assert shell.user_ns["said"] == 5
    assert "lock (not sent, though a function reads it: pickle: it can't be pickled" in _sent(
        "lock"
    )


def test_an_output_the_cell_never_binds_is_said_in_one_line_and_the_run_goes_on(shell):
    """``--outputs c,nosuch``: ``c`` comes back, and one line after the run says ``nosuch``
    did not (a typo, most likely); a name bound where code can't show it is not said."""
    assert run(shell, "a = 1\nb = 2\nkept = 'mine'\n").success
    with capture_output() as seen:
        result = run(
            shell, "%%kerasrun --isolate --outputs c,nosuch,kept --label o --quiet\nc = a + b\n"
        )
    assert result.success, (result.error_in_exec, seen.stderr)
    assert shell.user_ns["c"] == 3 and "nosuch" not in shell.user_ns
    assert shell.user_ns["kept"] == "mine"
    said = [line for line in seen.stderr.splitlines() if "--outputs" in line]
    assert said == [
        "keras_nbguard: --outputs: 'nosuch', 'kept' did not come back: the cell never binds them"
    ], seen.stderr
    late = "%%kerasrun --isolate --outputs late --label o2 --quiet\nglobals()['late'] = a\n"
    sweep = '%%kerasrun --sweep "a=1,2" --outputs c,zz --label o3 --quiet\nc = a + b\n'
    with capture_output() as seen:
        assert run(shell, late).success and run(shell, sweep).success
    assert shell.user_ns["late"] == 1  # it came back: nothing said
    said = [line for line in seen.stderr.splitlines() if "--outputs" in line]
    assert said == ["keras_nbguard: --outputs: 'zz' did not come back: the cell never binds it"]


def test_ipythons_own_open_is_not_sent_but_a_users_open_is(shell, tmp_path):
    """IPython puts its own ``open`` in the notebook's names (``user_ns_hidden``): a cell that
    wrote a file sent it (``the names sent: open (pickle 6.8 KiB)``)."""
    path = tmp_path / "scores.txt"
    cell = f"%%kerasrun --isolate --label files --quiet\nwith open({str(path)!r}, 'w') as f:\n"
    _ran(shell, cell + "    f.write('0.5')\n")
    assert path.read_text() == "0.5"
    assert "open" not in _sent("files")
    _ran(shell, "def open(*args, **kwargs):\n    raise RuntimeError('mine')\n")
    with capture_output():
        assert not run(shell, cell.replace("files", "mine") + "    pass\n").success
    (record,) = keras_nbguard.runs("mine")
    assert "open (" in record.isolated and "mine" in (record.error or ""), record.error


def test_a_model_a_with_block_builds_is_the_cells_own_not_sent(shell):
    """keras.io's distributed training guide builds its model in ``with strategy.scope():``.
    The block's body runs whole, so the kernel's model of the last run was not needed in the
    child, yet it was sent at every run (3.1 MiB there; a large model's seconds). Under a
    manager that may swallow an error (``suppress``) the body may stop early: sent, as before."""
    setup = (
        "import contextlib\nimport numpy as np\nimport tensorflow as tf\nimport keras\n"
        "def make():\n"
        "    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "    m.compile('sgd', 'mse')\n"
        "    return m\n"
        "x, y = np.ones((8, 4), 'float32'), np.ones((8, 1), 'float32')\n"
        "model = make()\n"
    )
    assert run(shell, setup).success
    for label, manager in (
        ("scoped", "tf.device('/CPU:0')"),
        ("swallowed", "contextlib.suppress(ValueError)"),
    ):
        cell = (
            f"%%kerasrun --isolate --label {label} --quiet\n"
            f"with {manager}:\n"
            "    model = make()\n"
            "model.fit(x, y, epochs=1, verbose=0)\n"
        )
        _ran(shell, cell)
        assert ("model (keras" in _sent(label)) is (label == "swallowed"), _sent(label)


def test_a_pipeline_the_isolated_cell_made_is_said_to_stay_there_in_the_users_words(shell):
    """keras.io's distributed training guide makes its datasets in the training cell. Pickling
    one back failed with "Cannot convert a Tensor of dtype variant to a NumPy array", which
    says nothing of what to do."""
    cell = (
        "%%kerasrun --isolate --label made --quiet\n"
        "import tensorflow as tf\n"
        "train_ds, test_ds = tf.data.Dataset.range(8).batch(2), tf.data.Dataset.range(4)\n"
        "count = int(train_ds.cardinality())\n"
    )
    _ran(shell, cell)
    assert shell.user_ns["count"] == 4 and "train_ds" not in shell.user_ns
    words = _sent("made")
    assert (
        "train_ds and test_ds (each a tf.data pipeline: it stays in the process "
        "that made it; make it in a cell of its own to have it here and in isolated runs)"
    ) in words, words
    assert "variant" not in words


TEXT_SETUP = """\
import numpy as np
import tensorflow as tf
import keras
texts = np.array(["the cat sat", "a dog ran far", "the dog sat down", "cats and dogs play"] * 8)
labels = np.array([0, 1, 1, 0] * 8, "float32")
vectorize_layer = keras.layers.TextVectorization(
    max_tokens=50, output_mode="int", output_sequence_length=6)
vectorize_layer.adapt(texts)
def vectorize_text(text, label):
    return vectorize_layer(text), label
raw_train_ds = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(4)
train_ds = raw_train_ds.map(vectorize_text)
train_ds = train_ds.cache().prefetch(2)
"""

TEXT_TRAIN = """%%kerasrun --isolate --label text --quiet
model = keras.Sequential([keras.Input((6,), dtype="int64"), keras.layers.Embedding(51, 4),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(train_ds, epochs=1, verbose=0)
vocab = vectorize_layer.get_vocabulary()
tokens = vectorize_layer(["the dog sat"]).numpy().tolist()
batches = sum(1 for _ in train_ds)
"""


def test_an_adapted_text_vectorization_and_its_pipeline_reach_the_child(shell):
    assert run(shell, TEXT_SETUP).success
    setup = _cell_number(shell)
    _ran(shell, TEXT_TRAIN)
    ns = shell.user_ns
    layer = ns["vectorize_layer"]
    assert ns["vocab"] == layer.get_vocabulary()  # the same vocabulary in the child
    assert ns["tokens"] == layer(["the dog sat"]).numpy().tolist()
    assert ns["batches"] == 8  # the whole pipeline, rebuilt there
    (record,) = keras_nbguard.runs("text")
    assert record.fits and record.fits[0].epochs == 1  # it trained, in the child
    words = _sent("text")
    assert "vectorize_layer (keras" in words  # weights and vocabulary: Keras' own format
    # the pipeline: the setup cell's statements that built it (lines 11-13), not the others
    assert f"train_ds (replayed In[{setup}] lines 11-13)" in words, words
    assert "keras (module)" in words


FEATURES_SETUP = """\
import numpy as np
import tensorflow as tf
import keras
from keras.utils import FeatureSpace
data = {"cp": np.array([0, 1, 2, 3] * 8), "thal": np.array(["fixed", "normal"] * 16),
        "chol": np.linspace(0, 1, 32, dtype="float32")}
labels = np.array([0, 1] * 16)
train_ds = tf.data.Dataset.from_tensor_slices((data, labels)).batch(8)
feature_space = FeatureSpace(
    features={"cp": FeatureSpace.integer_categorical(num_oov_indices=0),
              "thal": FeatureSpace.string_categorical(num_oov_indices=0),
              "chol": FeatureSpace.float_normalized()},
    crosses=[FeatureSpace.cross(feature_names=("cp", "thal"), crossing_dim=8)],
    output_mode="concat")
feature_space.adapt(train_ds.map(lambda x, _: x))
preprocessed_train_ds = train_ds.map(lambda x, y: (feature_space(x), y))
"""

FEATURES_TRAIN = """%%kerasrun --isolate --label features --quiet
model = keras.Sequential([keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy")
model.fit(preprocessed_train_ds, epochs=1, verbose=0)
width = int(next(iter(preprocessed_train_ds))[0].shape[-1])
"""


def test_an_adapted_feature_space_feeds_a_replayed_pipeline_in_the_child(shell):
    """keras.io's structured data example (FeatureSpace): the loaded ``feature_space`` built its
    encoders at its first call, inside the replayed ``map``'s graph, and Keras failed there
    (``OperatorNotAllowedInGraphError``): the example could not run with ``--isolate``."""
    assert run(shell, FEATURES_SETUP).success
    _ran(shell, FEATURES_TRAIN)
    ns = shell.user_ns
    assert ns["width"] == int(next(iter(ns["preprocessed_train_ds"]))[0].shape[-1])
    (record,) = keras_nbguard.runs("features")
    assert record.status == "ok" and record.fits and record.fits[0].epochs == 1
    words = _sent("features")
    assert "preprocessed_train_ds (replayed In[" in words, words  # feature_space with it


PIPELINE_SETUP = """\
import numpy as np
import tensorflow as tf
import keras
rng = np.random.default_rng(0)
ds_train = tf.data.Dataset.from_tensor_slices(
    (rng.integers(0, 256, (256, 28, 28, 1), dtype="uint8"), rng.integers(0, 10, 256)))
def normalize_img(image, label):
    return tf.cast(image, tf.float32) / 255.0, label
ds_train = ds_train.map(normalize_img, num_parallel_calls=tf.data.AUTOTUNE)
ds_train = ds_train.cache()
ds_train = ds_train.shuffle(256)
ds_train = ds_train.batch(64)
ds_train = ds_train.prefetch(tf.data.AUTOTUNE)
"""

PIPELINE_TRAIN = """%%kerasrun --isolate --label pipeline --quiet
model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                          keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(ds_train, epochs=1, verbose=0)
shapes = [tuple(x.shape) for x, _ in ds_train]
top = float(max(float(tf.reduce_max(x)) for x, _ in ds_train))
labels = sorted(int(v) for _, y in ds_train for v in y)
"""


def test_a_pipeline_drawn_from_a_random_generator_reaches_the_child_with_its_data(shell):
    """A user's walkthrough, keras.io's text classification: replayed in the child, the setup's
    `reviews(32)` drew from `rng` as it is now (moved on by every draw since), so the isolated
    run trained and evaluated on other reviews and labels than the kernel's (accuracy 0.72
    isolated, 0.34 in the kernel). A pipeline whose statements draw from a random stream is
    sent as its data (tf.data's save) instead."""
    assert run(shell, PIPELINE_SETUP).success
    kernel_labels = sorted(int(v) for _, y in shell.user_ns["ds_train"] for v in y)
    _ran(shell, PIPELINE_TRAIN)
    ns = shell.user_ns
    assert ns["labels"] == kernel_labels  # the kernel's own data, not new draws
    assert ns["shapes"] == [(64, 28, 28, 1)] * 4  # map, cache, shuffle, batch: as built here
    assert 0.9 < ns["top"] <= 1.0  # normalized by the notebook's own function
    assert len(ns["history"].history["loss"]) == 1
    words = _sent("pipeline")
    assert "ds_train (tf.data " in words and "replayed" not in words, words


SUBMODEL_SETUP = """\
import numpy as np
import keras

class Scale(keras.layers.Layer):  # the notebook's own class: not importable in the child
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor
    def call(self, x):
        return x * self.factor
    def get_config(self):
        return {**super().get_config(), "factor": self.factor}

latent_dim = 4
generator = keras.Sequential(
    [keras.Input((latent_dim,)), keras.layers.Dense(8), Scale(3.0)], name="generator")
noise = np.random.default_rng(0).random((16, latent_dim), dtype="float32")
expected = generator.predict(noise, verbose=0)
"""

SUBMODEL_TRAIN = """%%kerasrun --isolate --label submodel --quiet
same = bool(np.allclose(generator.predict(noise, verbose=0), expected))
factor = (type(generator.layers[-1]).__name__, generator.layers[-1].factor)
combined = keras.Sequential([generator, keras.layers.Dense(1)])
combined.compile("adam", "mse")
combined.fit(noise, np.zeros((16, 1)), epochs=1, verbose=0)
"""


def test_a_sub_model_built_in_a_setup_cell_is_used_in_an_isolated_cell(shell):
    assert run(shell, SUBMODEL_SETUP).success
    _ran(shell, SUBMODEL_TRAIN)
    ns = shell.user_ns
    assert ns["same"] is True  # its weights came along
    assert ns["factor"] == ("Scale", 3.0)  # and the notebook's class it is made of
    assert ns["combined"].predict(ns["noise"], verbose=0).shape == (16, 1)
    words = _sent("submodel")
    assert "generator (keras" in words and "noise (pickle" in words


def test_a_pipeline_with_no_cell_to_replay_is_saved_by_tf_data(shell):
    # made outside the notebook's history (as %run or a helper module would)
    made = (
        "import tensorflow as tf\n"
        "saved_ds = tf.data.Dataset.range(10).map(lambda v: v * 2).batch(4)\n"
        "forever_ds = tf.data.Dataset.range(3).repeat()\n"
    )
    assert shell.run_cell(made, store_history=False).success
    total = "total = int(sum(int(tf.reduce_sum(b)) for b in saved_ds))\n"
    _ran(shell, "%%kerasrun --isolate --label saved --quiet\n" + total)
    assert shell.user_ns["total"] == 90
    assert "saved_ds (tf.data " in _sent("saved") and "earlier run" not in _sent("saved")
    # saved once: the pipeline can't change, and saving runs it in the kernel (time, and
    # ~1 MiB of heap that TensorFlow keeps each time)
    shell.user_ns["total"] = None
    result = run(shell, "%%kerasrun --isolate --label again --quiet\n" + total)
    assert result.success and shell.user_ns["total"] == 90
    assert "saved_ds (tf.data " in _sent("again") and "saved by an earlier run" in _sent("again")
    with capture_output() as seen:  # no way at all: said before anything starts
        cell = "%%kerasrun --isolate --label never\nnext(iter(forever_ds))\n"
        assert not run(shell, cell).success
    said = seen.stderr + seen.stdout
    assert "can't send 'forever_ds' (_RepeatDataset)" in said
    assert "no earlier cell" in said and "repeats forever" in said
    assert keras_nbguard.runs("never") == []


def test_a_replay_that_fails_in_the_child_says_which_cell_and_line(shell, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("a\nb\n")
    assert run(shell, f"path = {str(path)!r}").success
    assert run(shell, "size = 2\nlines = (line for line in open(path))\n").success
    setup = _cell_number(shell)
    os.unlink(path)  # the replay will not find it
    with capture_output() as seen:
        result = run(shell, "%%kerasrun --isolate --label gone\nfirst = next(lines)\n")
    assert not result.success
    said = seen.stderr + seen.stdout
    assert f"replaying In[{setup}] line 2" in said and "FileNotFoundError" in said, said
    (record,) = keras_nbguard.runs("gone")
    assert record.status == "error" and f"In[{setup}]" in record.error


def test_what_is_this_kernels_own_is_not_replayed(shell):
    assert run(shell, "import threading\nlock = threading.Lock()").success
    with capture_output() as seen:
        assert not run(shell, "%%kerasrun --isolate --label locked\nwith lock:\n    pass\n").success
    said = seen.stderr + seen.stdout
    assert "can't send 'lock' (lock)" in said and "this kernel's own" in said
    assert keras_nbguard.runs("locked") == []


def test_a_seeded_notebook_draws_the_same_numbers_isolated_as_plainly(shell):
    """After ``keras.utils.set_random_seed(42)``, each isolated run drew other numbers (a fresh
    process seeds itself): NumPy's first ``rand()`` 0.0551, then 0.1949, where a plain run draws
    0.3745. The child starts from the notebook's streams, and hands them back, so run after run
    draws what plain runs draw: NumPy, Python, ``keras.random``, a new layer's weights and
    TensorFlow's ops without a seed of their own. The points of a sweep all start from the same
    state."""
    draw = (
        "r = (float(np.random.rand()), random.random(), float(keras.random.uniform(())), "
        "float(keras.layers.Dense(1)(np.ones((1, 1))).numpy()[0, 0]), "
        "float(tf.random.uniform(())))\n"  # TensorFlow's op seeds, from its global seed
        # a model that comes back: loading its Dropout draws a seed in the kernel, before the
        # child's streams are taken on there
        "m = keras.Sequential([keras.Input((1,)), keras.layers.Dropout(0.5)])\n"
    )
    seed = "import random\nimport numpy as np\nimport tensorflow as tf\nimport keras\n"
    seed += "keras.utils.set_random_seed(42)\n"

    def two_runs(options: str) -> list[tuple[float, ...]]:
        assert run(shell, seed).success
        drawn = []
        for _ in range(2):
            _ran(shell, f"%%kerasrun {options} --quiet --label seeded\n{draw}")
            drawn.append(shell.user_ns["r"])
        return drawn

    isolated, plain = two_runs("--isolate"), two_runs("")
    assert isolated == plain and isolated[0] != isolated[1], (isolated, plain)
    assert run(shell, seed).success
    _ran(shell, '%%kerasrun --sweep "k=1,2" --quiet\nr = float(np.random.rand())\n')
    assert [point["r"] for point in shell.user_ns["_"].values()] == [plain[0][0]] * 2


def test_an_array_a_notebook_function_writes_into_comes_back_and_one_it_reads_stays(shell):
    """A function that fills the notebook's array in place (``predictions[:n] = ...``): the child
    maps the kernel's segment copy-on-write, so its writes were its own and the notebook's array
    stayed as it was, where a plain run fills it. It comes back when its bytes differ from what
    was sent; an array the functions only read stays the kernel's own object. Read by the cell
    too, it went read-only there (``assignment destination is read-only``)."""
    setup = (
        "import numpy as np\n"
        "predictions = np.zeros(2**18)\n"  # 2 MiB: shared memory
        "inputs = np.full(2**18, np.nan)\n"  # a NaN equals itself, byte for byte
        "def predict(n):\n"
        "    predictions[:n] = 1.0\n"
        "    return float(np.isnan(inputs).sum())\n"
    )
    assert run(shell, setup).success
    inputs = shell.user_ns["inputs"]
    cell = "%%kerasrun --isolate --label fill --quiet\nnans = predict(10)\n"
    _ran(shell, cell + "total = float(predictions.sum())\n")  # the cell reads it too
    assert shell.user_ns["predictions"][:11].tolist() == [1.0] * 10 + [0.0]
    assert shell.user_ns["total"] == 10.0
    assert shell.user_ns["inputs"] is inputs and shell.user_ns["nans"] == 2**18
    assert "predictions (shared memory 2.0 MiB, writable)" in _sent("fill")


def test_a_function_that_reaches_itself_and_one_that_reads_ipythons_own_names_are_sent(shell):
    """A call-counting decorator (``wrapper.calls += 1``) and a recursive inner helper reach
    themselves: detached by a reduce of our own, they lost their attributes (``'function' object
    has no attribute 'calls'``) or recursed without end. A function that reads a display handle
    (IPython's own: never sent) keeps its copies, as before, instead of a NameError there."""
    setup = (
        "import functools\n"
        "from IPython.display import display\n"
        "k = 2\n"
        "def counted(f):\n"
        "    @functools.wraps(f)\n"
        "    def wrapper(*a):\n"
        "        wrapper.calls += 1\n"
        "        return f(*a) * k\n"
        "    wrapper.calls = 0\n"
        "    return wrapper\n"
        "@counted\n"
        "def double(x):\n"
        "    return 2 * x\n"
        "def outer(n):\n"
        "    def inner(i):\n"
        "        return 0 if i == 0 else k + inner(i - 1)\n"
        "    return inner(n)\n"
        "handle = display('x', display_id=True)\n"
        "def refresh():\n"
        "    handle.update('y')\n"
        "    return 'updated'\n"
    )
    with capture_output():
        assert run(shell, setup).success
    cell = "%%kerasrun --isolate --label itself --quiet\nk = 3\n"
    _ran(shell, cell + "said = (double(4), double.calls, outer(2), refresh())\n")
    assert shell.user_ns["said"] == (24, 1, 6, "updated")


def test_what_only_the_notebooks_keras_classes_read_is_never_replayed(shell):
    """Every notebook Keras class goes to the child (Keras loads objects of them by name), and
    the names their methods read with them; a callback that reads the notebook's ``val_ds`` made
    every isolated cell replay the pipeline's cell, one that prints a number too."""
    assert run(shell, "import tensorflow as tf\nval_ds = tf.data.Dataset.range(4)\n").success
    setup = (
        "import keras\n"
        "epochs = 3\n"
        "class Evaluate(keras.callbacks.Callback):\n"
        "    def on_epoch_end(self, epoch, logs=None):\n"
        "        self.model.evaluate(val_ds, verbose=0)\n"
        "sizes = [1.0, 2.0]\n"
    )
    assert run(shell, setup).success
    _ran(shell, "%%kerasrun --isolate --label small --quiet\ntotal = sum(sizes) * epochs\n")
    assert shell.user_ns["total"] == 9.0
    assert "val_ds" not in _sent("small"), _sent("small")


def test_a_model_trained_there_says_which_names_still_hold_the_one_from_before(shell):
    """A user's walkthrough: after `alias = model; models = [model]`, an isolated
    `model.fit(...)` left `alias` and `models[0]` untrained (the model comes back as a new
    object, where a plain run trains that very one) and nothing said so."""
    setup = (
        "import numpy as np, keras\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "model.compile('sgd', 'mse')\nalias = model\nmodels = [model]\n"
        "x, y = np.ones((32, 4), 'float32'), np.ones((32, 1), 'float32')\n"
    )
    assert run(shell, setup).success
    _ran(
        shell, "%%kerasrun --isolate --label alias --quiet\nmodel.fit(x, y, epochs=1, verbose=0)\n"
    )
    ns = shell.user_ns
    assert ns["alias"] is not ns["model"] and ns["models"][0] is ns["alias"]
    words = _sent("alias")
    assert (
        "model came back as a new object: alias, models[0] still hold the one from before the "
        "run, as it was (a plain run changes that very model)"
    ) in words, words


def test_a_compiled_untrained_model_keeps_its_optimizer_unbuilt_both_ways(shell):
    """A user's walkthrough, keras.io's text example: `end_to_end_model`, compiled and only
    evaluated, came back from --isolate with 21.4 MiB of Adam slots a plain run never makes
    (Keras builds a compiled model's optimizer as it loads it). One that never took a step
    stays unbuilt, in the child and back; a trained one keeps its state."""
    setup = (
        "import numpy as np, keras\n"
        "def make():\n"
        "    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(64)])\n"
        "    m.compile('adam', 'mse')\n"
        "    return m\n"
        "untrained, trained = make(), make()\n"
        "x, y = np.ones((32, 4), 'float32'), np.ones((32, 64), 'float32')\n"
    )
    assert run(shell, setup).success
    cell = (
        "%%kerasrun --isolate --label unbuilt --quiet\n"
        "there = untrained.optimizer.built\n"
        "score = untrained.evaluate(x, y, verbose=0)\n"
        "trained.fit(x, y, epochs=1, verbose=0)\n"
        "fresh = make()\nfresh.evaluate(x, y, verbose=0)\n"
    )
    _ran(shell, cell)
    ns = shell.user_ns
    assert ns["there"] is False  # unbuilt in the child, as in the kernel
    assert not ns["fresh"].optimizer.built  # and here, made there: no slots loaded with it
    assert ns["trained"].optimizer.built and int(ns["trained"].optimizer.iterations) == 1
