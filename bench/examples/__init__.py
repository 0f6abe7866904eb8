"""Keras' own examples and guides, as notebook cells: the code users copy, the project's yardstick.

Each module holds one ``Example``: a SETUP cell (data, layers or models built once) and a TRAIN
cell (what the user re-runs), in the shape of the keras.io original it ``follows``. Data is
synthetic, of the original's shapes and dtypes, with fewer samples (nothing is downloaded).
``runner.py`` runs them in a real IPython shell; ``bench/bench_examples.py`` prints the figures.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

KERASES = ("keras3", "tf_keras")  # Keras 3 on TensorFlow; Keras 2 (the tf_keras package)
MODULES = (
    "mnist_convnet",
    "custom_train_step",
    "gan",
    "loop_from_scratch",
    "text_classification",
    "tf_data_pipeline",
    "transfer_learning",
    "vae",
    "feature_space",
    "timeseries_transformer",
    "image_classification",
    "callbacks_guide",
    "training_builtin",
    "text_generation",
    "tuner_search",
    "lstm_seq2seq",
    "fine_tuning",
    "sklearn_wrapper",
    "functional_api",
    "weather_forecasting",
    "text_transformer",
    "distributed_training",
    "grad_cam",
    "py_dataset",
    "vit",
    "knowledge_distillation",
    "saving",
    "timeseries_classification",
    "collaborative_filtering",
    "siamese_contrastive",
    "endpoint_layer",
    "anomaly_detection",
    "bidirectional_lstm",
    "regression_normalizer",
    "oxford_pets_segmentation",
    "denoising_autoencoder",
    "addition_rnn",
    "wgan_gp",
    "nmt_transformer",
)


@dataclass(frozen=True)
class Example:
    """One example: ``setup`` runs once, ``train`` is the cell re-run; ``kerases``: where the
    same code runs (``tf_keras``: the same modulo ``import tf_keras as keras``); ``fits``:
    whether the train cell calls ``fit`` (so a run's fit time must be known); ``expects``: the
    findings it must raise, where the example itself does something wrong (none: it must
    raise none); ``short``: (text, replacement) pairs that make the tests' short version of an
    example too slow to run a few times in a test (fewer samples, blocks or trials; the same
    code otherwise). The bench runs the example as it stands."""

    name: str
    follows: str
    setup: str
    train: str
    kerases: tuple[str, ...] = ("keras3",)
    fits: bool = True
    expects: tuple[str, ...] = ()
    short: tuple[tuple[str, str], ...] = ()

    def cell(self, which: str, keras: str = "keras3", short: bool = False) -> str:
        """The source of the ``setup`` or ``train`` cell for ``keras``, the short version's where
        ``short``."""
        source = self.setup if which == "setup" else self.train
        if short:
            source = self._shortened(source)
        if keras == "tf_keras":
            source = re.sub(r"^import keras$", "import tf_keras as keras", source, flags=re.M)
            source = re.sub(r"^from keras import", "from tf_keras import", source, flags=re.M)
        return source

    def _shortened(self, source: str) -> str:
        for text, replacement in self.short:
            source = source.replace(text, replacement)
        return source

    def check_short(self) -> None:
        """Each of ``short``'s texts is found once in the setup and train cells together: an
        edit of the example must not leave its short version silently long."""
        for text, _ in self.short:
            found = self.setup.count(text) + self.train.count(text)
            if found != 1:
                raise ValueError(f"{self.name}: short's {text!r} is found {found} times, not once")


def examples() -> dict[str, Example]:
    """Every example, by name, in the order of ``MODULES``."""
    found = [importlib.import_module(f"{__name__}.{m}").EXAMPLE for m in MODULES]
    return {e.name: e for e in found}


def get(name: str) -> Example:
    everything = examples()
    if name not in everything:
        raise KeyError(f"no example {name!r}; known: {', '.join(everything)}")
    return everything[name]
