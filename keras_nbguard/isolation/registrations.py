"""The notebook's Keras registrations, made again in an isolated run's process (and those its
cell made, back in the kernel).

keras.io's saving guide registers a layer and a function from a notebook cell
(``@keras.saving.register_keras_serializable(package="MyLayers")``) and then, in the cell the user
re-runs, saves a model of them and loads it back with ``keras.models.load_model``. In a fresh
process the decorator never ran: the classes and functions arrive by value (inside the
``get_model`` that uses them), unregistered, so the child saved ``CustomLayer`` under its bare
name and could not load it ("Could not locate class 'CustomLayer'"): the cell failed isolated
and ran in the kernel.

So the job carries every registration whose object the notebook defined (``__main__``), and the
child makes it again before the cell, as the decorator would have (and a model sent in is loaded
with them in scope, by their registered names). Classes keep their identity
across pickles (cloudpickle tracks them); a function does not, so each copy of a registered
function that the sent names reach (``get_model``'s globals) is registered under the same name.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

# where each Keras keeps its registry: (module, name -> object, object -> name)
REGISTRIES = {
    "keras": (
        "keras.src.saving.object_registration",
        "GLOBAL_CUSTOM_OBJECTS",
        "GLOBAL_CUSTOM_NAMES",
    ),
    "tf_keras": (
        "tf_keras.src.saving.object_registration",
        "_GLOBAL_CUSTOM_OBJECTS",
        "_GLOBAL_CUSTOM_NAMES",
    ),
}


def own() -> dict[str, dict[str, Any]]:
    """The registrations whose object the notebook defined, by Keras package."""
    found: dict[str, dict[str, Any]] = {}
    for package in REGISTRIES:
        objects = _registry(package, 1)
        if objects is None:
            continue
        mine = {
            name: obj
            for name, obj in list(objects.items())
            if getattr(obj, "__module__", None) == "__main__"
        }
        if mine:
            found[package] = mine
    return found


def carried() -> dict[str, bytes] | None:
    """``own()``, pickled by value, by package: None when there are none (the usual case)."""
    found = own()
    if not found:
        return None
    try:
        import cloudpickle

        return {package: cloudpickle.dumps(objects) for package, objects in found.items()}
    except Exception:  # what can't be pickled is not registered there: as before
        return None


def take_on(data: dict[str, bytes] | None, *, replace: bool = True) -> dict[str, dict[str, Any]]:
    """Register here what ``carried`` packed, in each Keras the names sent in have imported (a
    cell that uses none, or imports it itself, pays no import, not even the unpickling's: a
    model sent in finds them by name anyway, ``sending.classes``). Returns what it unpacked,
    for ``register_copies`` and the loads. ``replace=False`` (the kernel, taking the child's
    back): only names not registered here yet, those the isolated cell registered."""
    unpacked: dict[str, dict[str, Any]] = {}
    for package, pickled in (data or {}).items():
        if package not in sys.modules:
            continue
        with contextlib.suppress(Exception):
            import cloudpickle

            objects = cloudpickle.loads(pickled)
            known = _registry(package, 1)
            for name, obj in objects.items():
                if replace or name not in known:
                    _register(package, name, obj)
            unpacked[package] = objects
    return unpacked


def register_copies(found: Mapping[str, Mapping[str, Any]], namespace: Mapping[str, Any]) -> None:
    """Register under its name each copy of a registered function that the namespace's
    functions reach: each sent function brought its own copy of those it calls."""
    wanted = {
        _identity(obj): (package, name)
        for package, objects in found.items()
        for name, obj in objects.items()
        if isinstance(obj, types.FunctionType)
    }
    if not wanted:
        return
    for function in _functions(namespace.values()):
        hit = wanted.get(_identity(function))
        if hit is not None:
            with contextlib.suppress(Exception):
                _register(*hit, function, names_only=True)


def _functions(values: Iterable[Any]) -> Iterable[types.FunctionType]:
    """The notebook's functions among ``values``, and those their globals hold (one level)."""
    for value in list(values):
        if isinstance(value, types.FunctionType) and value.__module__ == "__main__":
            yield value
            for held in list(value.__globals__.values()):
                if isinstance(held, types.FunctionType) and held.__module__ == "__main__":
                    yield held


def _identity(function: types.FunctionType) -> tuple[str, bytes]:
    return function.__qualname__, function.__code__.co_code


def _registry(package: str, which: int) -> Any:
    module = sys.modules.get(REGISTRIES[package][0])
    return getattr(module, REGISTRIES[package][which], None) if module is not None else None


def _register(package: str, name: str, obj: Any, *, names_only: bool = False) -> None:
    """What ``register_keras_serializable`` does: the name finds the object when loading, the
    object gives its name when saving. A copy only gives the name (the name finds the first)."""
    if not names_only:
        _registry(package, 1)[name] = obj
    _registry(package, 2)[obj] = name
