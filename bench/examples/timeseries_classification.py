"""keras.io/examples/timeseries/timeseries_classification_from_scratch: a Conv1D network on the
FordA sensor series, built once in the setup cell; the training cell, re-run, compiles and fits
``model`` with the example's three callbacks (``ModelCheckpoint`` keeping the best model in a
``.keras`` file, ``ReduceLROnPlateau``, ``EarlyStopping``), then rebinds ``model`` to the best
model loaded from that file and evaluates it. So each re-run trains the model the run before it
loaded, as the example's cells do when a user runs them again. Synthetic series of FordA's
shapes (500 float steps, one channel, labels 0/1 after the example's ``-1 -> 0``), fewer of
them; 500 epochs become 3 (early stopping's patience never reached); no plots."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import keras
import numpy as np

os.chdir(tempfile.mkdtemp())  # where the checkpoint is written (the example: the working folder)


def readucr(n, rng):
    # FordA_TRAIN.tsv / FordA_TEST.tsv: a label of -1 or 1, then 500 readings
    y = rng.choice([-1, 1], size=n)
    t = np.linspace(0, 8 * np.pi, 500)
    x = np.sin(t[None, :] * (1.0 + 0.25 * (y[:, None] > 0))) + rng.normal(0, 0.5, (n, 500))
    return x, y.astype(int)


rng = np.random.default_rng(0)
x_train, y_train = readucr(720, rng)
x_test, y_test = readucr(264, rng)

x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1))
x_test = x_test.reshape((x_test.shape[0], x_test.shape[1], 1))

num_classes = len(np.unique(y_train))

idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]

y_train[y_train == -1] = 0
y_test[y_test == -1] = 0


def make_model(input_shape):
    input_layer = keras.layers.Input(input_shape)

    conv1 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(input_layer)
    conv1 = keras.layers.BatchNormalization()(conv1)
    conv1 = keras.layers.ReLU()(conv1)

    conv2 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv1)
    conv2 = keras.layers.BatchNormalization()(conv2)
    conv2 = keras.layers.ReLU()(conv2)

    conv3 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv2)
    conv3 = keras.layers.BatchNormalization()(conv3)
    conv3 = keras.layers.ReLU()(conv3)

    gap = keras.layers.GlobalAveragePooling1D()(conv3)

    output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)

    return keras.models.Model(inputs=input_layer, outputs=output_layer)


model = make_model(input_shape=x_train.shape[1:])
"""

TRAIN = """\
epochs = 3
batch_size = 32

callbacks = [
    keras.callbacks.ModelCheckpoint(
        "best_model.keras", save_best_only=True, monitor="val_loss"
    ),
    keras.callbacks.ReduceLROnPlateau(
        monitor="val_loss", factor=0.5, patience=20, min_lr=0.0001
    ),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=50, verbose=1),
]
model.compile(
    optimizer="adam",
    loss="sparse_categorical_crossentropy",
    metrics=["sparse_categorical_accuracy"],
)
history = model.fit(
    x_train,
    y_train,
    batch_size=batch_size,
    epochs=epochs,
    callbacks=callbacks,
    validation_split=0.2,
    verbose=1,
)

model = keras.models.load_model("best_model.keras")

test_loss, test_acc = model.evaluate(x_test, y_test)

print("Test accuracy", test_acc)
print("Test loss", test_loss)
"""

EXAMPLE = Example(
    name="timeseries_classification",
    follows="keras.io/examples/timeseries/timeseries_classification_from_scratch",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    short=(("readucr(720, rng)", "readucr(160, rng)"), ("epochs = 3", "epochs = 1")),
)
