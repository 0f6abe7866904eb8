"""keras.io/examples/vision/siamese_contrastive: a siamese network on pairs of MNIST digits, its
two towers one shared ``embedding_network``, merged by a ``Lambda`` of the notebook's own
``euclidean_distance`` and trained with the contrastive loss of a closure, ``loss(margin=1)``.
The pairs and both functions come from the setup cell; the training cell, re-run, builds the
towers and the siamese model, compiles, fits and evaluates them, as the example's cells do in
order. Synthetic digits of MNIST's shapes and dtypes (28x28 uint8, made float32 unscaled as the
example does; labels 0-9), 1,200 pairs to train on where MNIST gives 60,000; 10 epochs become 2;
no plots."""

from __future__ import annotations

from . import Example

SETUP = """\
import random
import numpy as np
import keras
from keras import ops

epochs = 2
batch_size = 16
margin = 1  # Margin for contrastive loss.

# keras.datasets.mnist.load_data(): 60,000 + 10,000 digits; here fewer, of the same shapes
rng = np.random.default_rng(0)
x_train_val = rng.integers(0, 256, (1200, 28, 28), dtype="uint8")
y_train_val = rng.integers(0, 10, 1200, dtype="uint8")
x_test = rng.integers(0, 256, (400, 28, 28), dtype="uint8")
y_test = rng.integers(0, 10, 400, dtype="uint8")

# Change the data type to a floating point format
x_train_val = x_train_val.astype("float32")
x_test = x_test.astype("float32")

# Keep 50% of train_val in the validation set
x_train, x_val = x_train_val[:600], x_train_val[600:]
y_train, y_val = y_train_val[:600], y_train_val[600:]
del x_train_val, y_train_val


def make_pairs(x, y):
    \"\"\"Creates a tuple containing image pairs with corresponding label.\"\"\"

    num_classes = max(y) + 1
    digit_indices = [np.where(y == i)[0] for i in range(num_classes)]

    pairs = []
    labels = []

    for idx1 in range(len(x)):
        # add a matching example
        x1 = x[idx1]
        label1 = y[idx1]
        idx2 = random.choice(digit_indices[label1])
        x2 = x[idx2]

        pairs += [[x1, x2]]
        labels += [0]

        # add a non-matching example
        label2 = random.randint(0, num_classes - 1)
        while label2 == label1:
            label2 = random.randint(0, num_classes - 1)

        idx2 = random.choice(digit_indices[label2])
        x2 = x[idx2]

        pairs += [[x1, x2]]
        labels += [1]

    return np.array(pairs), np.array(labels).astype("float32")


# make train pairs
pairs_train, labels_train = make_pairs(x_train, y_train)

# make validation pairs
pairs_val, labels_val = make_pairs(x_val, y_val)

# make test pairs
pairs_test, labels_test = make_pairs(x_test, y_test)

x_train_1 = pairs_train[:, 0]  # (1200, 28, 28): two pairs per digit
x_train_2 = pairs_train[:, 1]
x_val_1 = pairs_val[:, 0]
x_val_2 = pairs_val[:, 1]
x_test_1 = pairs_test[:, 0]  # (800, 28, 28)
x_test_2 = pairs_test[:, 1]


# Provided two tensors t1 and t2
# Euclidean distance = sqrt(sum(square(t1-t2)))
def euclidean_distance(vects):
    \"\"\"Find the Euclidean distance between two vectors.\"\"\"

    x, y = vects
    sum_square = ops.sum(ops.square(x - y), axis=1, keepdims=True)
    return ops.sqrt(ops.maximum(sum_square, keras.backend.epsilon()))


def loss(margin=1):
    \"\"\"Provides 'contrastive_loss' an enclosing scope with variable 'margin'.\"\"\"

    # Contrastive loss = mean( (1-true_value) * square(prediction) +
    #                         true_value * square( max(margin-prediction, 0) ))
    def contrastive_loss(y_true, y_pred):
        square_pred = ops.square(y_pred)
        margin_square = ops.square(ops.maximum(margin - (y_pred), 0))
        return ops.mean((1 - y_true) * square_pred + (y_true) * margin_square)

    return contrastive_loss
"""

TRAIN = """\
input = keras.layers.Input((28, 28, 1))
x = keras.layers.BatchNormalization()(input)
x = keras.layers.Conv2D(4, (5, 5), activation="tanh")(x)
x = keras.layers.AveragePooling2D(pool_size=(2, 2))(x)
x = keras.layers.Conv2D(16, (5, 5), activation="tanh")(x)
x = keras.layers.AveragePooling2D(pool_size=(2, 2))(x)
x = keras.layers.Flatten()(x)

x = keras.layers.BatchNormalization()(x)
x = keras.layers.Dense(10, activation="tanh")(x)
embedding_network = keras.Model(input, x)


input_1 = keras.layers.Input((28, 28, 1))
input_2 = keras.layers.Input((28, 28, 1))

# As mentioned above, Siamese Network share weights between
# tower networks (sister networks). To allow this, we will use
# same embedding network for both tower networks.
tower_1 = embedding_network(input_1)
tower_2 = embedding_network(input_2)

merge_layer = keras.layers.Lambda(euclidean_distance, output_shape=(1,))(
    [tower_1, tower_2]
)
normal_layer = keras.layers.BatchNormalization()(merge_layer)
output_layer = keras.layers.Dense(1, activation="sigmoid")(normal_layer)
siamese = keras.Model(inputs=[input_1, input_2], outputs=output_layer)

siamese.compile(loss=loss(margin=margin), optimizer="RMSprop", metrics=["accuracy"])
siamese.summary()

history = siamese.fit(
    [x_train_1, x_train_2],
    labels_train,
    validation_data=([x_val_1, x_val_2], labels_val),
    batch_size=batch_size,
    epochs=epochs,
)

results = siamese.evaluate([x_test_1, x_test_2], labels_test)
print("test loss, test acc:", results)
"""

EXAMPLE = Example(
    name="siamese_contrastive",
    follows="keras.io/examples/vision/siamese_contrastive",
    setup=SETUP,
    train=TRAIN,
    short=(("epochs = 2", "epochs = 1"),),
)
