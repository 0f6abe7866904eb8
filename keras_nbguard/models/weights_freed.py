"""How many bytes of weights, and of their optimizers' state, releasing some models really freed.

A model's weights are not its own when it shares layers: a subclassed GAN built on the setup
cell's ``generator`` and ``discriminator``, a head on a base model. Releasing the GAN frees none
of their weights, so the ``released`` line must not claim them. Counted here: the released models'
variables, each once, less those of layers still bound to your names, and — once a full gc has run
since — less any variable still alive (weakly referenced: nothing here keeps one). Their
optimizers' state likewise, less an optimizer bound to your names or a kept model's (the GAN's two
Adams, made anew each run, go with it: 10.8 MiB where its weights are 0 B of its own).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from keras_nbguard.backends import PACKAGES
from keras_nbguard.models.frameworks import package_of
from keras_nbguard.models.report import count_bytes, is_optimizer, optimizers

WIDE = 1000  # a container of yours with more items than this is not searched for layers


class FreedWeights:
    def __init__(self, user_ns: Mapping[str, Any], going: set[int]) -> None:
        yours = [layer for layer in _your_layers(user_ns) if id(layer) not in going]
        self._held = {id(v) for layer in yours for v in _weights(layer)}
        # an optimizer of yours (``opt = Adam()`` compiled into every run's model), or of a
        # model you keep, keeps its state
        kept = [*_your_optimizers(user_ns), *(o for layer in yours for o in optimizers(layer))]
        self._held_state = {id(v) for o in kept for v in _variables(o)}
        self._vars: dict[int, tuple[weakref.ref[Any] | None, int | None, bool]] = {}
        self._state: dict[int, tuple[weakref.ref[Any] | None, int | None, bool]] = {}
        self._collections = _full_collections()

    def add(self, model: Any) -> None:
        """Count ``model``'s variables and its optimizers' (each once across models)."""
        _add(self._vars, _weights(model), self._held)
        _add(self._state, [v for o in optimizers(model) for v in _variables(o)], self._held_state)

    def freed_bytes(self) -> int | None:
        """Bytes of the variables freed (None: a size unknown)."""
        return self._freed(self._vars)

    def freed_optimizer_bytes(self) -> int | None:
        """Bytes of the optimizers' state freed (None: a size unknown)."""
        return self._freed(self._state)

    def _freed(
        self, variables: dict[int, tuple[weakref.ref[Any] | None, int | None, bool]]
    ) -> int | None:
        collected = _full_collections() > self._collections
        total = 0
        for ref, nbytes, held in variables.values():
            if held or (collected and ref is not None and ref() is not None):
                continue  # still yours, or alive after a full collection: not freed
            if nbytes is None:
                return None
            total += nbytes
        return total


def _add(
    counted: dict[int, tuple[weakref.ref[Any] | None, int | None, bool]],
    variables: list[Any],
    held: set[int],
) -> None:
    for variable in variables:
        if id(variable) in counted:
            continue
        try:
            ref: weakref.ref[Any] | None = weakref.ref(variable)
        except TypeError:
            ref = None
        counted[id(variable)] = (ref, count_bytes([variable]), id(variable) in held)


def _variables(optimizer: Any) -> list[Any]:
    try:
        return list(optimizer.variables)
    except Exception:
        return []


def _your_optimizers(user_ns: Mapping[str, Any]) -> Iterator[Any]:
    """Optimizers bound to your names (``opt = keras.optimizers.Adam()`` in a setup cell)."""
    for name, value in list(user_ns.items()):
        if not name.startswith("_") and is_optimizer(value):
            yield value


def _full_collections() -> int:
    return int(gc.get_stats()[-1].get("collections", 0))


def _weights(layer: Any) -> list[Any]:
    try:
        return list(layer.weights)
    except Exception:
        return []


def _is_layer(value: Any) -> bool:
    if isinstance(value, type):
        return False
    try:
        return any(package_of(c) in PACKAGES for c in type(value).__mro__) and hasattr(
            value, "weights"
        )
    except Exception:
        return False


def _your_layers(user_ns: Mapping[str, Any]) -> Iterator[Any]:
    """Keras layers and models bound to your names, or one level down in a list, tuple or dict."""
    for name, value in list(user_ns.items()):
        if name.startswith("_"):
            continue  # IPython's output caches: what they hold is being released
        if _is_layer(value):
            yield value
        elif isinstance(value, (list, tuple)) and len(value) <= WIDE:
            yield from (v for v in value if _is_layer(v))
        elif isinstance(value, dict) and len(value) <= WIDE:
            yield from (v for v in list(value.values()) if _is_layer(v))
