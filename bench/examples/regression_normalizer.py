"""tensorflow.org/tutorials/keras/regression: a ``Normalization`` layer adapted once in a setup
cell, then placed in every re-run's ``Sequential`` as its first layer (the same layer object in
each run's model), the tutorial's ``build_and_compile_model`` and ``fit`` with
``validation_split``, then ``evaluate``."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras
from keras import layers

# The tutorial reads the Auto MPG dataset: 392 cars, 9 numeric features, MPG to predict.
# Synthetic, the same shapes and dtypes.
rng = np.random.default_rng(0)
mean = [5.5, 195, 104, 2990, 15.5, 76, 0.2, 0.2, 0.6]
std = [1.7, 105, 38, 850, 2.8, 3.7, 0.4, 0.4, 0.5]
train_features = rng.normal(mean, std, (314, 9)).astype("float32")
train_labels = (46 - train_features[:, 3] / 150 + rng.normal(0, 3, 314)).astype("float32")
test_features = train_features[:78] + rng.normal(0, 0.1, (78, 9)).astype("float32")
test_labels = train_labels[:78]

normalizer = layers.Normalization(axis=-1)
normalizer.adapt(np.array(train_features))
print(normalizer.mean.numpy())


def build_and_compile_model(norm):
    model = keras.Sequential([
        norm,
        layers.Dense(64, activation="relu"),
        layers.Dense(64, activation="relu"),
        layers.Dense(1)
    ])

    model.compile(loss="mean_absolute_error", optimizer=keras.optimizers.Adam(0.001))
    return model
"""

TRAIN = """\
dnn_model = build_and_compile_model(normalizer)
dnn_model.summary()

history = dnn_model.fit(
    train_features,
    train_labels,
    validation_split=0.2,
    verbose=0, epochs=20)  # the tutorial: 100

test_results = {}
test_results["dnn_model"] = dnn_model.evaluate(test_features, test_labels, verbose=0)
test_results
"""

EXAMPLE = Example(
    name="regression_normalizer",
    follows="tensorflow.org/tutorials/keras/regression",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    short=(("epochs=20", "epochs=2"),),
)
