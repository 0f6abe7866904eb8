"""What a model keeps on itself — its ``__dict__``, attribute containers, the closures Keras
stores on it — found by a one-level look at the model: such parts hold the model, but only as the
model's own, so the walk never follows them (and never pays a heap scan for them)."""

from __future__ import annotations

import gc
import types
from typing import Any

from keras_nbguard.models.frameworks import (
    CONTAINERS,
    FRAMEWORKS,
    instance_dict,
    is_keras_nesting,
    package_of,
)


def mark_own_parts(
    model: Any,
    owner: dict[int, int],
    held: dict[int, int],
    class_ids: set[int],
    internal: set[int],
    callback: tuple[type, ...],
    route: dict[int, Any] | None = None,
) -> None:
    """Mark what a model keeps on itself as the model's own: its ``__dict__``, attribute
    containers, the functions Keras stores on it (closures over the model) with their cells and
    wrapped methods, and the containers inside framework attributes (TF's dict wrappers). Count
    the references its attributes make (``held``); note the models Keras nests in it. Layers,
    weights and tensors are never entered. ``route``: each part -> what holds it, up to the
    model, so that a path through a part reads as one the user can type."""
    attrs = instance_dict(model)
    if not isinstance(attrs, dict):
        return
    mine = id(model)
    way: dict[int, Any] = route if route is not None else {}

    def via(part: Any, parent: Any) -> None:
        way.setdefault(id(part), parent)

    owner[id(attrs)] = mine
    via(attrs, model)
    functions: list[Any] = []
    boxes: list[Any] = []  # containers and framework helpers: entered for containers only
    items = [(name, value, attrs) for name, value in attrs.items()]
    modules = attrs.get("_modules")  # on torch, a Layer is a Module: sub-layers live in here
    if isinstance(modules, dict):
        items += [(name, value, modules) for name, value in modules.items()]
    for name, value, holder in items:
        held[id(value)] = held.get(id(value), 0) + 1
        if type(value) is not types.FunctionType and id(type(value)) not in class_ids:
            via(value, holder)
        if id(type(value)) in class_ids:
            if is_keras_nesting(model, name):
                internal.add(id(value))  # e.g. Sequential._functional: part of the Sequential
        elif type(value) is types.FunctionType:
            via(value, holder)
            functions.append(value)
        elif type(value) is types.MethodType:
            owner[id(value)] = mine
        elif issubclass(type(value), CONTAINERS) or (
            package_of(type(value)) in FRAMEWORKS and not isinstance(value, callback)
        ):
            boxes.append(value)  # e.g. TF's _DictWrapper, which poses as a dict
    for _ in range(3):
        inner_boxes: list[Any] = []
        for box in boxes:
            if id(box) in owner:
                continue
            owner[id(box)] = mine
            if issubclass(type(box), CONTAINERS) and len(box) > 1000:
                continue
            for part in gc.get_referents(box):
                if issubclass(type(part), CONTAINERS):
                    via(part, box)
                    inner_boxes.append(part)
        boxes = inner_boxes
    owner.update((id(box), mine) for box in boxes)
    seen: set[int] = set()
    while functions and len(seen) < 64:
        func = functions.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        parts = [func, func.__dict__, func.__closure__, *(func.__closure__ or ())]
        via(func.__dict__, func)
        via(func.__closure__, func)
        inner = [(func.__dict__.get("__wrapped__"), func.__dict__)]
        for cell in func.__closure__ or ():
            via(cell, func.__closure__)
            try:
                inner.append((cell.cell_contents, cell))
            except ValueError:
                continue
        for value, holder in inner:
            if value is not None and id(type(value)) not in class_ids:
                via(value, holder)
            if type(value) is types.FunctionType:
                functions.append(value)
            elif type(value) is types.MethodType and value.__self__ is model:
                parts.append(value)
            elif package_of(type(value)) in FRAMEWORKS and id(type(value)) not in class_ids:
                parts.append(value)  # a tf.function: what it wraps is the model's too
                functions.extend(
                    f for f in gc.get_referents(value) if type(f) is types.FunctionType
                )
        for part in parts:
            if part is not None:
                owner[id(part)] = mine
