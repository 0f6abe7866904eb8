"""Models kept alive through a layer built in another cell (Keras' node graph): the keras.io text
classification example (a ``TextVectorization`` adapted once, called on each run's ``Input``),
transfer learning (a base model called on each run's inputs) and the GAN (sub-models of the setup
cell inside each run's model). A real shell, real Keras, the cells users copy."""

from __future__ import annotations

import gc
import math
import weakref

import pytest
from helpers import run

import keras_nbguard

TEXT_SETUP = """
import numpy as np, keras, tensorflow as tf
from keras import layers
texts = np.array([f"word{i % 50} other{i % 7} thing{i % 13}" for i in range(128)])
labels = (np.arange(128) % 2).astype("float32")
vectorize_layer = layers.TextVectorization(max_tokens=200, output_mode="int",
                                           output_sequence_length=12)
vectorize_layer.adapt(texts)
before = vectorize_layer(texts[:4]).numpy()
train_ds = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32)
train_ds = train_ds.map(lambda t, y: (vectorize_layer(t), y))
raw_ds = tf.data.Dataset.from_tensor_slices((texts[:, None], labels)).batch(32)
"""
# text_classification_from_scratch: the model, trained on vectorized text, then an end-to-end
# model that calls the adapted layer on a new string Input
TEXT_RUN = """%%kerasrun --label text --quiet FLAGS
inputs = keras.Input(shape=(None,), dtype="int64")
x = layers.Embedding(201, 8)(inputs)
x = layers.GlobalAveragePooling1D()(x)
predictions = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, predictions)
model.compile(loss="binary_crossentropy", optimizer="adam")
model.fit(train_ds, epochs=1, verbose=0)
inputs = keras.Input(shape=(1,), dtype="string")
indices = vectorize_layer(inputs)
outputs = model(indices)
end_to_end_model = keras.Model(inputs, outputs)
end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam")
end_to_end_model.evaluate(raw_ds, verbose=0)
"""
# a new model on the user's layer, after the runs: it must build and train
NEW_MODEL = """
inputs = keras.Input(shape=(1,), dtype="string")
x = layers.Embedding(201, 4)(vectorize_layer(inputs))
fresh = keras.Model(inputs, layers.Dense(1)(layers.GlobalAveragePooling1D()(x)))
fresh.compile("adam", "mse")
loss = fresh.fit(raw_ds, epochs=1, verbose=0).history["loss"][-1]
"""

TRANSFER_SETUP = """
import numpy as np, keras, tensorflow as tf
from keras import layers
images = np.random.default_rng(0).random((64, 16, 16, 3), dtype="float32")
labels = (np.arange(64) % 2).astype("float32")
base_model = keras.Sequential([keras.Input((16, 16, 3)), layers.Conv2D(4, 3),
                               layers.GlobalAveragePooling2D()], name="base")
base_model.trainable = False
setup_nodes = (len(base_model._inbound_nodes), len(base_model._outbound_nodes))
"""
# transfer_learning: the base model, built once, called on each run's inputs with training=False
TRANSFER_RUN = """%%kerasrun --label transfer --quiet
inputs = keras.Input(shape=(16, 16, 3))
x = base_model(inputs, training=False)
x = layers.Dropout(0.2)(x)
head = layers.Dense(1)
outputs = head(x)
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="mse")
model.fit(images, labels, epochs=1, batch_size=32, verbose=0)
"""


pytestmark = pytest.mark.usefixtures("unhurried_walk")  # conftest: under load


def runs_of(shell, cell: str, names: tuple[str, ...], times: int) -> list[list[weakref.ref]]:
    refs = []
    for _ in range(times):
        result = run(shell, cell)
        assert result.success, result.error_in_exec
        refs.append([weakref.ref(shell.user_ns[name]) for name in names])
    return refs


def alive(refs: list[list[weakref.ref]]) -> list[list[bool]]:
    gc.collect()
    return [[ref() is not None for ref in row] for row in refs]


@pytest.mark.slow
def test_text_classification_keeps_only_the_latest_run_and_the_layer_keeps_working(shell):
    assert run(shell, TEXT_SETUP).success
    vectorize = shell.user_ns["vectorize_layer"]
    refs, lengths = [], []
    for _ in range(3):
        refs += runs_of(shell, TEXT_RUN.replace("FLAGS", ""), ("end_to_end_model", "model"), 1)
        lengths.append((len(vectorize._inbound_nodes), len(vectorize._outbound_nodes)))
    assert alive(refs) == [[False, False], [False, False], [True, True]]
    assert lengths == [(1, 1)] * 3  # one node in, one out: the latest run's; no growth
    assert run(shell, "after = vectorize_layer(texts[:4]).numpy()").success
    assert (shell.user_ns["after"] == shell.user_ns["before"]).all()  # it still vectorizes
    assert run(
        shell, "pred = end_to_end_model.predict(tf.constant(texts[:4, None]), verbose=0)"
    ).success
    assert shell.user_ns["pred"].shape == (4, 1)  # the current model still works through it
    result = run(shell, NEW_MODEL)
    assert result.success, result.error_in_exec
    assert math.isfinite(shell.user_ns["loss"])  # it built and trained
    released = keras_nbguard.runs("text")[-1].released_models
    assert released is not None and released.runs == (2,)
    assert any(
        "vectorize_layer — its outbound node into end_to_end_model of #2" in p
        for p in released.paths
    ), released.paths


@pytest.mark.slow
def test_the_leak_finder_names_the_layer_with_a_path_you_can_type(shell):
    assert run(shell, TEXT_SETUP).success
    refs = runs_of(shell, TEXT_RUN.replace("FLAGS", "--keep-stale"), ("model",), 2)
    gc.collect()  # run 1's end-to-end model: garbage once its name was rebound
    report = shell.run_line_magic("nbguard", "leaks")
    stale = [
        leak
        for leak in report.stale
        if leak.class_name == "Functional" and leak.path.startswith("vectorize_layer.")
    ]
    assert len(stale) == 1 and not report.unreachable, report.lines()
    leak = stale[0]
    assert leak.path == "vectorize_layer._outbound_nodes[0].operation"
    assert leak.held_as == "vectorize_layer — its outbound node into end_to_end_model of #1"
    assert shell.ev(leak.path) is refs[0][0]()  # typed as shown, it is the stale model
    text = "\n".join(report.lines())
    assert "<?>" not in text and "vectorize_layer — its outbound node" in text
    # free() cuts the node: the model goes, the layer stays and works
    freed = shell.run_line_magic("nbguard", "free")
    assert alive(refs)[0] == [False]
    assert any(
        line.startswith("cut ") and "from vectorize_layer" in line for line in freed.released
    ), freed.lines()
    assert freed.rss_before is not None and freed.rss_after is not None
    assert len(shell.user_ns["vectorize_layer"]._outbound_nodes) == 1
    assert run(shell, NEW_MODEL).success


@pytest.mark.slow
def test_free_with_containers_cuts_keras_nodes_and_empties_none(shell):
    """A node in a layer's list is Keras' record, no container of yours: ``--containers`` set
    ``vectorize_layer._outbound_nodes[0].operation = None`` before the node was cut."""
    assert run(shell, TEXT_SETUP).success
    refs = runs_of(shell, TEXT_RUN.replace("FLAGS", "--keep-stale"), ("model",), 2)
    gc.collect()
    freed = shell.run_line_magic("nbguard", "free --containers")
    assert alive(refs)[0] == [False]
    assert not [line for line in freed.released if line.endswith("= None")], freed.lines()
    assert any(line.startswith("cut ") for line in freed.released), freed.lines()
    assert run(shell, NEW_MODEL).success


# the same cell run as a plain cell: before %load_ext, or between runs under the magic
TEXT_PLAIN = TEXT_RUN.split("\n", 1)[1]
OUTSIDE_WORDS = "vectorize_layer — its outbound node (made outside a tracked run)"


@pytest.mark.slow
def test_models_plain_cells_left_on_your_layer_are_stale_and_free_lets_them_go(shell):
    assert run(shell, TEXT_SETUP).success
    vectorize = shell.user_ns["vectorize_layer"]
    refs = runs_of(shell, TEXT_PLAIN, ("model",), 3)
    gc.collect()
    report = shell.run_line_magic("nbguard", "leaks")
    stale = [leak for leak in report.stale if leak.path.startswith("vectorize_layer.")]
    assert [leak.held_as for leak in stale] == [OUTSIDE_WORDS] * 2, report.lines()
    assert [shell.ev(leak.path) for leak in stale] == [refs[0][0](), refs[1][0]()]
    assert not [leak for leak in report.current if leak.path.startswith("vectorize_layer.")]
    assert all(not leak.stale for leak in report.leaks if "model" in leak.paths), report.lines()
    freed = shell.run_line_magic("nbguard", "free")
    assert alive(refs) == [[False], [False], [True]]
    assert any(
        "of cells run without %%kerasrun from vectorize_layer" in line for line in freed.released
    ), freed.lines()
    assert len(vectorize._outbound_nodes) == 1  # the current model's call
    assert run(shell, "after = vectorize_layer(texts[:4]).numpy()").success
    assert (shell.user_ns["after"] == shell.user_ns["before"]).all()
    result = run(shell, NEW_MODEL)
    assert result.success, result.error_in_exec


@pytest.mark.slow
def test_a_run_releases_the_models_plain_cells_left_on_your_layer(shell):
    assert run(shell, TEXT_SETUP).success
    plain = runs_of(shell, TEXT_PLAIN, ("model",), 2)
    ours = runs_of(shell, TEXT_RUN.replace("FLAGS", ""), ("model",), 2)
    assert alive(plain + ours) == [[False], [False], [False], [True]]
    released = keras_nbguard.runs("text")[-1].released_models
    assert released is not None and (released.count, released.outside) == (3, 2), released
    assert released.runs == (1,) and OUTSIDE_WORDS in released.paths, released
    text = keras_nbguard.runs("text")[-1].summary_text()
    assert "3 models: 1 from #1, 2 built without %%kerasrun held by" in text, text
    assert len(shell.user_ns["vectorize_layer"]._outbound_nodes) == 1
    result = run(shell, NEW_MODEL)
    assert result.success, result.error_in_exec


@pytest.mark.slow
def test_transfer_learning_lets_each_runs_head_go_and_the_base_model_keeps_working(shell):
    assert run(shell, TRANSFER_SETUP).success
    base = shell.user_ns["base_model"]
    refs = runs_of(shell, TRANSFER_RUN, ("model", "head"), 4)
    assert alive(refs) == [[False, False]] * 3 + [[True, True]]
    setup_in, setup_out = shell.user_ns["setup_nodes"]
    # the latest run's call only (a run before it may still be waiting for the next gc)
    assert len(base._inbound_nodes) <= setup_in + 2 and len(base._outbound_nodes) <= setup_out + 2
    assert run(shell, "pred = model.predict(images[:2], verbose=0)").success
    new = (
        "inputs = keras.Input(shape=(16, 16, 3))\nm2 = keras.Model(inputs, "
        "layers.Dense(1)(base_model(inputs, training=False)))\nm2.compile('adam', 'mse')\n"
        "loss = m2.fit(images, labels, epochs=1, verbose=0).history['loss'][-1]"
    )
    assert run(shell, new).success


GAN_SETUP = """
import numpy as np, keras, tensorflow as tf
from keras import layers
latent_dim = 8
discriminator = keras.Sequential([keras.Input((16,)), layers.Dense(64), layers.Dense(1)],
                                 name="discriminator")
generator = keras.Sequential([keras.Input((latent_dim,)), layers.Dense(64), layers.Dense(16)],
                             name="generator")
dataset = tf.data.Dataset.from_tensor_slices(
    np.random.default_rng(0).random((64, 16), dtype="float32")).batch(32)

class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator, self.generator, self.latent_dim = discriminator, generator, latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    def train_step(self, real):
        batch = tf.shape(real)[0]
        noise = keras.random.normal((batch, self.latent_dim), seed=self.seed_generator)
        fake = self.generator(noise)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(tf.zeros((batch, 1)), self.discriminator(fake)) + (
                self.loss_fn(tf.ones((batch, 1)), self.discriminator(real)))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        return {"d_loss": d_loss}
"""
GAN_RUN = """%%kerasrun --label gan --quiet
gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
gan.compile(d_optimizer=keras.optimizers.Adam(), g_optimizer=keras.optimizers.Adam(),
            loss_fn=keras.losses.BinaryCrossentropy(from_logits=True))
gan.fit(dataset, epochs=1, verbose=0)
"""


@pytest.mark.slow
def test_the_released_weights_leave_out_what_the_setup_cells_models_still_hold(shell):
    assert run(shell, GAN_SETUP).success
    refs = runs_of(shell, GAN_RUN, ("gan",), 3)
    assert alive(refs) == [[False], [False], [True]]
    released = keras_nbguard.runs("gan")[-1].released_models
    assert released is not None and released.count == 1
    # the GAN's weights are all generator's and discriminator's, which the setup cell holds
    assert released.weight_bytes == 0, released
    assert all("<?>" not in p for p in released.paths)
    # its two Adams, made anew each run, went with it: their state is said ("0 B weights" alone
    # read as if nothing was freed); the current GAN's are the same size
    gan = shell.user_ns["gan"]
    state = sum(v.numpy().nbytes for o in (gan.d_optimizer, gan.g_optimizer) for v in o.variables)
    assert state > 0 and released.optimizer_bytes >= state, (released, state)


ENCODER_SETUP = """
import numpy as np, keras
encoder = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu")])
x = np.random.random((64, 16)).astype("float32"); y = np.random.randint(0, 3, 64)
"""
HEAD_ON_ENCODER = """%%kerasrun --label head --quiet
classifier = keras.Sequential([keras.layers.Dense(3, activation="softmax")])
inputs = keras.Input((16,))
model = keras.Model(inputs, classifier(encoder(inputs)))
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x, y, epochs=1, verbose=0)
"""


@pytest.mark.slow
def test_a_head_built_on_a_setup_cells_model_goes_with_its_run(shell):
    """A setup cell's ``encoder`` is a model: a run's ``classifier`` held only through the
    encoder's node list was "still alive" in every run's summary (the walk took the encoder for
    a model holding it as a part) and never said released. Its node is cut, the encoder kept."""
    assert run(shell, ENCODER_SETUP).success
    refs = runs_of(shell, HEAD_ON_ENCODER, ("classifier", "model"), 3)
    assert alive(refs) == [[False, False], [False, False], [True, True]]
    record = keras_nbguard.runs("head")[-1]
    assert record.stale_models is None
    released = record.released_models
    assert released is not None and released.runs == (2,) and released.count == 2
    assert "encoder — its outbound node into model of #2" in released.paths, released.paths
    assert len(shell.user_ns["encoder"]._outbound_nodes) == 1  # the latest run's call
    assert run(shell, "loss = model.evaluate(x, y, verbose=0)").success  # still works


# The same cell making its encoder once and reusing it on re-runs, as notebooks cache their
# costly parts
ENCODER_ONCE = HEAD_ON_ENCODER.replace("--label head", "--label once").replace(
    "classifier = ",
    'if "encoder" not in globals():\n'
    '    encoder = keras.Sequential([keras.layers.Dense(8, activation="relu")])\n'
    "classifier = ",
)


@pytest.mark.slow
def test_a_layer_the_cell_made_on_its_first_run_and_reuses_is_neither_renamed_nor_stale(shell):
    """Run 1 makes ``encoder``; run 2 reuses it beside a new ``classifier``, which took its
    name ("The name "sequential" is used 2 times in the model": the cell ran bare, failed under
    the magic), and the encoder, part of every run's model, was called stale with
    ``%nbguard free`` as the cure. The new layers skip the names the reused ones have, the
    same names each run; the encoder is the latest run's; the last run's classifier goes, and is
    said released."""
    assert run(shell, ENCODER_SETUP.replace("encoder = ", "_unused = ")).success
    names = []
    refs = []
    for _ in range(3):
        result = run(shell, ENCODER_ONCE)
        assert result.success, result.error_in_exec
        layers = shell.user_ns["model"].layers  # (inputs count on, as in plain cells)
        names.append([layer.name for layer in layers if not layer.name.startswith("input")])
        refs.append([weakref.ref(shell.user_ns["classifier"])])
    assert names[0] == names[1] == names[2] and len(set(names[0])) == len(names[0]), names
    assert alive(refs) == [[False], [False], [True]]
    record = keras_nbguard.runs("once")[-1]
    assert record.stale_models is None, record.stale_models
    released = record.released_models
    assert released is not None and released.runs == (2,), released
    assert "encoder — its outbound node into model of #2" in released.paths, released.paths
    report = keras_nbguard.leaks()
    assert not report.stale, report
