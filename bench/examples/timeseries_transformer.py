"""keras.io/examples/timeseries/timeseries_classification_transformer: the model-building
functions defined in the setup cell; in the training cell a transformer encoder
(``MultiHeadAttention``, ``LayerNormalization``, residuals written ``x + inputs``) built, compiled,
fit with ``EarlyStopping(restore_best_weights=True)`` and evaluated."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras
from keras import layers

# The example reads FordA (3601 train and 1320 test series of 500 steps, labels -1/1 made 0/1).
# Synthetic, same shapes and dtypes, a few series (the model is heavy on CPU).
rng = np.random.default_rng(0)
x_train = rng.standard_normal((20, 500, 1))
y_train = rng.integers(0, 2, 20)
x_test = rng.standard_normal((8, 500, 1))
y_test = rng.integers(0, 2, 8)

n_classes = len(np.unique(y_train))

idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]


def transformer_encoder(inputs, head_size, num_heads, ff_dim, dropout=0):
    # Attention and Normalization
    x = layers.MultiHeadAttention(
        key_dim=head_size, num_heads=num_heads, dropout=dropout
    )(inputs, inputs)
    x = layers.Dropout(dropout)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    res = x + inputs

    # Feed Forward Part
    x = layers.Conv1D(filters=ff_dim, kernel_size=1, activation="relu")(res)
    x = layers.Dropout(dropout)(x)
    x = layers.Conv1D(filters=inputs.shape[-1], kernel_size=1)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    return x + res


def build_model(
    input_shape,
    head_size,
    num_heads,
    ff_dim,
    num_transformer_blocks,
    mlp_units,
    dropout=0,
    mlp_dropout=0,
):
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for _ in range(num_transformer_blocks):
        x = transformer_encoder(x, head_size, num_heads, ff_dim, dropout)

    x = layers.GlobalAveragePooling1D(data_format="channels_last")(x)
    for dim in mlp_units:
        x = layers.Dense(dim, activation="relu")(x)
        x = layers.Dropout(mlp_dropout)(x)
    outputs = layers.Dense(n_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)
"""

TRAIN = """\
input_shape = x_train.shape[1:]

model = build_model(
    input_shape,
    head_size=256,
    num_heads=4,
    ff_dim=4,
    num_transformer_blocks=4,
    mlp_units=[128],
    mlp_dropout=0.4,
    dropout=0.25,
)

model.compile(
    loss="sparse_categorical_crossentropy",
    optimizer=keras.optimizers.Adam(learning_rate=1e-4),
    metrics=["sparse_categorical_accuracy"],
)
model.summary()

callbacks = [keras.callbacks.EarlyStopping(patience=10, restore_best_weights=True)]

model.fit(
    x_train,
    y_train,
    validation_split=0.2,
    epochs=2,  # the example: 150
    batch_size=64,
    callbacks=callbacks,
)

model.evaluate(x_test, y_test, verbose=1)
"""

EXAMPLE = Example(
    name="timeseries_transformer",
    follows="keras.io/examples/timeseries/timeseries_classification_transformer",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    short=(  # 20 s a run on CPU, most of it attention over 500 steps: fewer series, one block
        ("(20, 500, 1)", "(5, 500, 1)"),
        ("integers(0, 2, 20)", "integers(0, 2, 5)"),
        ("(8, 500, 1)", "(2, 500, 1)"),
        ("integers(0, 2, 8)", "integers(0, 2, 2)"),
        ("num_transformer_blocks=4", "num_transformer_blocks=1"),
    ),
)
