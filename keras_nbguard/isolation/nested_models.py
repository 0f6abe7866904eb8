"""A model that came back inside another one that came back is that one's layer in the kernel too.

keras.io's transfer learning guide builds ``model`` on ``base_model``; its text classification
example builds ``end_to_end_model`` on ``model``. Each travels in its own Keras file, so each
came back with its own copy of the other: ``base_model.trainable = True`` in the next cell, the
guide's fine-tuning step, no longer reached ``model``. The child says where each model lies in
another (``containers``); the kernel binds the name to that layer and, where the container's
file did not bring them (tf_keras), gives it the compiled loss and optimizer slots of the model's
own file (``rejoin``).
"""

from __future__ import annotations

from typing import Any


def containers(models: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """In the child: for each model (by name) that is a layer of another one sent back, the
    outermost such model and the layer names leading to it there (a loaded model keeps its
    layers' names, where tf_keras' flattened list of them can come back in another order)."""
    inside: dict[str, tuple[str, tuple[str, ...]]] = {}
    for outer_name, outer in models.items():
        for name, model in models.items():
            path = _path(outer, model) if name != outer_name else None
            known = inside.get(name)
            if path and (known is None or _path(outer, models[known[0]])):
                inside[name] = (outer_name, path)
    return inside


def rejoin(
    models: dict[str, Any], inside: dict[str, tuple[str, tuple[str, ...]]]
) -> dict[str, str]:
    """In the kernel: ``models[name]`` becomes its container's layer wherever the training state
    it had on its own fits that layer; what kept a model apart, by name (the loaded copy
    stays then, and the run's line says so)."""
    kept_apart: dict[str, str] = {}
    for name, (outer_name, path) in inside.items():
        outer, own = models.get(outer_name), models.get(name)
        if outer is None or own is None:
            continue
        layer = _at(outer, path)
        problem = _why_not(layer, own) or _take_training_state(layer, own)
        if problem:
            kept_apart[name] = f"a copy of {outer_name}'s layer, not that layer: {problem}"
        else:
            models[name] = layer
    return kept_apart


def _path(container: Any, target: Any) -> tuple[str, ...]:
    for layer in getattr(container, "layers", ()):
        if layer is target:
            return (layer.name,)
        below = _path(layer, target)
        if below:
            return (layer.name, *below)
    return ()


def _at(container: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        layers = getattr(container, "layers", ())
        container = next((layer for layer in layers if layer.name == name), None)
    return container


def _why_not(layer: Any, own: Any) -> str:
    if layer is None or type(layer).__name__ != type(own).__name__:
        return "its place there holds another layer"
    if [tuple(w.shape) for w in layer.weights] != [tuple(w.shape) for w in own.weights]:
        return "that layer's weights differ in shape"
    return ""


def _take_training_state(layer: Any, own: Any) -> str:
    """Compile ``layer`` as ``own`` was and copy its optimizer's variables (the step count, Adam's
    moments); nothing to do for a model never compiled (the guide's ``base_model``), nor where
    the container's file brought that state already (Keras 3 does; tf_keras does not)."""
    if not _compiled(own):
        return ""
    if _compiled(layer) and _shapes(_optimizer_variables(layer)) == _shapes(
        _optimizer_variables(own)
    ):
        return ""
    try:
        layer.compile_from_config(own.get_compile_config())
        theirs, ours = _optimizer_variables(own), _optimizer_variables(layer)
        if theirs and not ours:  # built when its model is: a layer of a loaded model may not be
            layer.optimizer.build(layer.trainable_variables)
            ours = _optimizer_variables(layer)
        if _shapes(ours) != _shapes(theirs):
            return "its optimizer's state does not fit that layer"
        for target, value in zip(ours, theirs, strict=True):
            target.assign(value)
    except Exception as exc:  # a subclass's own compile(): said, and the copy stays
        return f"its compiled state could not be given to that layer ({exc})"
    return ""


def _optimizer_variables(model: Any) -> list[Any]:
    optimizer = getattr(model, "optimizer", None)
    return list(getattr(optimizer, "variables", None) or [])  # tf_keras: a callable list


def _compiled(model: Any) -> bool:
    return bool(getattr(model, "compiled", False) or getattr(model, "_is_compiled", False))


def _shapes(variables: list[Any]) -> list[tuple[int, ...]]:
    return [tuple(v.shape) for v in variables]
