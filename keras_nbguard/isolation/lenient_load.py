"""A model the child saved whose layers Keras can't rebuild only because their ``__init__`` takes
no ``**kwargs``, rebuilt here anyway.

Keras saves every layer's ``name``, ``trainable`` and ``dtype`` beside the arguments its
``__init__`` was given, and its ``from_config`` passes them all back: a class of the notebook's
written as keras.io's endpoint layer pattern writes ``LogisticEndpoint.__init__(self,
name=None)`` can be saved and never loaded, by ``keras.models.load_model`` either. Such a class
is made here from the arguments its ``__init__`` does take, then given the name, trainable flag
and dtype policy it was saved with, so the model the cell trained comes back as a plain run
would leave it. Only for those three keys: a config that leaves out an argument ``__init__``
needs, or carries one it does not take, is not guessed at (``unloadable.py`` says why instead).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

# what Keras' base layer puts in every config and takes back as keyword arguments
BASE_KEYS = frozenset({"name", "trainable", "dtype"})


def rebuilt_leniently(classes: list[type]) -> contextlib.AbstractContextManager[None]:
    """While it lasts, ``classes`` are made from their configs leniently (``_lenient_from_config``);
    their subclasses, and every other class, as Keras makes them."""
    return _lenient(classes)


@contextlib.contextmanager
def _lenient(classes: list[type]) -> Iterator[None]:
    saved: dict[type, Any] = {}
    try:
        for cls in classes:
            saved[cls] = vars(cls).get("from_config")
            cls.from_config = _lenient_from_config(cls)  # type: ignore[attr-defined]
        yield
    finally:
        for cls, original in saved.items():  # those patched, even if one of them refused
            if original is None:
                with contextlib.suppress(AttributeError):
                    delattr(cls, "from_config")  # inherited: Keras' own shows through again
            else:
                cls.from_config = original  # type: ignore[attr-defined]


def _lenient_from_config(patched: Any) -> Any:
    """Keras' own ``from_config`` of ``patched``'s bases, given only the base keys its
    ``__init__`` takes (Keras still turns a saved dtype into a policy, revives a functional
    config...); the others set after, as Keras' base layer would have set them in ``__init__``.
    A subclass of ``patched`` is made as Keras makes it."""

    def from_config(cls: Any, config: dict[str, Any]) -> Any:
        keras_own = super(patched, cls).from_config
        if cls is not patched:
            return keras_own(config)
        left_out = BASE_KEYS - (takes_base_keys(cls) or set())
        layer = keras_own({k: v for k, v in config.items() if k not in left_out})
        if "name" in left_out and "name" in config:
            _set_name(layer, config["name"])
        if "trainable" in left_out and "trainable" in config:
            # the flag alone, as __init__ sets it: the setter would also set every sublayer's,
            # unfreezing a base model the class's own __init__ froze
            layer._trainable = bool(config["trainable"])
        if "dtype" in left_out and config.get("dtype") is not None:
            _set_dtype(layer, config["dtype"])
        return layer

    return classmethod(from_config)


def takes_base_keys(cls: type) -> set[str] | None:
    """Which of ``BASE_KEYS`` the class's ``__init__`` takes; None where it takes ``**kwargs``
    (Keras' own loading works) or its signature can't be read."""
    try:
        params = inspect.signature(init_of(cls)).parameters
    except (StopIteration, TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {name for name in params if name in BASE_KEYS}


def _set_name(layer: Any, name: str) -> None:
    try:
        layer.name = name  # Keras 3: a plain attribute
    except AttributeError:
        layer._name = name  # Keras 2: a read-only property over it


def _set_dtype(layer: Any, dtype: Any) -> None:
    """The saved policy: a config dict or a name, which both Kerases' setters take."""
    legacy = getattr(layer, "_set_dtype_policy", None)  # Keras 2
    if legacy is not None:
        legacy(dtype)
    else:
        layer.dtype_policy = dtype  # Keras 3


def init_of(cls: type) -> Any:
    """The ``__init__`` the class runs: its own or the nearest base's."""
    return next(vars(klass)["__init__"] for klass in cls.__mro__ if "__init__" in vars(klass))
