"""keras.io/examples/generative/lstm_character_level_text_generation: the setup cell one-hot
encodes the corpus and builds and compiles the LSTM once; the training cell fits a round and
samples text from the model character by character, one ``predict`` of one sample per
character, as the example does. The model lives on across runs (each continues training it).
Something is wrong here: the predicts take most of the cell (each sets up a data pipeline and
callbacks anew), and the example ``expects`` keras_nbguard to say so (``inference_loop``)."""

from __future__ import annotations

from . import Example

SETUP = """\
import random

import numpy as np
import keras
from keras import layers

# the example reads Nietzsche's writings; this text has its shape: 30 characters, 20k long
rng = np.random.default_rng(0)
text = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz .,\\n"), 20000))
chars = sorted(list(set(text)))
char_indices = dict((c, i) for i, c in enumerate(chars))
indices_char = dict((i, c) for i, c in enumerate(chars))

maxlen = 40
step = 10  # the example: 3
sentences = []
next_chars = []
for i in range(0, len(text) - maxlen, step):
    sentences.append(text[i : i + maxlen])
    next_chars.append(text[i + maxlen])

x = np.zeros((len(sentences), maxlen, len(chars)), dtype="bool")
y = np.zeros((len(sentences), len(chars)), dtype="bool")
for i, sentence in enumerate(sentences):
    for t, char in enumerate(sentence):
        x[i, t, char_indices[char]] = 1
    y[i, char_indices[next_chars[i]]] = 1

model = keras.Sequential(
    [
        keras.Input(shape=(maxlen, len(chars))),
        layers.LSTM(128),
        layers.Dense(len(chars), activation="softmax"),
    ]
)
optimizer = keras.optimizers.RMSprop(learning_rate=0.01)
model.compile(loss="categorical_crossentropy", optimizer=optimizer)


def sample(preds, temperature=1.0):
    # helper function to sample an index from a probability array
    preds = np.asarray(preds).astype("float64")
    preds = np.log(preds) / temperature
    exp_preds = np.exp(preds)
    preds = exp_preds / np.sum(exp_preds)
    probas = np.random.multinomial(1, preds, 1)
    return np.argmax(probas)
"""

TRAIN = """\
epochs = 1  # the example: 40
batch_size = 128

for epoch in range(epochs):
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
    print()
    print("Generating text after epoch: %d" % epoch)

    start_index = random.randint(0, len(text) - maxlen - 1)
    for diversity in [0.2, 1.0]:  # the example: [0.2, 0.5, 1.0, 1.2]
        print("...Diversity:", diversity)

        generated = ""
        sentence = text[start_index : start_index + maxlen]
        print('...Generating with seed: "' + sentence + '"')

        for i in range(30):  # the example: 400
            x_pred = np.zeros((1, maxlen, len(chars)))
            for t, char in enumerate(sentence):
                x_pred[0, t, char_indices[char]] = 1.0
            preds = model.predict(x_pred, verbose=0)[0]
            next_index = sample(preds, diversity)
            next_char = indices_char[next_index]
            sentence = sentence[1:] + next_char
            generated += next_char

        print("...Generated: ", generated)
        print("-")
"""

EXAMPLE = Example(
    name="text_generation",
    follows="keras.io/examples/generative/lstm_character_level_text_generation",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    expects=("inference_loop",),
)
