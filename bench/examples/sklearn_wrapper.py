"""keras.io/api/utils/sklearn_wrappers: ``SKLearnClassifier``'s own example (a ``dynamic_model(X,
y, loss, layers)`` builder, ``make_classification`` data, ``est.fit(X, y)`` as the cell's last
line), with the scikit-learn use the wrapper exists for, ``cross_val_score``, before it.

The cell's value is the fitted estimator: IPython keeps each run's in ``Out[n]``, and with it the
estimator's model (``est.model_``), so bare every run's models stayed alive (+15 MiB a run on a
smaller version of this cell); under the magic the earlier run's estimator leaves IPython's caches
with its model. Keras 3 only: ``keras.wrappers`` is new in it."""

from __future__ import annotations

from . import Example

SETUP = """\
import keras
from keras.layers import Dense, Input
from keras.models import Model
from keras.wrappers import SKLearnClassifier
from sklearn.datasets import make_classification
from sklearn.model_selection import cross_val_score


def dynamic_model(X, y, loss, layers=[10]):
    # Creates a basic MLP model dynamically choosing the input and
    # output shapes.
    n_features_in = X.shape[1]
    inp = Input(shape=(n_features_in,))

    hidden = inp
    for layer_size in layers:
        hidden = Dense(layer_size, activation="relu")(hidden)

    n_outputs = y.shape[1] if len(y.shape) > 1 else 1
    out = Dense(n_outputs, activation="softmax")(hidden)
    model = Model(inp, out)
    model.compile(loss=loss, optimizer="rmsprop")

    return model


X, y = make_classification(n_samples=1000, n_features=10, random_state=0)  # (seeded here)
"""

TRAIN = """\
est = SKLearnClassifier(
    model=dynamic_model,
    model_kwargs={
        "loss": "categorical_crossentropy",
        "layers": [20, 20, 20],
    },
    fit_kwargs={"verbose": 0},  # not in the docstring: its progress bars, 4 fits a run
)
scores = cross_val_score(est, X, y, cv=3)  # not in the docstring: what the wrapper is for
print("cross-validated accuracy", scores.mean())
est.fit(X, y, epochs=5)
"""

EXAMPLE = Example(
    name="sklearn_wrapper",
    follows="https://keras.io/api/utils/sklearn_wrappers/",
    setup=SETUP,
    train=TRAIN,
)
