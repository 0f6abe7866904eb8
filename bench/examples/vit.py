"""keras.io/examples/vision/image_classification_with_vision_transformer: a ``data_augmentation``
``Sequential`` (its ``Normalization`` adapted to the training images) and the ``Patches`` and
``PatchEncoder`` layers built in the setup cell, as the example writes them (no ``**kwargs``;
``PatchEncoder.get_config`` without ``projection_dim``: a model Keras can save but not load);
in the training cell ``create_vit_classifier()`` — each run's model on the setup's
``data_augmentation`` — and ``run_experiment``: AdamW, a ``ModelCheckpoint`` of the best weights,
``load_weights`` and ``evaluate``."""

from __future__ import annotations

from . import Example

SETUP = """\
import os

import keras
from keras import layers
from keras import ops
import numpy as np

num_classes = 100
input_shape = (32, 32, 3)
# The example loads CIFAR-100 (50,000 and 10,000 uint8 32x32x3 images, int64 labels of shape
# (n, 1)); synthetic, same shapes and dtypes, fewer.
rng = np.random.default_rng(0)
x_train = rng.integers(0, 256, (256, 32, 32, 3)).astype("uint8")
y_train = rng.integers(0, 100, (256, 1)).astype("int64")
x_test = rng.integers(0, 256, (64, 32, 32, 3)).astype("uint8")
y_test = rng.integers(0, 100, (64, 1)).astype("int64")

learning_rate = 0.001
weight_decay = 0.0001
batch_size = 64
num_epochs = 1  # the example: 10 ("For real training, use num_epochs=100")
image_size = 72  # We'll resize input images to this size
patch_size = 6  # Size of the patches to be extract from the input images
num_patches = (image_size // patch_size) ** 2
projection_dim = 64
num_heads = 4
transformer_units = [projection_dim * 2, projection_dim]
transformer_layers = 2  # the example: 8 (on CPU: seconds a run with 2)
mlp_head_units = [2048, 1024]

data_augmentation = keras.Sequential(
    [
        layers.Normalization(),
        layers.Resizing(image_size, image_size),
        layers.RandomFlip("horizontal"),
        layers.RandomRotation(factor=0.02),
        layers.RandomZoom(height_factor=0.2, width_factor=0.2),
    ],
    name="data_augmentation",
)
# Compute the mean and the variance of the training data for normalization.
data_augmentation.layers[0].adapt(x_train)

def mlp(x, hidden_units, dropout_rate):
    for units in hidden_units:
        x = layers.Dense(units, activation=keras.activations.gelu)(x)
        x = layers.Dropout(dropout_rate)(x)
    return x

class Patches(layers.Layer):
    def __init__(self, patch_size):
        super().__init__()
        self.patch_size = patch_size

    def call(self, images):
        input_shape = ops.shape(images)
        batch_size = input_shape[0]
        height = input_shape[1]
        width = input_shape[2]
        channels = input_shape[3]
        num_patches_h = height // self.patch_size
        num_patches_w = width // self.patch_size
        patches = keras.ops.image.extract_patches(images, size=self.patch_size)
        patches = ops.reshape(
            patches,
            (
                batch_size,
                num_patches_h * num_patches_w,
                self.patch_size * self.patch_size * channels,
            ),
        )
        return patches

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size})
        return config

class PatchEncoder(layers.Layer):
    def __init__(self, num_patches, projection_dim):
        super().__init__()
        self.num_patches = num_patches
        self.projection = layers.Dense(units=projection_dim)
        self.position_embedding = layers.Embedding(
            input_dim=num_patches, output_dim=projection_dim
        )

    def call(self, patch):
        positions = ops.expand_dims(
            ops.arange(start=0, stop=self.num_patches, step=1), axis=0
        )
        projected_patches = self.projection(patch)
        encoded = projected_patches + self.position_embedding(positions)
        return encoded

    def get_config(self):
        config = super().get_config()
        config.update({"num_patches": self.num_patches})
        return config

def create_vit_classifier():
    inputs = keras.Input(shape=input_shape)
    # Augment data.
    augmented = data_augmentation(inputs)
    # Create patches.
    patches = Patches(patch_size)(augmented)
    # Encode patches.
    encoded_patches = PatchEncoder(num_patches, projection_dim)(patches)

    # Create multiple layers of the Transformer block.
    for _ in range(transformer_layers):
        # Layer normalization 1.
        x1 = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
        # Create a multi-head attention layer.
        attention_output = layers.MultiHeadAttention(
            num_heads=num_heads, key_dim=projection_dim, dropout=0.1
        )(x1, x1)
        # Skip connection 1.
        x2 = layers.Add()([attention_output, encoded_patches])
        # Layer normalization 2.
        x3 = layers.LayerNormalization(epsilon=1e-6)(x2)
        # MLP.
        x3 = mlp(x3, hidden_units=transformer_units, dropout_rate=0.1)
        # Skip connection 2.
        encoded_patches = layers.Add()([x3, x2])

    # Create a [batch_size, projection_dim] tensor.
    representation = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
    representation = layers.Flatten()(representation)
    representation = layers.Dropout(0.5)(representation)
    # Add MLP.
    features = mlp(representation, hidden_units=mlp_head_units, dropout_rate=0.5)
    # Classify outputs.
    logits = layers.Dense(num_classes)(features)
    # Create the Keras model.
    model = keras.Model(inputs=inputs, outputs=logits)
    return model

def run_experiment(model):
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate, weight_decay=weight_decay
    )

    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[
            keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            keras.metrics.SparseTopKCategoricalAccuracy(5, name="top-5-accuracy"),
        ],
    )

    checkpoint_filepath = "/tmp/checkpoint.weights.h5"
    checkpoint_callback = keras.callbacks.ModelCheckpoint(
        checkpoint_filepath,
        monitor="val_accuracy",
        save_best_only=True,
        save_weights_only=True,
    )

    history = model.fit(
        x=x_train,
        y=y_train,
        batch_size=batch_size,
        epochs=num_epochs,
        validation_split=0.1,
        callbacks=[checkpoint_callback],
    )

    model.load_weights(checkpoint_filepath)
    _, accuracy, top_5_accuracy = model.evaluate(x_test, y_test)
    print(f"Test accuracy: {round(accuracy * 100, 2)}%")
    print(f"Test top 5 accuracy: {round(top_5_accuracy * 100, 2)}%")

    return history
"""

TRAIN = """\
vit_classifier = create_vit_classifier()
history = run_experiment(vit_classifier)
"""

EXAMPLE = Example(
    name="vit",
    follows="keras.io/examples/vision/image_classification_with_vision_transformer",
    setup=SETUP,
    train=TRAIN,
    short=(  # a head of 64 and 32 units, not 2,048 and 1,024 (18.9M weights), one transformer
        # layer (tracing each is a second or two a run), fewer images
        ("mlp_head_units = [2048, 1024]", "mlp_head_units = [64, 32]"),
        ("transformer_layers = 2", "transformer_layers = 1"),
        ("(256, 32, 32, 3)", "(64, 32, 32, 3)"),
        ("integers(0, 100, (256, 1))", "integers(0, 100, (64, 1))"),
    ),
)
