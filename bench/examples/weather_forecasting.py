"""keras.io/examples/timeseries/timeseries_weather_forecasting: the setup cell normalizes the
features and builds training and validation datasets with ``timeseries_dataset_from_array``
(120-step windows sampled hourly from 10-minute readings, batch 256); the training cell takes one
batch to read the input shape, builds an LSTM(32) regressor, and fits with ``EarlyStopping`` and
``ModelCheckpoint(save_weights_only=True, save_best_only=True)``, then predicts on a few
validation batches as the example does before plotting them (the plots are left out)."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import keras

# The example reads the Jena climate CSV (420,551 rows of 14 readings every 10 minutes) with
# pandas and keeps 7 of them. Synthetic, the same columns' shape, fewer rows.
rng = np.random.default_rng(0)
features = rng.standard_normal((6000, 7)).cumsum(axis=0).astype("float32")

split_fraction = 0.715
train_split = int(split_fraction * int(features.shape[0]))
step = 6

past = 720
future = 72
learning_rate = 0.001
batch_size = 256
epochs = 2  # the example: 10


def normalize(data, train_split):
    data_mean = data[:train_split].mean(axis=0)
    data_std = data[:train_split].std(axis=0)
    return (data - data_mean) / data_std


features = normalize(features, train_split)
train_data = features[0 : train_split - 1]
val_data = features[train_split:]

start = past + future
end = start + train_split

x_train = train_data
y_train = features[start:end][:, [1]]

sequence_length = int(past / step)

dataset_train = keras.preprocessing.timeseries_dataset_from_array(
    x_train,
    y_train,
    sequence_length=sequence_length,
    sampling_rate=step,
    batch_size=batch_size,
)

x_end = len(val_data) - past - future

label_start = train_split + past + future

x_val = val_data[:x_end]
y_val = features[label_start:][:, [1]]

dataset_val = keras.preprocessing.timeseries_dataset_from_array(
    x_val,
    y_val,
    sequence_length=sequence_length,
    sampling_rate=step,
    batch_size=batch_size,
)
os.chdir(tempfile.mkdtemp())  # where ModelCheckpoint writes (the example: the working folder)
"""

TRAIN = """\
for batch in dataset_train.take(1):
    inputs, targets = batch

inputs = keras.layers.Input(shape=(inputs.shape[1], inputs.shape[2]))
lstm_out = keras.layers.LSTM(32)(inputs)
outputs = keras.layers.Dense(1)(lstm_out)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")
model.summary()

path_checkpoint = "model_checkpoint.weights.h5"
es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)

modelckpt_callback = keras.callbacks.ModelCheckpoint(
    monitor="val_loss",
    filepath=path_checkpoint,
    verbose=1,
    save_weights_only=True,
    save_best_only=True,
)

history = model.fit(
    dataset_train,
    epochs=epochs,
    validation_data=dataset_val,
    callbacks=[es_callback, modelckpt_callback],
)

for x, y in dataset_val.take(5):
    prediction = model.predict(x)[0]
"""

EXAMPLE = Example(
    name="weather_forecasting",
    follows="keras.io/examples/timeseries/timeseries_weather_forecasting",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
