"""keras.io/guides/transfer_learning, "An end-to-end example: fine-tuning an image classification
model": the base model and the augmentation layers built once in the setup cell, each run a new
``keras.Model`` on top of them, trained frozen, then fine-tuned with the base unfrozen.

The guide's base is ``Xception(weights="imagenet")`` (nothing may be downloaded here, and its
fine-tuning takes minutes a run on 2 CPUs): a small Functional convnet with batch normalization
stands in for it, at the guide's 150x150."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import tensorflow as tf
import keras
from keras import layers

# The guide loads cats_vs_dogs with tensorflow_datasets and resizes it to 150x150:
# float32 (150, 150, 3) images, int64 labels. Synthetic, same shapes and dtypes, fewer samples.
rng = np.random.default_rng(0)
size = (150, 150)


def images(n):
    x = rng.uniform(0, 255, (n, *size, 3)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, rng.integers(0, 2, n)))


train_ds, validation_ds = images(32), images(16)

batch_size = 32
train_ds = train_ds.batch(batch_size).prefetch(tf.data.AUTOTUNE).cache()
validation_ds = validation_ds.batch(batch_size).prefetch(tf.data.AUTOTUNE).cache()

data_augmentation_layers = [
    layers.RandomFlip("horizontal"),
    layers.RandomRotation(0.1),
]


def data_augmentation(x):
    for layer in data_augmentation_layers:
        x = layer(x)
    return x




def small_convnet(input_shape):
    # stands in for keras.applications.Xception(weights="imagenet", include_top=False)
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for filters in (16, 32, 64):
        x = layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
    return keras.Model(inputs, x, name="base_model")


base_model = small_convnet(input_shape=(*size, 3))  # the guide: Xception(weights="imagenet",
#     input_shape=(150, 150, 3), include_top=False)  # Do not include the ImageNet classifier

# Freeze the base_model
base_model.trainable = False
"""

TRAIN = """\
base_model.trainable = False

# Create new model on top
inputs = keras.Input(shape=(*size, 3))
x = data_augmentation(inputs)  # Apply random data augmentation

# Pre-trained Xception weights requires that input be scaled
# from (0, 255) to a range of (-1., +1.), the rescaling layer
# outputs: `(inputs * scale) + offset`
scale_layer = keras.layers.Rescaling(scale=1 / 127.5, offset=-1)
x = scale_layer(x)

# The base model contains batchnorm layers. We want to keep them in inference mode
# when we unfreeze the base model for fine-tuning, so we make sure that the
# base_model is running in inference mode here.
x = base_model(x, training=False)
x = keras.layers.GlobalAveragePooling2D()(x)
x = keras.layers.Dropout(0.2)(x)  # Regularize with dropout
outputs = keras.layers.Dense(1)(x)
model = keras.Model(inputs, outputs)

model.summary(show_trainable=True)

model.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy()],
)

epochs = 1  # the guide: 2
print("Fitting the top layer of the model")
model.fit(train_ds, epochs=epochs, validation_data=validation_ds)

# Unfreeze the base_model. Note that it keeps running in inference mode
# since we passed `training=False` when calling it. This means that
# the batchnorm layers will not update their batch statistics.
# This prevents the batchnorm layers from undoing all the training
# we've done so far.
base_model.trainable = True
model.summary(show_trainable=True)

model.compile(
    optimizer=keras.optimizers.Adam(1e-5),  # Low learning rate
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy()],
)

epochs = 1  # the guide: 1
print("Fitting the end-to-end model")
model.fit(train_ds, epochs=epochs, validation_data=validation_ds)
"""

EXAMPLE = Example(
    name="transfer_learning",
    follows="keras.io/guides/transfer_learning (end-to-end fine-tuning)",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
