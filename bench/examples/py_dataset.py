"""keras.io/api/utils/python_utils (``keras.utils.PyDataset``, the API docs' own example): a
dataset class that reads one image file per sample in ``__getitem__``, fed to ``fit`` with worker
processes (``workers=2, use_multiprocessing=True``: forked at each fit, ended by
``Pool.terminate`` at its end). The class and the files in the setup cell; the model, the dataset
and the fit in the training cell."""

from __future__ import annotations

from . import Example

SETUP = """\
import math
import os
import tempfile

import numpy as np
import keras


# The docs' example: `x_set` is a list of paths to the images, `y_set` their classes; each batch
# is read from its files (there with skimage's imread and resize; here the images are .npy files
# of the size the model takes, read with np.load: nothing to install)
class CIFAR10PyDataset(keras.utils.PyDataset):

    def __init__(self, x_set, y_set, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = x_set, y_set
        self.batch_size = batch_size

    def __len__(self):
        # Return number of batches.
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        # Return x, y for batch idx.
        low = idx * self.batch_size
        # Cap upper bound at array length; the last batch may be smaller
        # if the total number of items is not a multiple of batch size.
        high = min(low + self.batch_size, len(self.x))
        batch_x = self.x[low:high]
        batch_y = self.y[low:high]

        return np.array([
            np.load(file_name).astype("float32") / 255.0
               for file_name in batch_x]), np.array(batch_y)


# CIFAR-10's shapes (32x32 RGB, 10 classes), synthetic, one file per image
folder = tempfile.mkdtemp(prefix="cifar10-")
rng = np.random.default_rng(0)
x_paths = []
for i in range(600):
    path = os.path.join(folder, f"{i}.npy")
    np.save(path, rng.integers(0, 256, (32, 32, 3), dtype="uint8"))
    x_paths.append(path)
y_classes = rng.integers(0, 10, len(x_paths))
"""

TRAIN = """\
model = keras.Sequential(
    [
        keras.Input(shape=(32, 32, 3)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
train = CIFAR10PyDataset(x_paths, y_classes, batch_size=64, workers=2, use_multiprocessing=True)
history = model.fit(train, epochs=2, verbose=0)
"""

EXAMPLE = Example(
    name="py_dataset",
    follows="keras.io/api/utils/python_utils (PyDataset, workers=2, use_multiprocessing=True)",
    setup=SETUP,
    train=TRAIN,
)
