"""In the child: the models the notebook sent in that the cell trained without naming them.

The kernel brings back the names a cell binds or visibly changes (``model.fit(...)``). keras.io's
VAE and GAN cells bind ``vae = VAE(encoder, decoder)`` and fit that: ``encoder`` and ``decoder``,
sent in from the setup cell, are trained through it, and came back untrained — a plain run
leaves them trained. A fingerprint of each model's weights, taken before the cell and after it,
says which ones the cell changed; those go back too.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import Any


def fingerprints(
    namespace: Mapping[str, Any], names: Iterable[str], models: tuple[type, ...]
) -> dict[str, int]:
    """The weights' checksum of each Keras model among ``names``."""
    if not models:
        return {}
    return {
        name: _checksum(namespace[name])
        for name in names
        if isinstance(namespace.get(name), models)
    }


def changed(namespace: Mapping[str, Any], before: Mapping[str, int]) -> list[str]:
    """The names whose model is still there, with other weights than before the cell."""
    return [
        name
        for name, checksum in before.items()
        if name in namespace and _checksum(namespace[name]) != checksum
    ]


def _checksum(model: Any) -> int:
    import numpy as np

    total = 0
    for weight in model.weights:  # bytes, whatever the dtype (bfloat16 has no buffer format)
        total = zlib.crc32(np.ascontiguousarray(weight.numpy()).view(np.uint8).data, total)
    return total
