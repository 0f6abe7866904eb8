"""What an isolated run brings back into the kernel (isolation/back.py ``received``), with real
Keras models saved in the Keras format as the child sends them: the names' earlier values go
before the new ones load, a name whose new value fails to load keeps what something else kept,
and TensorFlow's kernel cache does not keep every load's variable kernels."""

from __future__ import annotations

import ctypes
import gc
import itertools
import statistics
import types
import weakref

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

from helpers import alive_at_each_load  # noqa: E402

from keras_nbguard.isolation import back, unloadable  # noqa: E402
from keras_nbguard.isolation.parent import ChildResult  # noqa: E402


def _saved(model, tmp_path) -> bytes:
    path = tmp_path / "model.keras"
    model.save(path)
    return path.read_bytes()


def _deep_model():
    """Thirty layers: sixty variables, each a variable-handle kernel in TensorFlow's cache."""
    model = keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(4) for _ in range(30)])
    model.compile("adam", "mse")
    model.fit(np.ones((8, 4)), np.ones((8, 4)), verbose=0)
    return model


def _came_back(data: bytes, **pickled: bytes) -> ChildResult:
    outputs = {"model": ("keras", "keras", data)}
    outputs.update({name: ("pickle", value) for name, value in pickled.items()})
    return ChildResult(result={"outputs": outputs, "success": True})


def test_the_names_earlier_model_is_gone_before_the_new_one_loads(tmp_path, monkeypatch):
    """A model loaded while the last run's copy lived needed room for both, and TensorFlow's
    CPU pool kept the larger footprint: Keras' text example grew 3 MiB a run in the kernel."""
    data = _saved(_deep_model(), tmp_path)
    namespace = {"model": back._load_model("keras", data), "other": 1}
    earlier = weakref.ref(namespace["model"])
    alive_at_load = alive_at_each_load(monkeypatch, earlier)
    bound = back.received(_came_back(data), namespace=namespace)
    assert alive_at_load == [False]
    assert bound["model"] is not None and "model" not in namespace  # bound by settle, later
    assert namespace["other"] == 1  # a name that did not come back stays


def _run():
    """What ``received`` reads and writes on the run: its label (the names of the layers that
    came back are its), how much came back, what did not, the watch that sees the nodes the
    loads make."""
    from keras_nbguard.models import CreationWatch

    return types.SimpleNamespace(
        label="back", not_sent=None, back=None, returned=(), creations=CreationWatch()
    )


def test_a_name_whose_new_value_fails_to_load_is_said_so_with_what_became_of_it(tmp_path):
    class Scores(dict):  # a weak reference follows it: let go, and nothing else kept it
        pass

    held = [1, 2]  # a list: no weak reference follows it, so it stays bound as before
    namespace = {"scores": Scores(a=1), "history": held}
    run = _run()
    broken = b"not a pickle"
    bound = back.received(
        _came_back(_saved(_deep_model(), tmp_path), scores=broken, history=broken),
        run,
        namespace=namespace,
    )
    assert bound["model"].predict(np.ones((1, 4)), verbose=0).shape == (1, 4)
    assert "scores" not in bound and "history" not in bound
    assert "scores" not in namespace
    assert run.not_sent["scores"].endswith("let go to make room: unbound now")
    assert namespace["history"] is held
    assert run.not_sent["history"].startswith("could not be unpickled here")
    assert "before the run" not in run.not_sent["history"]


def test_a_failed_load_gives_the_name_back_its_value_where_it_lived_on(tmp_path):
    mine = back._load_model("keras", _saved(_deep_model(), tmp_path))
    namespace = {"model": mine}
    run = _run()
    done = ChildResult(result={"outputs": {"model": ("keras", "keras", b"not a zip")}})
    back.received(done, run, namespace=namespace)
    assert namespace["model"] is mine  # the caller's own reference kept it alive
    assert run.not_sent["model"].startswith("a Keras model that could not be loaded here")
    assert run.not_sent["model"].endswith("the name keeps its value from before the run")


_MALLINFO2 = (
    *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
    *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
)


class _MallInfo2(ctypes.Structure):  # all ten: it is returned by value
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _heap_in_use() -> int:
    """glibc's heap in use: what malloc handed out and was not freed."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().uordblks)


def _heap_per_load(load) -> float:
    held = None
    heap = []
    gc.collect()
    gc.freeze()  # what is here already stays: each collection scans only the loads' objects
    try:
        for _ in range(10):
            held = None
            gc.collect()
            held = load()
            gc.collect()
            heap.append(_heap_in_use())
    finally:
        gc.unfreeze()
    assert held is not None
    return statistics.median(b - a for a, b in itertools.pairwise(heap[2:]))


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc's mallinfo2")
def test_loading_the_same_model_run_after_run_keeps_no_kernels(tmp_path):
    """Each load made sixty variable-handle kernels TensorFlow cached for good (~70 KiB a load
    of this model, +0.48 MiB of the text example's two); the kernel cache is emptied after a
    run's loads, as Keras' clear_session does (~7 KiB a load left)."""
    data = _saved(_deep_model(), tmp_path)
    kept = _heap_per_load(lambda: back._load_model("keras", data))
    through_received = _heap_per_load(lambda: back.received(_came_back(data))["model"])
    assert kept > 30 * 2**10, "TensorFlow no longer caches them: clear_kernel_cache can go"
    assert through_received < kept / 3, (through_received, kept)


def test_a_model_whose_place_in_another_holds_something_else_stays_a_copy_and_is_said_so(
    tmp_path,
):
    """The child says ``model`` lies in ``outer`` under ``dense_9``; in the file that came back
    that place holds a layer of another kind: the name keeps its own loaded model, and the
    run's ``isolated`` line says it is a copy, and why."""
    inputs = keras.Input((4,))
    outer = keras.Model(inputs, keras.layers.Dense(2, name="dense_9")(inputs))
    model = _deep_model()
    outputs = {
        "outer": ("keras", "keras", _saved(outer, tmp_path)),
        "model": ("keras", "keras", _saved(model, tmp_path), {"inside": ("outer", ("dense_9",))}),
    }
    run = _run()
    bound = back.received(ChildResult(result={"outputs": outputs, "success": True}), run)
    assert bound["model"].predict(np.ones((1, 4)), verbose=0).shape == (1, 4)
    assert int(bound["model"].optimizer.iterations.numpy()) == 1  # its own file's state
    assert run.back.kept_apart == {
        "model": "a copy of outer's layer, not that layer: its place there holds another layer"
    }
    assert "back 2 models" in run.back.words("back")
    assert "(model: a copy of outer's layer" in run.back.words("back")


VIT_LAYERS = """
import keras

class Patches(keras.layers.Layer):  # keras.io's ViT example: an __init__ without **kwargs
    def __init__(self, patch_size):
        super().__init__()
        self.patch_size = patch_size

    def call(self, images):
        return images * 1.0

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size})
        return config

class PatchEncoder(keras.layers.Layer):  # and a get_config without projection_dim
    def __init__(self, num_patches, projection_dim):
        super().__init__()
        self.num_patches = num_patches
        self.projection = keras.layers.Dense(units=projection_dim)

    def call(self, patch):
        return self.projection(patch)

    def get_config(self):
        config = super().get_config()
        config.update({"num_patches": self.num_patches})
        return config

inputs = keras.Input((4, 3))
vit = keras.Model(inputs, PatchEncoder(4, 8)(Patches(2)(inputs)))
"""


def test_a_model_keras_cannot_rebuild_is_said_in_a_line_with_the_fix(shell, tmp_path):
    """keras.io's ViT example, isolated: Keras' error held 4 KB of nested configs; the row says
    which of the notebook's classes Keras can't rebuild, why, and what to change."""
    assert shell.run_cell(VIT_LAYERS).success
    data = _saved(shell.user_ns.pop("vit"), tmp_path)
    run = _run()
    outputs = {"vit": ("keras", "keras", data)}
    namespace: dict = {}  # the cell bound the name first
    done = ChildResult(result={"outputs": outputs, "success": True})
    assert "vit" not in back.received(done, run, namespace=namespace)
    said = run.not_sent["vit"]
    assert said.startswith(
        "a Keras model that could not be loaded here: Keras can't rebuild your classes from "
        "the file: Patches, PatchEncoder: __init__ takes no name, trainable, dtype: give it "
        "**kwargs, passed on to super().__init__(**kwargs); PatchEncoder: get_config() leaves "
        "out projection_dim, which __init__ needs (keras.models.load_model fails on it the "
        "same way)"
    ), said
    assert said.endswith("; the name is not defined here") and "vit" not in namespace
    assert "config=" not in said and len(said) < 500


ENDPOINT_LAYERS = """
import keras, numpy as np

class LogisticEndpoint(keras.layers.Layer):  # keras.io's endpoint layer pattern, as it stands
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    def call(self, logits, targets=None):
        if targets is not None:
            self.add_loss(self.loss_fn(targets, logits))
        return keras.ops.sigmoid(logits)

class Scale(keras.layers.Layer):  # a config of its own, and no **kwargs either
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}

class Classifier(keras.Model):  # its own __init__ freezes a part: it must stay frozen
    def __init__(self):
        super().__init__()
        self.base = keras.layers.Dense(4)
        self.base.trainable = False
        self.head = keras.layers.Dense(1)

    def call(self, x):
        return self.head(self.base(x))

inputs, targets = keras.Input((6,), name="inputs"), keras.Input((1,), name="targets")
logits = keras.layers.Dense(1)(Scale(2.0)(inputs))
endpoint = keras.Model([inputs, targets], LogisticEndpoint(name="end")(logits, targets))
endpoint.layers[1].trainable = False  # the Scale: its saved flag must come back with it
endpoint.layers[1].dtype_policy = "float64"  # and its policy
endpoint.compile(keras.optimizers.Adam(1e-3))
rng = np.random.default_rng(0)
endpoint.fit({"inputs": rng.random((32, 6)), "targets": rng.random((32, 1))}, verbose=0)
classifier = Classifier()
classifier.compile("adam", "mse")
classifier.fit(rng.random((32, 6)), rng.random((32, 1)), verbose=0)
"""


def test_a_model_of_classes_without_kwargs_comes_back_rebuilt_and_said(shell, tmp_path):
    """keras.io's endpoint layer pattern, isolated: its ``__init__(self, name=None)`` takes no
    ``trainable`` or ``dtype``, so Keras saves the model and can't load it (the user's
    ``load_model`` neither), and the model the cell trained stayed in the child. Rebuilt here
    from the arguments those classes take, the rest set after as their base ``__init__`` would
    (a part the class froze stays frozen); the notebook's classes are left as they were, and
    the line says what was done."""
    assert shell.run_cell(ENDPOINT_LAYERS).success
    trained = {name: shell.user_ns.pop(name) for name in ("endpoint", "classifier")}
    outputs = {}
    for name, model in trained.items():
        outputs[name] = ("keras", "keras", _saved(model, tmp_path))
        classes = {c: shell.user_ns[c] for c in ("LogisticEndpoint", "Scale", "Classifier")}
        with pytest.raises(TypeError, match="unexpected keyword argument"):  # Keras' own load
            keras.saving.load_model(tmp_path / "model.keras", classes, safe_mode=False)
    run = _run()
    done = ChildResult(result={"outputs": outputs, "success": True})
    bound = back.received(done, run, namespace={})
    model, classifier = bound["endpoint"], bound["classifier"]
    before = trained["endpoint"]
    assert type(model.layers[-1]).__name__ == "LogisticEndpoint"
    assert [layer.name for layer in model.layers] == [layer.name for layer in before.layers]
    assert [layer.trainable for layer in model.layers] == [
        layer.trainable for layer in before.layers
    ]
    assert model.layers[1].factor == 2.0 and model.layers[1].dtype_policy.name == "float64"
    for came, went in ((model, before), (classifier, trained["classifier"])):
        for mine, theirs in zip(came.get_weights(), went.get_weights(), strict=True):
            np.testing.assert_array_equal(mine, theirs)
        assert int(came.optimizer.iterations) == int(went.optimizer.iterations) == 1
    assert classifier.trainable and not classifier.base.trainable and classifier.head.trainable
    assert run.back.rebuilt == {
        "endpoint": ["LogisticEndpoint", "Scale"],
        "classifier": ["Classifier"],
    }
    assert "rebuilt without **kwargs: LogisticEndpoint, Scale in endpoint; Classifier in" in (
        run.back.words("back")
    )
    for cls in classes.values():
        assert "from_config" not in vars(cls)  # Keras' own again, outside the load
    # where a class also lacks an argument its __init__ needs, nothing is guessed (ViT above)
    assert shell.run_cell(VIT_LAYERS).success
    vit = _saved(shell.user_ns.pop("vit"), tmp_path)
    assert unloadable.refusing_only_base_keys(vit, dict(shell.user_ns)) == []


def test_a_load_error_of_another_kind_is_cut_to_its_innermost_cause():
    nested = (
        "<class 'Functional'> could not be deserialized properly.\nconfig={'a': 1}\n\n"
        "Exception encountered: Error when deserializing class 'Head' using config={'b': 2}."
        "\n\nException encountered: Head.__init__() got an unexpected keyword argument 'x')"
    )
    assert unloadable.innermost_cause(nested) == (
        "Head.__init__() got an unexpected keyword argument 'x'"
    )
    assert unloadable.innermost_cause("x" * 1000).endswith("…")
    assert len(unloadable.innermost_cause("x" * 1000)) == unloadable.LONGEST
