"""keras.io/examples/nlp/bidirectional_lstm_imdb: an ``Embedding`` and two ``Bidirectional(LSTM)``
layers on padded integer sequences, a Functional model fit with ``validation_data``."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras
from keras import layers

max_features = 20000  # Only consider the top 20k words
maxlen = 200  # Only consider the first 200 words of each movie review

# The example loads keras.datasets.imdb (25,000 reviews each way) and pads them to 200.
# Synthetic, the same shapes and dtypes, fewer reviews.
rng = np.random.default_rng(0)
x_train = rng.integers(1, max_features, (512, 400)).astype("int32")
y_train = rng.integers(0, 2, (512,))
x_val = rng.integers(1, max_features, (128, 400)).astype("int32")
y_val = rng.integers(0, 2, (128,))
print(len(x_train), "Training sequences")
print(len(x_val), "Validation sequences")
# Use pad_sequence to standardize sequence length:
# this will truncate sequences longer than 200 words and zero-pad sequences shorter than 200 words.
x_train = keras.utils.pad_sequences(x_train, maxlen=maxlen)
x_val = keras.utils.pad_sequences(x_val, maxlen=maxlen)
"""

TRAIN = """\
# Input for variable-length sequences of integers
inputs = keras.Input(shape=(None,), dtype="int32")
# Embed each integer in a 128-dimensional vector
x = layers.Embedding(max_features, 128)(inputs)
# Add 2 bidirectional LSTMs
x = layers.Bidirectional(layers.LSTM(64, return_sequences=True))(x)
x = layers.Bidirectional(layers.LSTM(64))(x)
# Add a classifier
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
model.summary()

model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
# the example: epochs=2
model.fit(x_train, y_train, batch_size=32, epochs=1, validation_data=(x_val, y_val))
"""

EXAMPLE = Example(
    name="bidirectional_lstm",
    follows="keras.io/examples/nlp/bidirectional_lstm_imdb",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    short=(
        ("maxlen = 200", "maxlen = 50"),
        ("(512, 400)", "(64, 400)"),
        ("(512,)", "(64,)"),
        ("(128, 400)", "(32, 400)"),
        ("(128,)", "(32,)"),
    ),
)
