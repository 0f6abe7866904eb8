"""keras.io/guides/writing_your_own_callbacks: the guide's early stopping at the minimum loss
(which keeps the best weights and restores them) and its learning rate scheduler, defined in the
setup cell with the guide's data and model builder. Like many a notebook, the setup cell also
makes the early-stopping callback once and every run's ``fit`` reuses it: between runs it holds
the last run's model (``es.model``) until the next ``fit`` sets its own."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import keras


# Define the Keras model to add callbacks to
def get_model():
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


# The guide loads MNIST, flattens it and keeps 1,000 samples; synthetic, same shapes and
# dtypes, 2,560 of them: enough for 8 epochs of 5 steps of 64 (the iterator is not reset).
rng = np.random.default_rng(0)
x_train = rng.random((2560, 784), dtype="float32")
y_train = rng.integers(0, 10, 2560).astype("float32")
x_test = rng.random((1000, 784), dtype="float32")
y_test = rng.integers(0, 10, 1000).astype("float32")


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    \"\"\"Stop training when the loss is at its min, i.e. the loss stops decreasing.

    Arguments:
        patience: Number of epochs to wait after min has been hit. After this
        number of no improvement, training stops.
    \"\"\"

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


class CustomLearningRateScheduler(keras.callbacks.Callback):
    \"\"\"Learning rate scheduler which sets the learning rate according to schedule.

    Arguments:
        schedule: a function that takes an epoch index
            (integer, indexed from 0) and current learning rate
            as inputs and returns a new learning rate as output (float).
    \"\"\"

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        # Get the current learning rate from model's optimizer.
        lr = self.model.optimizer.learning_rate
        # Call schedule function to get the scheduled learning rate.
        scheduled_lr = self.schedule(epoch, lr)
        # Set the value back to the optimizer before this epoch starts
        self.model.optimizer.learning_rate = scheduled_lr
        print(f"\\nEpoch {epoch}: Learning rate is {float(np.array(scheduled_lr))}.")


LR_SCHEDULE = [
    # (epoch to start, learning rate) tuples
    (3, 0.05),
    (6, 0.01),
    (9, 0.005),
    (12, 0.001),
]


def lr_schedule(epoch, lr):
    \"\"\"Helper function to retrieve the scheduled learning rate based on epoch.\"\"\"
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


es = EarlyStoppingAtMinLoss()  # made once, reused by every run's fit
"""

TRAIN = """\
model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=64,
    steps_per_epoch=5,
    epochs=8,  # the guide: 15
    verbose=0,
    callbacks=[
        es,
        CustomLearningRateScheduler(lr_schedule),
    ],
)
"""

EXAMPLE = Example(
    name="callbacks_guide",
    follows="keras.io/guides/writing_your_own_callbacks",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
)
