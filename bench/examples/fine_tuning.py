"""keras.io/examples/vision/image_classification_efficientnet_fine_tuning: the setup cell builds
the model on a frozen pretrained base and trains its new top (the example's first ``fit``); the
re-run cell is its second step, ``unfreeze_model(model)`` (the top 20 layers trainable, compiled
again with a lower learning rate) and ``fit``, as a user re-runs a fine-tuning cell. The model
lives on across runs, compiled again in each.

Each compile drops the step functions the last fit traced, and TensorFlow's gradient registry
kept their graphs for as long as the model lived: bare and under the magic alike, +33 MiB a run.
The deep clean now lets them go once the model no longer has those functions. On Keras 2 the
model itself kept them too (tf_keras' compile resets them untracked: +43.8 MiB a run, bare and
under the magic), until the deep clean dropped them (``keras_nbguard/prepare/recompiled.py``).

Two changes from the example: ``weights=None`` (nothing is downloaded) and MobileNetV2
(``alpha=0.35``) for EfficientNetB0, the same pattern in a quarter of the time (EfficientNetB0
at 64x64: 16 s a run here). Data: synthetic images of the example's dtype, 64x64 (224 there)."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import tensorflow as tf
import keras
from keras import layers

IMG_SIZE = 64  # the example: 224
NUM_CLASSES = 5  # the example: 120 (Stanford Dogs)
batch_size = 32
rng = np.random.default_rng(0)
images = rng.random((160, IMG_SIZE, IMG_SIZE, 3), dtype="float32") * 255
labels = keras.utils.to_categorical(rng.integers(0, NUM_CLASSES, 160), NUM_CLASSES)
ds_train = tf.data.Dataset.from_tensor_slices((images[:128], labels[:128])).batch(batch_size)
ds_test = tf.data.Dataset.from_tensor_slices((images[128:], labels[128:])).batch(batch_size)


def build_model(num_classes):
    inputs = layers.Input(shape=(IMG_SIZE, IMG_SIZE, 3))
    # the example: EfficientNetB0(include_top=False, input_tensor=inputs, weights="imagenet")
    model = keras.applications.MobileNetV2(
        include_top=False, input_tensor=inputs, weights=None, alpha=0.35
    )

    # Freeze the pretrained weights
    model.trainable = False

    # Rebuild top
    x = layers.GlobalAveragePooling2D(name="avg_pool")(model.output)
    x = layers.BatchNormalization()(x)

    top_dropout_rate = 0.2
    x = layers.Dropout(top_dropout_rate, name="top_dropout")(x)
    outputs = layers.Dense(num_classes, activation="softmax", name="pred")(x)

    # Compile
    model = keras.Model(inputs, outputs, name="EfficientNet")
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["accuracy"])
    return model


model = build_model(num_classes=NUM_CLASSES)
epochs = 1  # the example: 25
hist = model.fit(ds_train, epochs=epochs, validation_data=ds_test, verbose=0)


def unfreeze_model(model):
    # We unfreeze the top 20 layers while leaving BatchNorm layers frozen
    for layer in model.layers[-20:]:
        if not isinstance(layer, layers.BatchNormalization):
            layer.trainable = True

    optimizer = keras.optimizers.Adam(learning_rate=1e-5)
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["accuracy"])
"""

TRAIN = """\
unfreeze_model(model)

epochs = 1  # the example: 4
hist = model.fit(ds_train, epochs=epochs, validation_data=ds_test, verbose=0)
"""

EXAMPLE = Example(
    name="fine_tuning",
    follows="https://keras.io/examples/vision/image_classification_efficientnet_fine_tuning/",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
