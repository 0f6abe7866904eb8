"""keras.io/examples/vision/mnist_convnet: a Sequential convnet, ``summary()``, ``validation_split``
and ``model.fit(...)`` as the cell's last line (its History lands in ``Out[n]``)."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras
from keras import layers

# Model / data parameters
num_classes = 10
input_shape = (28, 28, 1)

# The example loads keras.datasets.mnist: 60000 uint8 images 28x28 and uint8 labels.
# Synthetic, same shapes and dtypes, fewer samples.
rng = np.random.default_rng(0)
x_train = rng.integers(0, 256, (512, 28, 28), dtype="uint8")
y_train = rng.integers(0, num_classes, (512,), dtype="uint8")

# Scale images to the [0, 1] range
x_train = x_train.astype("float32") / 255
# Make sure images have shape (28, 28, 1)
x_train = np.expand_dims(x_train, -1)
print("x_train shape:", x_train.shape)
# convert class vectors to binary class matrices
y_train = keras.utils.to_categorical(y_train, num_classes)

batch_size = 128
epochs = 2  # the example: 15
"""

TRAIN = """\
model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)
model.summary()
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1)
"""

EXAMPLE = Example(
    name="mnist_convnet",
    follows="keras.io/examples/vision/mnist_convnet",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
