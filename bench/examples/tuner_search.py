"""keras.io/guides/keras_tuner/getting_started: the guide's ``build_model(hp)`` (a Sequential
MLP whose layer count, widths, activation, dropout and learning rate are hyperparameters) in the
setup cell; the training cell makes a ``RandomSearch`` with ``overwrite=True``, searches, and
takes the two best models (``best_model = models[0]``), as a user re-runs a search. Each run
builds a model per trial, then rebuilds the best ones and loads their checkpoints: bare, the
kernel grew +35 MiB a run and a search took 5.5 s at run 1, 10 s at run 14.

One change from the guide: ``seed=1``. Unseeded, every run draws other architectures (1-3
layers of 32-512 units), and what the kernel holds after a run (the two best models, their
functions) moved by several MiB from one run to the next: under the magic the heap in use went
+0.7 to +4.9 MiB a run over runs 4-12 from one try to the next, +0.03 seeded, so an unseeded
slope measures the draw, not what runs leave (docs/benchmarks.md)."""

from __future__ import annotations

from . import Example

SETUP = """\
import tempfile
import numpy as np
import keras
from keras import layers
import keras_tuner

# The guide loads MNIST (28x28 digits, one-hot labels); synthetic, same shapes and dtypes,
# 2,000 of them, 400 held out for validation.
rng = np.random.default_rng(0)
x_train = rng.random((2000, 28, 28), dtype="float32")
y_train = keras.utils.to_categorical(rng.integers(0, 10, 2000), 10)
x_val, y_val = x_train[:400], y_train[:400]
tuner_dir = tempfile.mkdtemp()  # the guide's "my_dir"


def build_model(hp):
    model = keras.Sequential()
    model.add(layers.Flatten())
    # Tune the number of layers.
    for i in range(hp.Int("num_layers", 1, 3)):
        model.add(
            layers.Dense(
                # Tune number of units separately.
                units=hp.Int(f"units_{i}", min_value=32, max_value=512, step=32),
                activation=hp.Choice("activation", ["relu", "tanh"]),
            )
        )
    if hp.Boolean("dropout"):
        model.add(layers.Dropout(rate=0.25))
    model.add(layers.Dense(10, activation="softmax"))
    learning_rate = hp.Float("lr", min_value=1e-4, max_value=1e-2, sampling="log")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
"""

TRAIN = """\
tuner = keras_tuner.RandomSearch(
    hypermodel=build_model,
    objective="val_accuracy",
    max_trials=3,
    executions_per_trial=1,
    seed=1,  # not in the guide: every run draws the same architectures (see above)
    overwrite=True,
    directory=tuner_dir,
    project_name="helloworld",
)
tuner.search(x_train, y_train, epochs=2, validation_data=(x_val, y_val), verbose=0)
# Get the top 2 models.
models = tuner.get_best_models(num_models=2)
best_model = models[0]
best_model.summary()
"""

EXAMPLE = Example(
    name="tuner_search",
    follows="https://keras.io/guides/keras_tuner/getting_started/",
    setup=SETUP,
    train=TRAIN,
    short=(  # two trials on fewer digits: a search, built and fit more than once
        ("max_trials=3", "max_trials=2"),
        ("(2000, 28, 28)", "(500, 28, 28)"),
        ("integers(0, 10, 2000)", "integers(0, 10, 500)"),
        ("x_train[:400], y_train[:400]", "x_train[:100], y_train[:100]"),
    ),
)
