"""keras.io/guides/training_with_built_in_methods: the guide's MNIST model from
``get_compiled_model()``, fit with the callbacks its "Using callbacks", "Checkpointing models" and
"Visualizing loss and metrics during training with TensorBoard" sections add (early stopping on
the validation loss, a ``ModelCheckpoint`` saving ``.keras`` files, ``TensorBoard`` writing event
files), a ``validation_split`` and its ``class_weight`` dict, then ``evaluate``. The logs and
checkpoints go to a temporary folder the setup cell makes (the guide writes them in the current
folder). TensorBoard's callback opens summary writers each run: what a re-run must not keep."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import keras
from keras import layers


def get_uncompiled_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


# The guide loads MNIST and flattens it; synthetic, same shapes and dtypes, fewer samples.
rng = np.random.default_rng(0)
x_train = rng.random((4000, 784), dtype="float32")
y_train = rng.integers(0, 10, 4000).astype("int64")
x_test = rng.random((1000, 784), dtype="float32")
y_test = rng.integers(0, 10, 1000).astype("int64")

class_weight = {i: 1.0 for i in range(10)}
# the guide: "Set weight '2' for class '5', making this class 2x more important"
class_weight[5] = 2.0

# The guide writes to the current folder; a temporary one here.
work_dir = tempfile.mkdtemp(prefix="training_builtin_")
checkpoint_dir = os.path.join(work_dir, "ckpt")
os.makedirs(checkpoint_dir, exist_ok=True)
log_dir = os.path.join(work_dir, "logs")
"""

TRAIN = """\
model = get_compiled_model()
callbacks = [
    keras.callbacks.EarlyStopping(
        # Stop training when `val_loss` is no longer improving
        monitor="val_loss",
        # "no longer improving" being defined as "no better than 1e-2 less"
        min_delta=1e-2,
        # "no longer improving" being further defined as "for at least 2 epochs"
        patience=2,
        verbose=0,
    ),
    keras.callbacks.ModelCheckpoint(
        # Path where to save the model
        filepath=os.path.join(checkpoint_dir, "model_{epoch}.keras"),
        save_best_only=True,  # Only save a model if `val_loss` has improved.
        monitor="val_loss",
        verbose=0,
    ),
    keras.callbacks.TensorBoard(
        log_dir=log_dir,
        histogram_freq=0,  # How often to log histogram visualizations
        embeddings_freq=0,  # How often to log embedding visualizations
        update_freq="epoch",
    ),  # How often to write logs (default: once per epoch)
]
model.fit(
    x_train,
    y_train,
    epochs=3,  # the guide: 20, with early stopping
    batch_size=64,
    validation_split=0.2,
    class_weight=class_weight,
    callbacks=callbacks,
    verbose=0,
)
results = model.evaluate(x_test, y_test, batch_size=128, verbose=0)
"""

EXAMPLE = Example(
    name="training_builtin",
    follows="keras.io/guides/training_with_built_in_methods",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
