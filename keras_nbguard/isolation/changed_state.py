"""The state of the Keras objects an isolated cell is sent, other than models: there as here
before the cell, and here as there after it.

Keras 3 pickles a metric without its state (and an optimizer without its slots): the child's
copy of a metric the notebook had counted with started at zero, and a metric the cell made
came back at zero. Each metric's values travel beside it: into the child (``sent_state``, set
on the copy before the cell by ``restore_sent``) and back (``metric_state``).

keras.io's guide to customizing ``fit()`` keeps ``loss_tracker = keras.metrics.Mean()`` at the
notebook's top level and updates it in ``train_step``; a layer built in a setup cell trains
inside the cell's model. A plain run leaves the notebook's metric counted and its layer
trained; isolated, both changed in the child only. The child fingerprints each such object
before the cell and sends back the values of those that changed (``changed``), which the kernel
assigns into its own objects (``take_on``): whatever else holds them sees them, as after a
plain run. A layer the cell built goes back whole. Models come back whole (``changed_models``).

The same holds inside the lists, tuples and dicts a name holds (``trackers = {"loss":
keras.metrics.Mean()}``, ``blocks = [layers.Dense(8)]``): each Keras object there goes by the
path a user would type (``trackers['loss']``), found the same way here and there. A container
the cell changes goes back whole, its metrics' counts beside it; a layer first built there
goes back whole, and the notebook's own layer is built as it was there and takes its weights
(``built_like``; else the copy goes into its place in the notebook's list or dict, and one a
tuple holds stays, said). A
path holding another object after the cell, and one object whose copies under two keys changed
differently, take nothing.

Variables are matched by their own names, shapes and dtypes, never by position alone; a name
whose object can't be read or matched is left as it is, and said.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
import weakref
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

KERASES = ("keras", "tf_keras")
CONTAINERS = (list, tuple, dict)
PATH_DEPTH = 3  # containers inside containers looked into
PATH_ITEMS = 1_000  # items looked at under one name: a long list of numbers is not walked

Signature = tuple[tuple[str, tuple[int, ...], str], ...]  # each variable's name, shape, dtype
Fingerprint = tuple[Signature, int, Any]  # and their checksum, and a weak reference to the object


def variables_of(value: Any) -> list[Any] | None:
    """A Keras metric's, layer's or optimizer's variables (empty: not built yet), a seed
    generator's state; None for anything else, or what can't be listed."""
    if not _is_keras(value):
        return None
    try:
        found = getattr(value, "variables", None)
        if callable(found):  # tf_keras' optimizers: a method
            found = found()
        if found is None and hasattr(value, "state"):  # Keras 3's SeedGenerator
            found = [value.state]
        return None if found is None else list(found)
    except Exception:
        return None


def signature(variables: Iterable[Any]) -> Signature:
    """What must agree for values to go from one copy to the other: each variable's own name
    (``total``, ``kernel``: a layer's path differs between processes), shape and dtype."""
    return tuple(
        (_own_name(v), tuple(int(d) for d in v.shape), str(getattr(v.dtype, "name", v.dtype)))
        for v in variables
    )


def checksum(variables: Iterable[Any]) -> int:
    """A CRC of the variables' bytes, whatever their dtype (bfloat16 has no buffer format)."""
    import numpy as np

    total = 0
    for variable in variables:
        total = zlib.crc32(np.ascontiguousarray(variable.numpy()).view(np.uint8).data, total)
    return total


def sent_state(
    namespace: Mapping[str, Any], names: Iterable[str]
) -> dict[str, tuple[Signature, list[Any]] | None]:
    """In the kernel: the values of each Keras metric among ``names``, for its copy there
    (None: unreadable; its copy counts from zero there, and is not taken back)."""
    return {
        key: _state(value) for key, value in keras_objects(namespace, names) if _is_metric(value)
    }


def metric_state(
    namespace: Mapping[str, Any], names: Iterable[str]
) -> dict[str, tuple[Signature, list[Any]]]:
    """In the child: the values of each metric among ``names`` going back whole, pickled
    without them (a cell's ``m = keras.metrics.Mean(); m.update_state(...)``: 0.0 here)."""
    found = {}
    for key, value in keras_objects(namespace, names):
        state = _state(value) if _is_metric(value) else None
        if state is not None:
            found[key] = state
    return found


def restore_sent(
    namespace: Mapping[str, Any], states: Mapping[str, tuple[Signature, list[Any]] | None]
) -> dict[str, str]:
    """In the child: each metric's copy given the kernel's values; why not, by key."""
    found = objects_at(namespace, states)
    failed = {}
    for key, state in states.items():
        why = "they could not be read" if state is None else _assign(found.get(key), *state)
        if why:
            failed[key] = why
    return failed


def counted_from_zero(unset: Mapping[str, str], going_back: Iterable[str]) -> dict[str, str]:
    """What the run's line says of each metric ``restore_sent`` could not set: its copy counted
    from zero there, which comes back only with a name or container going back whole."""
    going = set(going_back)
    return {
        key: f"its counts could not be set there ({why}): it counted from zero there, and "
        + ("came back with those counts" if _root(key) in going else "the notebook's keeps its own")
        for key, why in unset.items()
    }


def fingerprints(
    namespace: Mapping[str, Any],
    names: Iterable[str],
    models: tuple[type, ...],
    skip: Iterable[str] = (),
) -> dict[str, Fingerprint]:
    """In the child, before the cell: each Keras object among ``names`` and inside their
    containers (a model excepted; ``skip``: keys not to compare), by its variables' signature
    and checksum, with a weak reference to the object (a container reordered there holds
    others at its paths); an unbuilt layer too (no variables)."""
    found = {}
    skipped = set(skip)
    for name, value in keras_objects(namespace, names):
        if name in skipped or not _is_keras(value) or (models and isinstance(value, models)):
            continue
        variables = variables_of(value)
        if variables is None:
            continue
        try:
            found[name] = (signature(variables), checksum(variables), _weak(value))
        except Exception:  # a variable that can't be read (strings, not initialized): left
            continue
    return found


def changed(
    namespace: Mapping[str, Any], before: Mapping[str, Fingerprint], bound: Iterable[str]
) -> tuple[dict[str, tuple[Signature, list[Any]]], list[str], dict[str, str]]:
    """In the child, after the cell: the values of each object whose variables changed; the
    layers the cell built (other variables now), which go back whole (one in a list or dict
    to its place there: ``put_in_place``); and why others stay
    (an optimizer built for the cell's model). ``bound``: the names going back anyway (a
    container among them takes its metrics' counts along: ``metric_state``)."""
    going = set(bound)
    compared = {key: was for key, was in before.items() if _root(key) not in going}
    located = _located(namespace, compared)
    now_at = {key: value for key, (value, _, _) in located.items()}
    values: dict[str, tuple[Signature, list[Any]]] = {}
    whole: list[str] = []
    stay: dict[str, str] = {}
    for name, (was, crc, ref) in compared.items():
        if name not in now_at:
            continue
        value = ref()
        if now_at[name] is not value:  # a container reordered, a name rebound, unseen as such
            where = "the notebook's container" if name != _root(name) else "the notebook's"
            stay[name] = f"another object is there now: {where} is as it was"
            continue
        try:
            variables = variables_of(value) or []
            now = signature(variables)
            if now == was:
                if checksum(variables) != crc:
                    values[name] = (now, [variable.numpy() for variable in variables])
            elif _is_layer(value):  # the kernel builds its own alike (or takes this one)
                whole.append(name)
            else:
                stay[name] = (  # an optimizer built for the cell's model, a lazy metric
                    f"its variables were made there, in the cell: the notebook's "
                    f"{type(value).__name__} is as it was"
                )
        except Exception:  # unreadable now: the notebook's keeps its values
            continue
    return values, whole, stay


def take_on(
    namespace: Mapping[str, Any], states: Mapping[str, tuple[Signature, list[Any]]]
) -> dict[str, str]:
    """In the kernel: each key's object takes the values its copy had after the cell; why
    not, by key, where its variables here don't match (the object keeps its own then). One
    object the cell reached by two keys (``kept`` and ``trackers['loss']``) had two copies
    there: it takes their values when they agree, and neither's when they don't."""
    found = objects_at(namespace, states)
    by_object: dict[int, list[str]] = {}
    for key in states:
        if found.get(key) is not None:
            by_object.setdefault(id(found[key]), []).append(key)
    failed = {}
    for key, state in states.items():
        keys = by_object.get(id(found.get(key)), [key])
        if len(keys) > 1 and not _agree(states[k][1] for k in keys):
            others = ", ".join(k for k in keys if k != key)
            failed[key] = f"changed there as {others} too, differently: it keeps its values"
            continue
        if key != keys[0]:  # the same values, taken once (with the first key)
            continue
        why = _assign(found.get(key), *state)
        for each in keys if why else ():
            failed[each] = f"changed there, but {why}: it keeps its values"
    return failed


def counts_back(
    bound: Mapping[str, Any], states: Mapping[str, tuple[Signature, list[Any]]]
) -> dict[str, str]:
    """In the kernel: each metric that came back whole given the counts it had there."""
    found = objects_at(bound, states)
    failed = {}
    for key, state in states.items():
        why = _assign(found.get(key), *state) if _root(key) in bound else ""
        if why:
            failed[key] = f"came back without its counts ({why})"
    return failed


def keras_objects(namespace: Mapping[str, Any], names: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """Each name's value under its name, then the Keras objects inside its lists, tuples and
    dicts under the path a user would type (``trackers['loss']``, ``blocks[0]``)."""
    for name in names:
        if name in namespace:
            value = namespace[name]
            yield name, value
            for here, item, _, _ in _inside(value, name, 1, [PATH_ITEMS]):
                yield here, item


def _inside(
    value: Any, path: str, depth: int, budget: list[int]
) -> Iterator[tuple[str, Any, Any, Any]]:
    """(path, Keras object, the container holding it, its key or index there)."""
    try:  # (a copy of what the budget allows: a thread of the user's may change it meanwhile)
        if depth > PATH_DEPTH or not isinstance(value, CONTAINERS):
            return
        items = value.items() if isinstance(value, dict) else enumerate(value)
        taken = list(itertools.islice(items, max(budget[0], 0)))
        budget[0] -= len(taken)
        found = []
        for key, item in taken:
            if isinstance(key, bool) or not isinstance(key, (str, int)):  # a path one can type
                continue
            found.append((f"{path}[{key!r}]", item, key))
    except Exception:  # a container of the user's that can't be read so: left as it is
        return
    for here, item, key in found:
        if _is_keras(item):
            yield here, item, value, key
        else:
            yield from _inside(item, here, depth + 1, budget)


def objects_at(namespace: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The object at each of ``keys`` that is there now: a name's, or one at a path into a
    name's containers (each name walked once, however many of its paths are asked for)."""
    return {key: value for key, (value, _, _) in _located(namespace, keys).items()}


def put_in_place(namespace: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, str]:
    """In the kernel: each path's object replaced by the value that came back for it (a layer
    first built there), in the notebook's own list or dict; why not, by path. Two paths to one
    place (``heads['out']``, ``cfg['heads']['out']``: two copies there) that came back as two
    objects put neither."""
    slots = _located(namespace, values)
    by_slot: dict[tuple[int, Any], list[str]] = {}
    for key in values:
        if key in slots:
            _, container, step = slots[key]
            by_slot.setdefault((id(container), step), []).append(key)
    failed = {}
    for key, value in values.items():
        if key not in slots:
            failed[key] = "came back, but the notebook's container no longer holds it there"
            continue
        _, container, step = slots[key]
        others = [k for k in by_slot[(id(container), step)] if k != key]
        if any(values[other] is not value for other in others):
            failed[key] = (
                f"came back built there as {', '.join(others)} too, apart: the notebook's is as "
                f"it was"
            )
            continue
        try:
            if container[step] is not value:  # (the notebook's own, built alike: there already)
                container[step] = value
        except Exception as exc:  # a tuple's
            failed[key] = f"came back, but could not be put in its place ({exc})"
    return failed


def built_like(target: Any, built: Any) -> str | None:
    """In the kernel: the notebook's own unbuilt layer ``target`` built as its copy ``built``
    was there, with the weights it has now, so that whatever holds it sees it built and
    trained, as after a plain run: "" when done. None where it isn't tried (another class,
    built already, a layer of layers without a build() of its own, which Keras' build can't
    repeat): the copy that came back is used, as before. Else why its weights could not be
    set on it, built."""
    try:
        if type(target) is not type(built) or target.built or not built.built:
            return None
        base: Any = next(cls for cls in type(built).__mro__ if cls.__name__ == "Layer")
        layers = built._flatten_layers(include_self=False, recursive=False)
        if type(built).build is base.build and next(iter(layers), None) is not None:
            return None  # no build() of its own: its sublayers are built by its call
        variables = variables_of(built) or []
        state = signature(variables), [variable.numpy() for variable in variables]
        with warnings.catch_warnings():  # (Keras' notes on a build are not the user's)
            warnings.simplefilter("ignore")
            target.build_from_config(built.get_build_config())
    except Exception:
        return None
    why = _assign(target, *state)
    if not why and not target.built:  # tf_keras: a build() that skips super().build()
        target.built = True
    return why


def aliases(objects: Mapping[str, Any]) -> dict[str, str]:
    """Each key whose object a key before it holds too, to that key: one object, sent once
    (``heads['a']`` and ``heads['b']``, one layer, stay one layer)."""
    first: dict[int, str] = {}
    same = {}
    for key, value in objects.items():
        same_as = first.setdefault(id(value), key)
        if same_as != key:
            same[key] = same_as
    return same


def is_path(key: str) -> bool:
    return _root(key) != key


def _located(namespace: Mapping[str, Any], keys: Iterable[str]) -> dict[str, tuple[Any, Any, Any]]:
    """Each key's object now, with the container holding it and its step there (None, None: a
    name's own value)."""
    wanted = list(keys)
    found = {key: (namespace[key], None, None) for key in wanted if key in namespace}
    paths = {key for key in wanted if key not in found}
    for root in {_root(key) for key in paths if _root(key) in namespace}:
        for here, item, container, step in _inside(namespace[root], root, 1, [PATH_ITEMS]):
            if here in paths:
                found[here] = (item, container, step)
    return found


def _root(key: str) -> str:
    return key.split("[", 1)[0]


def _agree(values_of_each: Iterable[list[Any]]) -> bool:
    """Whether each copy's values are the same, bit for bit (a NaN mean equals itself)."""
    import numpy as np

    def bits(values: list[Any]) -> list[tuple[str, tuple[int, ...], bytes]]:
        arrays = [np.asarray(value) for value in values]
        return [(str(a.dtype), a.shape, a.tobytes()) for a in arrays]

    first, *rest = [bits(values) for values in values_of_each]
    return all(each == first for each in rest)


def _is_keras(value: Any) -> bool:
    try:
        return any(
            str(getattr(cls, "__module__", "")).split(".")[0] in KERASES
            for cls in type(value).__mro__
        )
    except Exception:  # an object of the user's that can't say what it is: not one of Keras'
        return False


def _weak(value: Any) -> Any:
    """A weak reference (a fingerprint must not keep what the cell deletes), or a strong one."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def _state(value: Any) -> tuple[Signature, list[Any]] | None:
    try:
        variables = variables_of(value) or []
        return signature(variables), [variable.numpy() for variable in variables]
    except Exception:
        return None


def _assign(target: Any, expected: Signature, values: list[Any]) -> str:
    """All of ``values`` into ``target``'s variables, or none: why not ("" when done)."""
    variables = variables_of(target)
    if variables is None:
        return "it is not the Keras object it was"
    try:
        if signature(variables) != expected:
            return "its variables differ"
        earlier = [variable.numpy() for variable in variables]
    except Exception as exc:
        return f"its variables could not be read ({exc})"
    try:
        for variable, value in zip(variables, values, strict=True):
            variable.assign(value)
    except Exception as exc:
        for variable, value in zip(variables, earlier, strict=True):  # all or none
            with contextlib.suppress(Exception):
                variable.assign(value)
        return f"its values could not be set ({exc})"
    return ""


def _own_name(variable: Any) -> str:
    name = str(getattr(variable, "name", ""))  # tf_keras: "dense/kernel:0"; Keras 3: "kernel"
    return name.rsplit("/", 1)[-1].split(":", 1)[0]


def _is_metric(value: Any) -> bool:
    return variables_of(value) is not None and all(
        callable(getattr(value, method, None)) for method in ("update_state", "result")
    )


def _is_layer(value: Any) -> bool:
    return any(cls.__name__ == "Layer" for cls in type(value).__mro__) and not _is_metric(value)
