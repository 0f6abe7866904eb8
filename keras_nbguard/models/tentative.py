"""The release that needs no heap walk: cut Keras' own links to an earlier run's model, and let
the run's one collection say whether the model went.

A cell ending in ``model.fit(...)`` leaves each run's model held by its ``History`` in ``Out[n]``,
``_n`` and ``_``, and by nothing else. Proving that nothing else holds it took a walk over the
heap (walk.py: ~0.1 s on a small TensorFlow model, ~0.2 s on a large one) after every run. The
collection a run makes anyway proves it instead. When a short walk *down* from your names and
IPython's caches meets an earlier run's model only through callbacks' ``.model`` links (what
the heap walk would release too), those links are cut and the next run's collection decides: a
model that died was released; one that lives is held by something the short walk did not see (a
running frame, a deep container), so its links are put back as they were, and from then on it
gets the heap walk, which names its holders.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from keras_nbguard.backends import PACKAGES
from keras_nbguard.models.caches import TRACEBACK_ATTRS
from keras_nbguard.models.frameworks import callback_class, instance_dict, worth_following
from keras_nbguard.models.naming import Root, awkwardness, named_chains
from keras_nbguard.models.registry import ModelRegistry, RunRef
from keras_nbguard.models.report import sizes
from keras_nbguard.models.weights_freed import FreedWeights

MODEL_LINKS = ("_model", "model")  # where Keras' Callback.set_model keeps the model
WIDE = 5_000  # containers with more items than this are not looked into
Link = tuple[Any, str]  # (a callback, the attribute that holds the model)


@dataclass
class Reach:
    """What the short walk met: each model it met (by id) with how, one entry per meeting: a
    callback's link, or None for any other holder (a name, a container, another object)."""

    met: dict[int, list[Link | None]] = field(default_factory=dict)
    paths: dict[int, list[str]] = field(default_factory=dict)  # id(callback) -> how you reach it

    def through_callbacks_only(self, model: Any) -> bool:
        return all(link is not None for link in self.met.get(id(model), [None]))

    def named(self, model: Any, user_ns: Mapping[str, Any]) -> bool:
        """Whether one of your own names binds ``model`` itself (it is yours, and current)."""
        return any(v is model for k, v in list(user_ns.items()) if not k.startswith("_"))


@dataclass
class Cut:
    """An earlier run's model whose callbacks' links were cut, until a collection tells."""

    model: weakref.ref[Any]
    run: RunRef
    size: int | None
    links: list[Link]
    holders: list[str]  # how you reached each callback, best first
    weights: FreedWeights  # of the models cut together: their variables freed, once collected
    said: bool = False  # the run that cut it said so already: the collection only confirms

    def went(self) -> bool:
        """After a collection: whether the model is gone; if not, its links are put back."""
        model = self.model()
        if model is None:
            return True
        for callback, key in self.links:
            attributes = instance_dict(callback)
            if attributes is not None and attributes.get(key) is None:  # unless you set one
                attributes[key] = model
        return False


def reach(
    models: list[Any], user_ns: Mapping[str, Any], shell: Any, depth: int = 5, budget: int = 50_000
) -> Reach | None:
    """Where a walk *down* from your names and IPython's caches meets ``models`` within ``depth``
    links (``histories[3]._model`` is four); None when it can't tell: a traceback keeps frames,
    another thread is inside Keras, or there is too much to look at."""
    if any(getattr(sys, name, None) is not None for name in TRACEBACK_ATTRS):
        return None
    if _inside_keras_elsewhere():
        return None
    wanted = {id(m) for m in models}
    callback = callback_class()
    roots = dict(_roots(user_ns, shell))
    holder_of: dict[int, Any] = dict.fromkeys(roots)  # the first holder of each object seen
    callers: dict[int, list[Any]] = {}  # id(callback) -> each of its holders met
    found = Reach()
    level = [obj for obj, _ in roots.values()]
    for _ in range(depth):
        below = []
        for holder in level:
            children = gc.get_referents(holder)
            if len(children) > WIDE and holder is not user_ns:
                continue  # a list of a million numbers holds no model worth a second here
            for child in children:
                key = id(child)
                if key in wanted:  # not entered: its parts are its own
                    found.met.setdefault(key, []).append(_link(holder, holder_of, child, callback))
                    continue
                if callback and isinstance(child, callback):
                    callers.setdefault(key, []).append(holder)
                if key in holder_of or not gc.is_tracked(child) or isinstance(child, type):
                    continue
                holder_of[key] = holder
                if len(holder_of) > budget:
                    return None
                if worth_following(child, callback):
                    below.append(child)
        level = below
    for links in found.met.values():
        for callback_id in {id(link[0]) for link in links if link is not None}:
            found.paths[callback_id] = _paths(callback_id, callers, holder_of, roots)
    return found


def cut(
    models: list[Any], found: Reach, registry: ModelRegistry, label: str, user_ns: Any
) -> list[Cut]:
    """Cut the callbacks' links to each of ``models`` (met through them only)."""
    weights = FreedWeights(user_ns, {id(m) for m in models})
    cuts = []
    for model in models:
        links = [link for link in found.met[id(model)] if link is not None]
        holders = sorted(
            {
                f"{path} (its {type(callback).__name__})"
                for callback, _ in links
                for path in found.paths.get(id(callback)) or ["a callback"]
            },
            key=_path_order,
        )
        weights.add(model)
        cuts.append(
            Cut(
                weakref.ref(model),
                registry.last_run(model) or RunRef(label, 0),
                sizes(model)[1],
                links,
                holders,
                weights,
            )
        )
        for callback, key in links:
            attributes = instance_dict(callback)
            if attributes is not None:
                attributes[key] = None
    return cuts


def _link(
    holder: Any, holder_of: dict[int, Any], model: Any, callback: tuple[type, ...]
) -> Link | None:
    """``holder``'s link to ``model`` if it is a callback's (the callback itself, or its
    ``__dict__``); None for any other holder."""
    owner = holder_of.get(id(holder)) if type(holder) is dict else holder
    if not callback or not isinstance(owner, callback):
        return None
    attributes = instance_dict(owner)
    if attributes is None or (owner is not holder and attributes is not holder):
        return None
    for key in MODEL_LINKS:
        if attributes.get(key) is model:
            return owner, key
    return None


def _roots(user_ns: Mapping[str, Any], shell: Any) -> Iterator[tuple[int, tuple[Any, Root]]]:
    hidden = frozenset(getattr(shell, "user_ns_hidden", None) or ())
    yield id(user_ns), (user_ns, Root("ns", "", True, namespace=True, hidden=hidden))
    out = user_ns.get("Out")  # a root of its own: ``Out[7]``, not ``_oh[7]``
    if isinstance(out, dict):
        yield id(out), (out, Root("out", "Out", False))
    hook = getattr(shell, "displayhook", None)
    if hook is not None:
        yield id(hook), (hook, Root("displayhook", "get_ipython().displayhook", False))
    result = getattr(shell, "last_execution_result", None)
    if result is not None:
        yield id(result), (result, Root("exec", "get_ipython().last_execution_result", False))


def _paths(
    callback_id: int,
    callers: dict[int, list[Any]],
    holder_of: dict[int, Any],
    roots: dict[int, tuple[Any, Root]],
) -> list[str]:
    """Each way the walk reached a callback (``Out[7]``, ``_7``, ``_``)."""
    texts = []
    for holder in callers.get(callback_id, []):
        objs = [holder]
        while holder_of.get(id(objs[0])) is not None:
            objs.insert(0, holder_of[id(objs[0])])
        if id(objs[0]) not in roots:
            continue
        root = roots[id(objs[0])][1]
        target = _callback_by_id(holder, callback_id)
        if target is None:
            continue
        texts += [chain.text() for chain in named_chains(root, [*objs, target])[:1]]
    return texts


def _callback_by_id(holder: Any, callback_id: int) -> Any:
    return next((c for c in gc.get_referents(holder) if id(c) == callback_id), None)


def _path_order(path: str) -> tuple[int, int, str]:
    return awkwardness(path), len(path), path


def _inside_keras_elsewhere() -> bool:
    """Whether another thread is running Keras code: its frames hold models (a fit in a thread
    uses its callbacks) that the walk down from your names does not see."""
    me = threading.get_ident()
    for ident, top in sys._current_frames().items():
        frame = top if ident != me else None
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if isinstance(name, str) and name.partition(".")[0] in PACKAGES:
                return True
            frame = frame.f_back
    return False
