"""In the child: the models the notebook sent in that the cell trained without naming them.

The kernel brings back the names a cell binds or visibly changes (``model.fit(...)``). keras.io's
VAE and GAN cells bind ``vae = VAE(encoder, decoder)`` and fit that: ``encoder`` and ``decoder``,
sent in from the setup cell, are trained through it, and came back untrained — a plain run
leaves them trained. A fingerprint of each model's weights, taken before the cell and after it,
says which ones the cell changed; those go back too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from keras_nbguard.isolation.changed_state import checksum


def fingerprints(
    namespace: Mapping[str, Any], names: Iterable[str], models: tuple[type, ...]
) -> dict[str, int]:
    """The weights' checksum of each Keras model among ``names``."""
    if not models:
        return {}
    return {
        name: checksum(namespace[name].weights)
        for name in names
        if isinstance(namespace.get(name), models)
    }


def changed(namespace: Mapping[str, Any], before: Mapping[str, int]) -> list[str]:
    """The names whose model is still there, with other weights than before the cell."""
    return [
        name
        for name, was in before.items()
        if name in namespace and checksum(namespace[name].weights) != was
    ]
