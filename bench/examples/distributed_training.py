"""keras.io/guides/distributed_training_with_tensorflow: the setup cell defines the guide's
``get_compiled_model`` and ``get_dataset`` (MNIST flattened, tf.data batches) and its
fault-tolerance helpers; the training cell is the guide's ``run_training``: a
``MirroredStrategy`` made in each call, the model restored from the newest ``.keras`` checkpoint
in ``./ckpt`` (built and compiled on the first run), fit with a ``ModelCheckpoint`` saving each
epoch. Each run so resumes from the file the run before it wrote."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import tensorflow as tf
import keras


def get_compiled_model():
    # Make a simple 2-layer densely-connected neural network.
    inputs = keras.Input(shape=(784,))
    x = keras.layers.Dense(256, activation="relu")(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def get_dataset():
    batch_size = 32
    num_val_samples = 1000

    # keras.datasets.mnist.load_data(): 60,000 and 10,000 images; synthetic, fewer, same dtypes
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, (3000, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, 3000, dtype=np.uint8)
    x_test = rng.integers(0, 256, (500, 28, 28), dtype=np.uint8)
    y_test = rng.integers(0, 10, 500, dtype=np.uint8)

    # Preprocess the data (these are Numpy arrays)
    x_train = x_train.reshape(-1, 784).astype("float32") / 255
    x_test = x_test.reshape(-1, 784).astype("float32") / 255
    y_train = y_train.astype("float32")
    y_test = y_test.astype("float32")

    # Reserve num_val_samples samples for validation
    x_val = x_train[-num_val_samples:]
    y_val = y_train[-num_val_samples:]
    x_train = x_train[:-num_val_samples]
    y_train = y_train[:-num_val_samples]
    return (
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size),
        tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size),
        tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size),
    )


os.chdir(tempfile.mkdtemp())  # the guide's ./ckpt, in a folder of its own
# Prepare a directory to store all the checkpoints.
checkpoint_dir = "./ckpt"
if not os.path.exists(checkpoint_dir):
    os.makedirs(checkpoint_dir)


def make_or_restore_model():
    # Either restore the latest model, or create a fresh one
    # if there is no checkpoint available.
    checkpoints = [checkpoint_dir + "/" + name for name in os.listdir(checkpoint_dir)]
    if checkpoints:
        latest_checkpoint = max(checkpoints, key=os.path.getctime)
        print("Restoring from", latest_checkpoint)
        return keras.models.load_model(latest_checkpoint)
    print("Creating a new model")
    return get_compiled_model()
"""

TRAIN = """\
def run_training(epochs=1):
    # Create a MirroredStrategy.
    strategy = tf.distribute.MirroredStrategy()

    # Open a strategy scope and create/restore the model
    with strategy.scope():
        model = make_or_restore_model()

        callbacks = [
            # This callback saves a SavedModel every epoch
            # We include the current epoch in the folder name.
            keras.callbacks.ModelCheckpoint(
                filepath=checkpoint_dir + "/ckpt-{epoch}.keras",
                save_freq="epoch",
            )
        ]
        model.fit(
            train_dataset,
            epochs=epochs,
            callbacks=callbacks,
            validation_data=val_dataset,
            verbose=2,
        )


# Running the first time creates the model
train_dataset, val_dataset, test_dataset = get_dataset()
run_training(epochs=1)
"""

EXAMPLE = Example(
    name="distributed_training",
    follows="keras.io/guides/distributed_training_with_tensorflow (fault tolerance)",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
