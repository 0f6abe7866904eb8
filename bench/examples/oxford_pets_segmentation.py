"""keras.io/examples/vision/oxford_pets_image_segmentation: image segmentation with a U-Net-like
architecture (Xception-style downsampling blocks of ``SeparableConv2D`` with projected residuals,
``Conv2DTranspose``/``UpSampling2D`` upsampling blocks). The setup cell writes the image and
trimap PNG files and defines ``get_dataset`` (a tf.data pipeline reading, decoding and resizing
them) and ``get_model``; the training cell is the example's own: ``keras.backend.clear_session()``
("Free up RAM in case the model definition cells were run multiple times"), the model built,
the datasets made, compiled, fit with a ``ModelCheckpoint(save_best_only=True)``, then
``predict`` on a fresh validation dataset."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import tensorflow as tf

# The example downloads the Oxford-IIIT Pets images (JPEG) and trimaps (PNG, labels 1, 2, 3).
# Synthetic, written as files the same way (PNG here for both), fewer of them.
data_dir = tempfile.mkdtemp(prefix="oxford-pets-")
input_dir = os.path.join(data_dir, "images/")
target_dir = os.path.join(data_dir, "annotations/trimaps/")
os.makedirs(input_dir)
os.makedirs(target_dir)
_rng = np.random.default_rng(1337)
for i in range(12):
    h, w = _rng.integers(180, 260, 2)
    img = _rng.integers(0, 256, (h, w, 3), dtype="uint8")
    trimap = _rng.integers(1, 4, (h, w, 1), dtype="uint8")
    tf.io.write_file(os.path.join(input_dir, f"pet_{i:03d}.png"), tf.io.encode_png(img))
    tf.io.write_file(os.path.join(target_dir, f"pet_{i:03d}.png"), tf.io.encode_png(trimap))

img_size = (160, 160)
num_classes = 3
batch_size = 32

input_img_paths = sorted(
    [
        os.path.join(input_dir, fname)
        for fname in os.listdir(input_dir)
        if fname.endswith(".png")
    ]
)
target_img_paths = sorted(
    [
        os.path.join(target_dir, fname)
        for fname in os.listdir(target_dir)
        if fname.endswith(".png") and not fname.startswith(".")
    ]
)

print("Number of samples:", len(input_img_paths))

import keras
import numpy as np
from tensorflow import data as tf_data
from tensorflow import image as tf_image
from tensorflow import io as tf_io


def get_dataset(
    batch_size,
    img_size,
    input_img_paths,
    target_img_paths,
    max_dataset_len=None,
):
    \"\"\"Returns a TF Dataset.\"\"\"

    def load_img_masks(input_img_path, target_img_path):
        input_img = tf_io.read_file(input_img_path)
        input_img = tf_io.decode_png(input_img, channels=3)
        input_img = tf_image.resize(input_img, img_size)
        input_img = tf_image.convert_image_dtype(input_img, "float32")

        target_img = tf_io.read_file(target_img_path)
        target_img = tf_io.decode_png(target_img, channels=1)
        target_img = tf_image.resize(target_img, img_size, method="nearest")
        target_img = tf_image.convert_image_dtype(target_img, "uint8")

        # Ground truth labels are 1, 2, 3. Subtract one to make them 0, 1, 2:
        target_img -= 1
        return input_img, target_img

    # For faster debugging, limit the size of data
    if max_dataset_len:
        input_img_paths = input_img_paths[:max_dataset_len]
        target_img_paths = target_img_paths[:max_dataset_len]
    dataset = tf_data.Dataset.from_tensor_slices((input_img_paths, target_img_paths))
    dataset = dataset.map(load_img_masks, num_parallel_calls=tf_data.AUTOTUNE)
    return dataset.batch(batch_size)


from keras import layers


def get_model(img_size, num_classes):
    inputs = keras.Input(shape=img_size + (3,))

    ### [First half of the network: downsampling inputs] ###

    # Entry block
    x = layers.Conv2D(32, 3, strides=2, padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    previous_block_activation = x  # Set aside residual

    # Blocks 1, 2, 3 are identical apart from the feature depth.
    for filters in [64, 128, 256]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)

        # Project residual
        residual = layers.Conv2D(filters, 1, strides=2, padding="same")(
            previous_block_activation
        )
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    ### [Second half of the network: upsampling inputs] ###

    for filters in [256, 128, 64, 32]:
        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.UpSampling2D(2)(x)

        # Project residual
        residual = layers.UpSampling2D(2)(previous_block_activation)
        residual = layers.Conv2D(filters, 1, padding="same")(residual)
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    # Add a per-pixel classification layer
    outputs = layers.Conv2D(num_classes, 3, activation="softmax", padding="same")(x)

    # Define the model
    model = keras.Model(inputs, outputs)
    return model
"""

TRAIN = """\
# Free up RAM in case the model definition cells were run multiple times
keras.backend.clear_session()

# Build model
model = get_model(img_size, num_classes)
model.summary()

import random

# Split our img paths into a training and a validation set
val_samples = 4  # the example: 1000
random.Random(1337).shuffle(input_img_paths)
random.Random(1337).shuffle(target_img_paths)
train_input_img_paths = input_img_paths[:-val_samples]
train_target_img_paths = target_img_paths[:-val_samples]
val_input_img_paths = input_img_paths[-val_samples:]
val_target_img_paths = target_img_paths[-val_samples:]

# Instantiate dataset for each split
# Limit input files in `max_dataset_len` for faster epoch training time.
# Remove the `max_dataset_len` arg when running with full dataset.
train_dataset = get_dataset(
    batch_size,
    img_size,
    train_input_img_paths,
    train_target_img_paths,
    max_dataset_len=1000,
)
valid_dataset = get_dataset(
    batch_size, img_size, val_input_img_paths, val_target_img_paths
)

# Configure the model for training.
# We use the "sparse" version of categorical_crossentropy
# because our target data is integers.
model.compile(
    optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy"
)

callbacks = [
    # the example writes to the working folder; here the data's (a test shell shares its cwd)
    keras.callbacks.ModelCheckpoint(
        os.path.join(data_dir, "oxford_segmentation.keras"), save_best_only=True
    )
]

# Train the model, doing validation at the end of each epoch.
epochs = 1  # the example: 50
model.fit(
    train_dataset,
    epochs=epochs,
    validation_data=valid_dataset,
    callbacks=callbacks,
    verbose=2,
)

# Generate predictions for all images in the validation set

val_dataset = get_dataset(
    batch_size, img_size, val_input_img_paths, val_target_img_paths
)
val_preds = model.predict(val_dataset)
"""

EXAMPLE = Example(
    name="oxford_pets_segmentation",
    follows="keras.io/examples/vision/oxford_pets_image_segmentation",
    setup=SETUP,
    train=TRAIN,
    short=(  # 64x64 images (still a multiple of 16), fewer files
        ("img_size = (160, 160)", "img_size = (64, 64)"),
        ("for i in range(12):", "for i in range(8):"),
        ("val_samples = 4", "val_samples = 2"),
    ),
)
