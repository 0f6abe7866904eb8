"""Why a model the child saved could not be loaded in the kernel, in one clause with the fix.

Keras nests its loading errors, each with the whole config of the layer it had reached: keras.io's
ViT example brought back 4 KB of dicts in the ``isolated`` row. What the user can act on is which
class of theirs Keras could not rebuild from the file, and why. In code people copy (that ViT
example's ``Patches`` and ``PatchEncoder``) the why is one of two: an ``__init__`` that takes no
``**kwargs`` (Keras passes every layer the ``name``, ``trainable`` and ``dtype`` of its config), or
a ``get_config`` that leaves out an argument ``__init__`` needs. Either fails the user's own
``keras.models.load_model`` the same way, so that is said too."""

from __future__ import annotations

import inspect
import io
import json
import re
import zipfile
from collections.abc import Iterator
from typing import Any

from keras_nbguard.isolation.lenient_load import BASE_KEYS, init_of, takes_base_keys

LONGEST = 300  # characters of an error we could not read better


def why_not_loaded(exc: BaseException, data: bytes, classes: dict[str, Any]) -> str:
    """Why the model saved in ``data`` (the Keras format) did not load, ``classes`` being the
    notebook's: its classes Keras can't rebuild, or else the innermost cause Keras gave."""
    problems = cannot_rebuild(data, classes)
    if problems:
        return (
            f"Keras can't rebuild your classes from the file: {'; '.join(problems)} "
            f"(keras.models.load_model fails on it the same way)"
        )
    return innermost_cause(str(exc)) or type(exc).__name__


def cannot_rebuild(data: bytes, classes: dict[str, Any]) -> list[str]:
    """``"Patches, PatchEncoder: __init__ takes no name, trainable, dtype: ..."``: the classes of
    the notebook's in the saved model that Keras' own ``from_config`` can't make from their
    config, those that fail for the same reason together."""
    by_name = {c.__name__: c for c in classes.values() if isinstance(c, type)}
    seen: set[str] = set()
    failing: dict[str, list[str]] = {}  # why -> the classes
    for class_name, config in _configs(_saved_config(data)):
        cls = by_name.get(class_name)
        if cls is None or class_name in seen:
            continue
        seen.add(class_name)
        for why in _why_not_rebuilt(cls, config):
            failing.setdefault(why, []).append(class_name)
    return [f"{', '.join(names)}: {why}" for why, names in failing.items()]


def refusing_only_base_keys(data: bytes, classes: dict[str, Any]) -> list[type]:
    """The notebook's classes in the saved model that Keras' ``from_config`` can't make only
    because their ``__init__`` takes none of ``name``, ``trainable`` and ``dtype`` (or not all):
    what ``lenient_load`` rebuilds. [] where any class of it fails for another reason (an
    argument ``__init__`` needs left out of its config, or one it does not take): nothing is
    guessed at then. The model's own config only: a loss or metric it was compiled with that
    can't be rebuilt leaves the model uncompiled, with Keras' warning, not unloaded."""
    saved = _saved_config(data)
    if isinstance(saved, dict):
        saved = {k: v for k, v in saved.items() if k != "compile_config"}
    by_name = {c.__name__: c for c in classes.values() if isinstance(c, type)}
    refusing: dict[str, type] = {}
    for class_name, config in _configs(saved):
        cls = classes.get(class_name) if isinstance(classes.get(class_name), type) else None
        cls = cls or by_name.get(class_name)  # Keras looks it up by name as registered
        if cls is None or class_name in refusing or not _uses_keras_from_config(cls):
            continue
        taken = takes_base_keys(cls)
        if taken is None:
            continue  # **kwargs: Keras' own loading takes every key
        left_out = BASE_KEYS - taken
        if _why_not_rebuilt(cls, {k: v for k, v in config.items() if k not in left_out}):
            return []  # another reason too: not ours to guess
        if left_out & set(config):
            refusing[class_name] = cls
    return list(refusing.values())


def innermost_cause(text: str) -> str:
    """The last ``Exception encountered:`` of Keras' nested message (the rest repeats configs),
    without the config it quotes; a message of another shape, its first line. Cut at
    ``LONGEST`` characters."""
    causes = re.findall(r"Exception encountered: (.+)", text)
    lines = text.strip().splitlines()
    cause = causes[-1].strip() if causes else lines[0] if lines else ""
    cause = cause.split(" using config=", 1)[0]
    while cause.endswith(")") and cause.count(")") > cause.count("("):  # (Keras' wrapping)
        cause = cause[:-1]
    return cause if len(cause) <= LONGEST else cause[: LONGEST - 1] + "…"


def _why_not_rebuilt(cls: type, config: dict[str, Any]) -> list[str]:
    if not _uses_keras_from_config(cls):
        return []  # its own from_config: what it takes is its own business
    try:
        params = inspect.signature(init_of(cls)).parameters
    except (StopIteration, TypeError, ValueError):
        return []
    named = [
        p for p in list(params.values())[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    reasons = []
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [key for key in config if key not in {p.name for p in named}]
        if unknown:
            reasons.append(
                f"__init__ takes no {', '.join(unknown)}: give it **kwargs, passed on to "
                f"super().__init__(**kwargs)"
            )
    missing = [p.name for p in named if p.default is p.empty and p.name not in config]
    if missing:
        reasons.append(f"get_config() leaves out {', '.join(missing)}, which __init__ needs")
    return reasons


def _uses_keras_from_config(cls: type) -> bool:
    for klass in cls.__mro__:
        if "from_config" in vars(klass):
            return klass.__module__.split(".")[0] in ("keras", "tf_keras")
    return False


def _saved_config(data: bytes) -> Any:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, KeyError, ValueError):
        return None


def _configs(node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (class name, config) in a saved model's config, layers inside layers too; not
    Keras' own classes (a notebook's ``Dense`` is not the one saved)."""
    if isinstance(node, dict):
        keras_own = str(node.get("module") or "").startswith(("keras", "tf_keras"))
        if (
            isinstance(node.get("class_name"), str)
            and isinstance(node.get("config"), dict)
            and not keras_own
        ):
            yield node["class_name"], node["config"]
        for value in node.values():
            yield from _configs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _configs(value)
