"""What a model keeps on itself — its ``__dict__``, attribute containers, the closures Keras
stores on it — found by a one-level look at the model: such parts hold the model, but only as the
model's own, so the walk never follows them (and never pays a heap scan for them)."""

from __future__ import annotations

import gc
import types
from typing import Any

from .frameworks import CONTAINERS, FRAMEWORKS, instance_dict, is_keras_nesting, package_of


def mark_own_parts(model: Any, owner: dict[int, int], held: dict[int, int],
                   class_ids: set[int], internal: set[int], callback: tuple[type, ...]) -> None:
    """Mark what a model keeps on itself as the model's own: its ``__dict__``, attribute
    containers, the functions Keras stores on it (closures over the model) with their cells and
    wrapped methods, and the containers inside framework attributes (TF's dict wrappers). Count
    the references its attributes make (``held``); note the models Keras nests in it. Layers,
    weights and tensors are never entered."""
    attrs = instance_dict(model)
    if not isinstance(attrs, dict):
        return
    mine = id(model)
    owner[id(attrs)] = mine
    functions: list[Any] = []
    boxes: list[Any] = []  # containers and framework helpers: entered for containers only
    items = list(attrs.items())
    modules = attrs.get("_modules")  # on torch, a Layer is a Module: sub-layers live in here
    if isinstance(modules, dict):
        items += list(modules.items())
    for name, value in items:
        held[id(value)] = held.get(id(value), 0) + 1
        if id(type(value)) in class_ids:
            if is_keras_nesting(model, name):
                internal.add(id(value))  # e.g. Sequential._functional: part of the Sequential
        elif type(value) is types.FunctionType:
            functions.append(value)
        elif type(value) is types.MethodType:
            owner[id(value)] = mine
        elif issubclass(type(value), CONTAINERS) or (
                package_of(type(value)) in FRAMEWORKS
                and not isinstance(value, callback)):
            boxes.append(value)  # e.g. TF's _DictWrapper, which poses as a dict
    for _ in range(3):
        inner_boxes: list[Any] = []
        for box in boxes:
            if id(box) in owner:
                continue
            owner[id(box)] = mine
            if issubclass(type(box), CONTAINERS) and len(box) > 1000:
                continue
            inner_boxes.extend(part for part in gc.get_referents(box)
                               if issubclass(type(part), CONTAINERS))
        boxes = inner_boxes
    owner.update((id(box), mine) for box in boxes)
    seen: set[int] = set()
    while functions and len(seen) < 64:
        func = functions.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        parts = [func, func.__dict__, func.__closure__, *(func.__closure__ or ())]
        inner = [func.__dict__.get("__wrapped__")]
        for cell in func.__closure__ or ():
            try:
                inner.append(cell.cell_contents)
            except ValueError:
                continue
        for value in inner:
            if type(value) is types.FunctionType:
                functions.append(value)
            elif type(value) is types.MethodType and value.__self__ is model:
                parts.append(value)
            elif package_of(type(value)) in FRAMEWORKS and id(type(value)) not in class_ids:
                parts.append(value)  # a tf.function: what it wraps is the model's too
                functions.extend(f for f in gc.get_referents(value)
                                 if type(f) is types.FunctionType)
        for part in parts:
            if part is not None:
                owner[id(part)] = mine
