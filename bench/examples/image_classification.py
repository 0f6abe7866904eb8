"""keras.io/examples/vision/image_classification_from_scratch: data augmentation layers
(``RandomFlip``, ``RandomRotation``, each with its own seed state) applied in the tf.data pipeline
built in the setup cell, with ``make_model`` (an Xception-like network: ``Rescaling``,
``SeparableConv2D``, ``BatchNormalization``, residuals); in the training cell the model built,
compiled and fit with a ``ModelCheckpoint`` callback saving every epoch."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import keras
from keras import layers
from tensorflow import data as tf_data

image_size = (180, 180)
batch_size = 128

# The example reads the Cats vs Dogs images with keras.utils.image_dataset_from_directory
# (batches of float32 180x180x3 images, 0..255, and int32 labels). Synthetic, same shapes and
# dtypes, a few images, smaller batches (on CPU).
batch_size = 16
rng = np.random.default_rng(1337)
images = rng.integers(0, 256, (24,) + image_size + (3,)).astype("float32")
labels = rng.integers(0, 2, 24).astype("int32")
train_ds = tf_data.Dataset.from_tensor_slices((images[:16], labels[:16])).batch(batch_size)
val_ds = tf_data.Dataset.from_tensor_slices((images[16:], labels[16:])).batch(batch_size)

data_augmentation_layers = [
    layers.RandomFlip("horizontal"),
    layers.RandomRotation(0.1),
]


def data_augmentation(images):
    for layer in data_augmentation_layers:
        images = layer(images)
    return images


# Apply `data_augmentation` to the training images.
train_ds = train_ds.map(
    lambda img, label: (data_augmentation(img), label),
    num_parallel_calls=tf_data.AUTOTUNE,
)
# Prefetching samples in GPU memory helps maximize GPU utilization.
train_ds = train_ds.prefetch(tf_data.AUTOTUNE)
val_ds = val_ds.prefetch(tf_data.AUTOTUNE)


def make_model(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)

    # Entry block
    x = layers.Rescaling(1.0 / 255)(inputs)
    x = layers.Conv2D(128, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    previous_block_activation = x  # Set aside residual

    for size in [256, 512, 728]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)

        # Project residual
        residual = layers.Conv2D(size, 1, strides=2, padding="same")(
            previous_block_activation
        )
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    x = layers.SeparableConv2D(1024, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    x = layers.GlobalAveragePooling2D()(x)
    if num_classes == 2:
        units = 1
    else:
        units = num_classes

    x = layers.Dropout(0.25)(x)
    # We specify activation=None so as to return logits
    outputs = layers.Dense(units, activation=None)(x)
    return keras.Model(inputs, outputs)


os.chdir(tempfile.mkdtemp())  # where ModelCheckpoint writes (the example: the working folder)
"""

TRAIN = """\
model = make_model(input_shape=image_size + (3,), num_classes=2)

epochs = 1  # the example: 25

callbacks = [
    keras.callbacks.ModelCheckpoint("save_at_{epoch}.keras"),
]
model.compile(
    optimizer=keras.optimizers.Adam(3e-4),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy(name="acc")],
)
model.fit(
    train_ds,
    epochs=epochs,
    callbacks=callbacks,
    validation_data=val_ds,
)
"""

EXAMPLE = Example(
    name="image_classification",
    follows="keras.io/examples/vision/image_classification_from_scratch",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    short=(  # a quarter of the pixels, one residual block of the three
        ("image_size = (180, 180)", "image_size = (90, 90)"),
        ("for size in [256, 512, 728]:", "for size in [256]:"),
    ),
)
