"""keras.io/examples/keras_recipes/endpoint_layer_pattern (Keras 3): a ``LogisticEndpoint`` layer,
defined in the setup cell, computes the loss itself (``self.add_loss``) from the targets and
sample weights it takes as inputs, and updates its own ``BinaryAccuracy``; the model takes a
dict of three named inputs and is compiled with an optimizer only. The training cell, re-run,
is the example's three parts in order: the Functional model fit, an inference-only model given
its weights (``set_weights``) and asked to ``predict``, and the subclassed ``LogReg`` on the
same layer fit. The example's own random data."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras
import tensorflow as tf


class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_metric = keras.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            # the training loss, from the targets given as an input
            loss = self.loss_fn(targets, logits, sample_weight)
            self.add_loss(loss)
            # a metric of the layer's own, updated as it goes
            self.accuracy_metric.update_state(targets, logits, sample_weight)
        # what predict() returns
        return tf.nn.softmax(logits)


class LogReg(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.logistic_endpoint = LogisticEndpoint()

    def call(self, inputs):
        # every input in the first argument, so that model.fit(inputs) works
        logits = self.dense(inputs["inputs"])
        return self.logistic_endpoint(
            logits=logits,
            targets=inputs["targets"],
            sample_weight=inputs["sample_weight"],
        )
"""

TRAIN = """\
inputs = keras.Input((764,), name="inputs")
logits = keras.layers.Dense(1)(inputs)
targets = keras.Input((1,), name="targets")
sample_weight = keras.Input((1,), name="sample_weight")
preds = LogisticEndpoint()(logits, targets, sample_weight)
model = keras.Model([inputs, targets, sample_weight], preds)

data = {
    "inputs": np.random.random((1000, 764)),
    "targets": np.random.random((1000, 1)),
    "sample_weight": np.random.random((1000, 1)),
}

model.compile(keras.optimizers.Adam(1e-3))
model.fit(data, epochs=2)

# An inference-only model: the same layers without the targets, the trained weights
inputs = keras.Input((764,), name="inputs")
logits = keras.layers.Dense(1)(inputs)
preds = LogisticEndpoint()(logits, targets=None, sample_weight=None)
inference_model = keras.Model(inputs, preds)

inference_model.set_weights(model.get_weights())

preds = inference_model.predict(np.random.random((1000, 764)))

# The same endpoint in a subclassed model
model = LogReg()
data = {
    "inputs": np.random.random((1000, 764)),
    "targets": np.random.random((1000, 1)),
    "sample_weight": np.random.random((1000, 1)),
}

model.compile(keras.optimizers.Adam(1e-3))
model.fit(data, epochs=2)
"""

EXAMPLE = Example(
    name="endpoint_layer",
    follows="keras.io/examples/keras_recipes/endpoint_layer_pattern",
    setup=SETUP,
    train=TRAIN,
)
