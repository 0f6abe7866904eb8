"""The Keras objects sent in, other than models, whose variables the cell changed without naming
them: in the child, their values after the cell; in the kernel, those values put into the
notebook's own objects.

keras.io's guide to customizing ``fit()`` keeps ``loss_tracker = keras.metrics.Mean()`` at the
notebook's top level and updates it in ``train_step``; a layer built in a setup cell trains
inside the cell's model. A plain run leaves the notebook's metric counted and its layer trained;
isolated, both changed in the child only, and the notebook's kept their old values. Assigned in
place, whatever else holds them (a model's ``metrics``, another model) sees what a plain run
leaves. Models come back whole instead (``changed_models``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import Any

KERASES = ("keras", "tf_keras")


def variables_of(value: Any) -> list[Any]:
    """A Keras metric's, layer's or optimizer's variables, a seed generator's state (an empty
    list for anything else)."""
    if not any(cls.__module__.split(".")[0] in KERASES for cls in type(value).__mro__):
        return []
    try:
        found = getattr(value, "variables", None)
        if callable(found):  # tf_keras' optimizers: a method
            found = found()
        if found is None and hasattr(value, "state"):  # Keras 3's SeedGenerator
            found = [value.state]
        return list(found or [])
    except Exception:  # a layer whose variables can't be listed yet: nothing to compare
        return []


def checksum(variables: Iterable[Any]) -> int:
    """A CRC of the variables' bytes, whatever their dtype (bfloat16 has no buffer format)."""
    import numpy as np

    total = 0
    for variable in variables:
        total = zlib.crc32(np.ascontiguousarray(variable.numpy()).view(np.uint8).data, total)
    return total


def fingerprints(
    namespace: Mapping[str, Any], names: Iterable[str], models: tuple[type, ...]
) -> dict[str, tuple[int, int]]:
    """In the child, before the cell: for each Keras object among ``names`` that holds
    variables (a model excepted), how many and their checksum."""
    found = {}
    for name in names:
        value = namespace.get(name)
        if value is None or (models and isinstance(value, models)):
            continue
        variables = variables_of(value)
        if variables:
            found[name] = (len(variables), checksum(variables))
    return found


def changed(
    namespace: Mapping[str, Any], before: Mapping[str, tuple[int, int]], bound: Iterable[str]
) -> tuple[dict[str, list[Any]], list[str]]:
    """In the child, after the cell: the values of each object's variables where they changed,
    and the names whose object has other variables now (a layer built by the cell), which go
    back whole. ``bound``: the names going back anyway."""
    import numpy as np

    going = set(bound)
    values: dict[str, list[Any]] = {}
    rebuilt: list[str] = []
    for name, (count, was) in before.items():
        if name in going or name not in namespace:
            continue
        variables = variables_of(namespace[name])
        if len(variables) != count:
            rebuilt.append(name)
        elif checksum(variables) != was:
            values[name] = [np.asarray(variable.numpy()) for variable in variables]
    return values, rebuilt


def take_on(namespace: Mapping[str, Any], states: Mapping[str, list[Any]]) -> dict[str, str]:
    """In the kernel: each name's object takes the values its copy had after the cell; why not,
    by name, where it can't (the notebook rebound the name, or its variables differ)."""
    failed = {}
    for name, values in states.items():
        variables = variables_of(namespace.get(name))
        shapes = [tuple(variable.shape) for variable in variables]
        if shapes != [tuple(value.shape) for value in values]:
            failed[name] = "changed there, but its variables here differ: it keeps its values"
            continue
        try:
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)
        except Exception as exc:
            failed[name] = f"changed there, but its values could not be set here ({exc})"
    return failed
