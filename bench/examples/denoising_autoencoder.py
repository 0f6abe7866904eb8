"""keras.io/examples/vision/autoencoder: a convolutional autoencoder for image denoising. The
setup cell loads (synthetic) MNIST, normalizes it and makes noisy copies (``preprocess``,
``noise``); the training cell builds the autoencoder with the Functional API (its input named
``input``, as the example has it, shadowing the builtin), compiles it, fits it on the clean
images, predicts, then fits the same model again on the noisy images and predicts. The example's
``display`` plots (matplotlib) are left out."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np

from keras import layers
from keras.models import Model


def preprocess(array):
    \"\"\"Normalizes the supplied array and reshapes it.\"\"\"
    array = array.astype("float32") / 255.0
    array = np.reshape(array, (len(array), 28, 28, 1))
    return array


def noise(array):
    \"\"\"Adds random noise to each image in the supplied array.\"\"\"
    noise_factor = 0.4
    noisy_array = array + noise_factor * np.random.normal(
        loc=0.0, scale=1.0, size=array.shape
    )
    return np.clip(noisy_array, 0.0, 1.0)


# The example: (train_data, _), (test_data, _) = mnist.load_data() (60000 and 10000 uint8
# images 28x28). Synthetic, same shapes and dtype, fewer samples.
_rng = np.random.default_rng(0)
train_data = _rng.integers(0, 256, (1024, 28, 28), dtype="uint8")
test_data = _rng.integers(0, 256, (256, 28, 28), dtype="uint8")

# Normalize and reshape the data
train_data = preprocess(train_data)
test_data = preprocess(test_data)

# Create a copy of the data with added noise
noisy_train_data = noise(train_data)
noisy_test_data = noise(test_data)
"""

TRAIN = """\
input = layers.Input(shape=(28, 28, 1))

# Encoder
x = layers.Conv2D(32, (3, 3), activation="relu", padding="same")(input)
x = layers.MaxPooling2D((2, 2), padding="same")(x)
x = layers.Conv2D(32, (3, 3), activation="relu", padding="same")(x)
x = layers.MaxPooling2D((2, 2), padding="same")(x)

# Decoder
x = layers.Conv2DTranspose(32, (3, 3), strides=2, activation="relu", padding="same")(x)
x = layers.Conv2DTranspose(32, (3, 3), strides=2, activation="relu", padding="same")(x)
x = layers.Conv2D(1, (3, 3), activation="sigmoid", padding="same")(x)

# Autoencoder
autoencoder = Model(input, x)
autoencoder.compile(optimizer="adam", loss="binary_crossentropy")
autoencoder.summary()

autoencoder.fit(
    x=train_data,
    y=train_data,
    epochs=1,  # the example: 50
    batch_size=128,
    shuffle=True,
    validation_data=(test_data, test_data),
)

predictions = autoencoder.predict(test_data)
# display(test_data, predictions)

autoencoder.fit(
    x=noisy_train_data,
    y=train_data,
    epochs=1,  # the example: 100
    batch_size=128,
    shuffle=True,
    validation_data=(noisy_test_data, test_data),
)

predictions = autoencoder.predict(noisy_test_data)
# display(noisy_test_data, predictions)
"""

EXAMPLE = Example(
    name="denoising_autoencoder",
    follows="keras.io/examples/vision/autoencoder",
    setup=SETUP,
    train=TRAIN,
    short=(("(1024, 28, 28)", "(256, 28, 28)"),),
)
