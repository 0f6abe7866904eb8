"""keras.io/examples/timeseries/timeseries_anomaly_detection: a Conv1D autoencoder of one series,
``EarlyStopping`` on ``val_loss``, then ``predict`` on the training windows and a threshold from
their reconstruction error."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras
from keras import layers

# The example reads NAB's art_daily_small_noise.csv: 4,032 values, one every 5 minutes.
# Synthetic, the same shape: a daily sine with small noise.
rng = np.random.default_rng(0)
t = np.arange(4032)
df_small_noise = (np.sin(t / 288 * 2 * np.pi) * 20 + 40 + rng.normal(0, 1, 4032)).astype("float32")

# Normalize and save the mean and std we get, for normalizing test data.
training_mean = df_small_noise.mean()
training_std = df_small_noise.std()
df_training_value = (df_small_noise - training_mean) / training_std
print("Number of training samples:", len(df_training_value))

TIME_STEPS = 288


# Generated training sequences for use in the model.
def create_sequences(values, time_steps=TIME_STEPS):
    output = []
    for i in range(len(values) - time_steps + 1):
        output.append(values[i : (i + time_steps)])
    return np.stack(output)


x_train = create_sequences(df_training_value[:, None])
print("Training input shape: ", x_train.shape)
"""

TRAIN = """\
model = keras.Sequential(
    [
        layers.Input(shape=(x_train.shape[1], x_train.shape[2])),
        layers.Conv1D(filters=32, kernel_size=7, padding="same", strides=2, activation="relu"),
        layers.Dropout(rate=0.2),
        layers.Conv1D(filters=16, kernel_size=7, padding="same", strides=2, activation="relu"),
        layers.Conv1DTranspose(
            filters=16, kernel_size=7, padding="same", strides=2, activation="relu"
        ),
        layers.Dropout(rate=0.2),
        layers.Conv1DTranspose(
            filters=32, kernel_size=7, padding="same", strides=2, activation="relu"
        ),
        layers.Conv1DTranspose(filters=1, kernel_size=7, padding="same"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.001), loss="mse")
model.summary()

history = model.fit(
    x_train,
    x_train,
    epochs=2,  # the example: 50
    batch_size=128,
    validation_split=0.1,
    callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, mode="min")],
)

# Get train MAE loss.
x_train_pred = model.predict(x_train)
train_mae_loss = np.mean(np.abs(x_train_pred - x_train), axis=1)

# Get reconstruction loss threshold.
threshold = np.max(train_mae_loss)
print("Reconstruction error threshold: ", threshold)
"""

EXAMPLE = Example(
    name="anomaly_detection",
    follows="keras.io/examples/timeseries/timeseries_anomaly_detection",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    short=(("df_training_value[:, None]", "df_training_value[:600, None]"),),
)
