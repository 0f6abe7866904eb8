"""keras.io/examples/nlp/text_classification_from_scratch: a ``TextVectorization`` layer adapted
in the setup cell (with the tf.data pipelines that use it), then, in the training cell, a model
trained on the vectorized data and an end-to-end model built on the same layer:
``inputs = keras.Input(shape=(1,), dtype="string"); indices = vectorize_layer(inputs)``."""

from __future__ import annotations

from . import Example

SETUP = """\
import re
import string

import numpy as np
import tensorflow as tf
import keras
from keras import layers

batch_size = 32

# The example reads the IMDB reviews (aclImdb, 25000 + 25000 texts) with
# keras.utils.text_dataset_from_directory: batches of (string, int32 label).
# Synthetic, same dtypes, review-like texts (HTML breaks, punctuation), fewer samples.
rng = np.random.default_rng(1337)
words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 9)))
         for _ in range(3000)]


def reviews(n):
    texts = [" ".join(rng.choice(words, rng.integers(40, 400))).capitalize() + ". <br />Great!"
             for _ in range(n)]
    labels = rng.integers(0, 2, n).astype("int32")
    return tf.data.Dataset.from_tensor_slices((texts, labels)).batch(batch_size)


raw_train_ds = reviews(128)
raw_val_ds = reviews(32)
raw_test_ds = reviews(32)
print(f"Number of batches in raw_train_ds: {raw_train_ds.cardinality()}")


# Having looked at our data above, we see that the raw text contains HTML break
# tags of the form '<br />'. These tags will not be removed by the default
# standardizer (which doesn't strip HTML). Because of this, we will need to
# create a custom standardization function.
def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(
        stripped_html, f"[{re.escape(string.punctuation)}]", ""
    )


# Model constants.
max_features = 20000
embedding_dim = 128
sequence_length = 500

# Now that we have our custom standardization, we can instantiate our text
# vectorization layer. We are using this layer to normalize, split, and map
# strings to integers, so we set our 'output_mode' to 'int'.
vectorize_layer = keras.layers.TextVectorization(
    standardize=custom_standardization,
    max_tokens=max_features,
    output_mode="int",
    output_sequence_length=sequence_length,
)

# Now that the vectorize_layer has been created, call `adapt` on a text-only
# dataset to create the vocabulary.
text_ds = raw_train_ds.map(lambda x, y: x)
# Let's call `adapt`:
vectorize_layer.adapt(text_ds)


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


# Vectorize the data.
train_ds = raw_train_ds.map(vectorize_text)
val_ds = raw_val_ds.map(vectorize_text)
test_ds = raw_test_ds.map(vectorize_text)

# Do async prefetching / buffering of the data for best performance on GPU.
train_ds = train_ds.cache().prefetch(buffer_size=10)
val_ds = val_ds.cache().prefetch(buffer_size=10)
test_ds = test_ds.cache().prefetch(buffer_size=10)
"""

TRAIN = """\
# A integer input for vocab indices.
inputs = keras.Input(shape=(None,), dtype="int64")

# Next, we add a layer to map those vocab indices into a space of dimensionality
# 'embedding_dim'.
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)

# Conv1D + global max pooling
x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)

# We add a vanilla hidden layer:
x = layers.Dense(128, activation="relu")(x)
x = layers.Dropout(0.5)(x)

# We project onto a single unit output layer, and squash it with a sigmoid:
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

model = keras.Model(inputs, predictions)

# Compile the model with binary crossentropy loss and an adam optimizer.
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

epochs = 1  # the example: 3

# Fit the model using the train and test datasets.
model.fit(train_ds, validation_data=val_ds, epochs=epochs)

model.evaluate(test_ds)

# A string input
inputs = keras.Input(shape=(1,), dtype="string")
# Turn strings into vocab indices
indices = vectorize_layer(inputs)
# Turn vocab indices into predictions
outputs = model(indices)

# Our end to end model
end_to_end_model = keras.Model(inputs, outputs)
end_to_end_model.compile(
    loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"]
)

# Test it with `raw_test_ds`, which yields raw strings
end_to_end_model.evaluate(raw_test_ds)
"""

EXAMPLE = Example(
    name="text_classification",
    follows="keras.io/examples/nlp/text_classification_from_scratch",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
