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

Where = tuple[str, tuple[str, ...]]  # a model's name, and the layer names leading to a layer


def containers(models: dict[str, Any]) -> dict[str, Where]:
    """In the child: for each model (by name) that is a layer of another one sent back, the
    outermost such model and the layer names leading to it there (a loaded model keeps its
    layers' names, where tf_keras' flattened list of them can come back in another order)."""
    inside: dict[str, Where] = {}
    for outer_name, outer in models.items():
        for name, model in models.items():
            path = _path(outer, model) if name != outer_name else None
            known = inside.get(name)
            if path and (known is None or _path(outer, models[known[0]])):
                inside[name] = (outer_name, path)
    return inside


def links(models: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """In the child, for each model sent back: ``inside``, where it lies in another one, or
    ``shares``, where each of its layers that another one holds lies there (keras.io's
    Sequential guide: ``feature_extractor`` built on ``initial_model``'s layers). The larger
    model keeps its layers; the smaller is rebuilt on them in the kernel."""
    inside = containers(models)
    by_size = sorted(models, key=lambda n: -len(list(models[n]._flatten_layers())))
    owners: list[str] = []
    found: dict[str, dict[str, Any]] = {name: {"inside": where} for name, where in inside.items()}
    for name in by_size:
        if name in inside:
            continue
        shares = {}
        for layer in models[name].layers:
            if type(layer).__name__ == "InputLayer" or any(layer is m for m in models.values()):
                continue
            where = next(((o, p) for o in owners if (p := _path(models[o], layer))), None)
            if where is not None:
                shares[layer.name] = where
        if shares:
            found[name] = {"shares": shares}
        else:
            owners.append(name)
    return found


def rejoin(models: dict[str, Any], linked: dict[str, dict[str, Any]]) -> dict[str, str]:
    """In the kernel: ``models[name]`` becomes its container's layer, or is rebuilt on the layers
    it shares, wherever the training state it had on its own fits; what kept a model apart,
    by name (the loaded copy stays then, and the run's line says so)."""
    kept_apart: dict[str, str] = {}
    inside = {name: link["inside"] for name, link in linked.items() if "inside" in link}
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
    for name, link in linked.items():
        if "shares" in link and name in models:
            problem = _rebuilt(models, name, link["shares"])
            if problem:
                kept_apart[name] = f"its own copy of the layers it shares: {problem}"
    return kept_apart


def _rebuilt(models: dict[str, Any], name: str, shares: dict[str, Where]) -> str:
    """``models[name]`` made again with the layers another model holds (Keras' ``clone_model``,
    each shared layer given as itself), compiled as it was."""
    import importlib

    own = models[name]
    targets = {}
    for layer_name, (owner, path) in shares.items():
        target, mine = _at(models.get(owner), path), _at(own, (layer_name,))
        problem = _why_not(target, mine)
        if problem:
            return problem
        targets[layer_name] = target
    package = importlib.import_module(type(own).__module__.split(".")[0])
    try:
        again = package.models.clone_model(
            own, clone_function=lambda layer: targets.get(layer.name, layer)
        )
    except Exception as exc:  # a subclassed model: Keras clones only Functional and Sequential
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"Keras could not rebuild it ({first})"
    problem = _take_training_state(again, own)
    if not problem:
        models[name] = again
    return problem


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
