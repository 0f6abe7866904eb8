"""tensorflow.org/datasets/keras_example ("Training a neural network on MNIST with Keras", the
tf.data pipeline keras.io's examples build too): ``map(num_parallel_calls=AUTOTUNE)``,
``cache()``, ``shuffle``, ``batch``, ``prefetch(AUTOTUNE)`` in the setup cell; a Sequential model
built and fit on the pipelines in the training cell."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import tensorflow as tf
import keras

# The example loads 'mnist' with tensorflow_datasets (as_supervised: uint8 (28, 28, 1) images,
# int64 labels; 60000 + 10000). Synthetic, same shapes and dtypes, fewer samples.
rng = np.random.default_rng(0)
ds_train = tf.data.Dataset.from_tensor_slices(
    (rng.integers(0, 256, (1024, 28, 28, 1), dtype="uint8"), rng.integers(0, 10, 1024))
)
ds_test = tf.data.Dataset.from_tensor_slices(
    (rng.integers(0, 256, (512, 28, 28, 1), dtype="uint8"), rng.integers(0, 10, 512))
)
num_train_examples = 1024


def normalize_img(image, label):
    \"\"\"Normalizes images: `uint8` -> `float32`.\"\"\"
    return tf.cast(image, tf.float32) / 255.0, label


# Build a training pipeline
ds_train = ds_train.map(normalize_img, num_parallel_calls=tf.data.AUTOTUNE)
ds_train = ds_train.cache()
ds_train = ds_train.shuffle(num_train_examples)
ds_train = ds_train.batch(128)
ds_train = ds_train.prefetch(tf.data.AUTOTUNE)

# Build an evaluation pipeline
ds_test = ds_test.map(normalize_img, num_parallel_calls=tf.data.AUTOTUNE)
ds_test = ds_test.batch(128)
ds_test = ds_test.cache()
ds_test = ds_test.prefetch(tf.data.AUTOTUNE)
"""

TRAIN = """\
model = keras.models.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(0.001),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)

model.fit(
    ds_train,
    epochs=2,  # the example: 6
    validation_data=ds_test,
)
"""

EXAMPLE = Example(
    name="tf_data_pipeline",
    follows="tensorflow.org/datasets/keras_example (map/cache/shuffle/batch/prefetch)",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
