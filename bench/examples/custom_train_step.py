"""keras.io/guides/custom_train_step_in_tensorflow: a Functional model whose class overrides
``train_step`` (the class in the setup cell, the model built and fit in the training cell)."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import tensorflow as tf
import keras


class CustomModel(keras.Model):
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value
            # (the loss function is configured in `compile()`)
            loss = self.compute_loss(y=y, y_pred=y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Update metrics (includes the metric that tracks the loss)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)

        # Return a dict mapping metric names to current value
        return {m.name: m.result() for m in self.metrics}


# Just use `fit` as usual (the guide's own random data)
x = np.random.random((1000, 32))
y = np.random.random((1000, 1))
"""

TRAIN = """\
# Construct and compile an instance of CustomModel
inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])

model.fit(x, y, epochs=3)
"""

EXAMPLE = Example(
    name="custom_train_step",
    follows="keras.io/guides/custom_train_step_in_tensorflow",
    setup=SETUP,
    train=TRAIN,
)
