"""keras.io/guides/serialization_and_saving: a model with a custom layer and a custom function,
each registered with ``@keras.saving.register_keras_serializable`` in the setup cell; each run
builds and fits it, saves it to a ``.keras`` file, loads it back and checks that both predict
the same (the guide's "Saving" and "Custom objects" sections, as one training cell)."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import keras
from keras import layers

os.chdir(tempfile.mkdtemp())  # where the model is saved (the guide: the working folder)


# Clear all previously registered custom objects
keras.saving.get_custom_objects().clear()


# Upon registration, you can optionally specify a package or a name.
# If left blank, the package defaults to `Custom` and the name defaults to
# the class name.
@keras.saving.register_keras_serializable(package="MyLayers")
class CustomLayer(keras.layers.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {"factor": self.factor}


@keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
def custom_fn(x):
    return x**2


def get_model():
    inputs = keras.Input(shape=(32,))
    x = CustomLayer(2.0)(inputs)
    x = layers.Dense(64, activation=custom_fn)(x)
    outputs = layers.Dense(1)(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mean_squared_error")
    return model


# The guide fits on random data too
test_input = np.random.random((128, 32))
test_target = np.random.random((128, 1))
"""

TRAIN = """\
# Create the model.
model = get_model()

# Train the model.
model.fit(test_input, test_target)

# Now, we can simply load without worrying about our custom objects.
model.save("custom_model.keras")
reconstructed_model = keras.models.load_model("custom_model.keras")

# Let's check:
np.testing.assert_allclose(
    model.predict(test_input), reconstructed_model.predict(test_input)
)
"""

EXAMPLE = Example(
    name="saving",
    follows="keras.io/guides/serialization_and_saving (custom objects registered)",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
