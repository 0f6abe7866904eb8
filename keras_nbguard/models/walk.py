"""The walk *up* from the live models to their holders: one batched ``gc.get_referrers(*frontier)``
per level (a C scan of the heap) until each chain reaches a root the user can name.

Walking *down* from the namespace costs a Python step per reachable object (0.65 s for 900k);
walking up costs one heap scan per level whatever the namespace holds. A scan also costs ~2 ms
more per target, so the frontier is kept small: a model's own parts (own_parts.py) are never
followed, framework objects are not followed, and roots, modules and other models end a chain.
Keras' node graph is the exception: a node's holders are read off the graph (nodes.py), and the
layer holding it is followed, so a layer of another cell that keeps a run's model is named.
"""

from __future__ import annotations

import collections
import gc
import itertools
import sys
import time
import types
from collections.abc import Iterator, Mapping
from typing import Any

from keras_nbguard.models.frameworks import (
    FRAMEWORKS,
    all_subclasses,
    callback_class,
    is_keras_nesting,
    model_classes,
    package_of,
    worth_following,
)
from keras_nbguard.models.naming import Chain, Root, awkwardness, named_chains
from keras_nbguard.models.nodes import node_lists, node_types
from keras_nbguard.models.own_parts import mark_own_parts
from keras_nbguard.models.registry import ModelRegistry
from keras_nbguard.models.roots import Roots, find_roots, is_own_frame, module_root, name_map
from keras_nbguard.prepare.gcfreeze import frozen_boxes, frozen_holders


class Probe:
    """One walk over the heap. Holds strong references until ``close()``: keep it short-lived."""

    def __init__(
        self,
        user_ns: Mapping[str, Any] | None,
        registry: ModelRegistry | None = None,
        *,
        shell: Any = None,
        max_depth: int = 12,
        time_limit: float = 1.0,
        max_paths: int = 12,
    ) -> None:
        self.shell = shell
        self.user_ns: Mapping[str, Any] = (
            user_ns if user_ns is not None else getattr(shell, "user_ns", {})
        )
        self.registry = registry
        self.max_depth, self.time_limit, self.max_paths = max_depth, time_limit, max_paths
        self.models: list[Any] = []
        self.chains: dict[int, list[Chain]] = {}  # id(model) -> its chains
        self.blockers: dict[int, list[str]] = {}  # id(model) -> framework holders not followed
        self.internal: set[int] = set()  # models only Keras' own nesting holds
        self.scans, self.complete, self.seconds = 0, True, 0.0
        self._aliases: dict[int, str] = {}
        self._owner: dict[int, int] = {}  # a model's own part -> the model (own_parts.py)
        self._route: dict[int, Any] = {}  # a model's own part -> what holds it in the model
        self._named_enough: set[int] = set()  # layers holding a node: a name of yours suffices

    def run(self) -> Probe:
        t0 = time.perf_counter()
        bases = model_classes()
        if bases:  # its limit counts its own work: on a loaded machine the clock runs on
            self._walk(bases, time.thread_time())  # while others have the CPU
        self.seconds = time.perf_counter() - t0
        return self

    def close(self) -> None:
        """Drop every strong reference this probe holds."""
        self.models, self.chains = [], {}
        self._owner, self._route = {}, {}

    # -- the walk ------------------------------------------------------------------------------
    def _walk(self, bases: tuple[type, ...], t0: float) -> None:
        classes = [c for base in bases for c in all_subclasses(base)]
        class_ids = {id(c) for c in classes}
        self.models = models = self.registry.live() if self.registry is not None else []
        roots, self._aliases, named, users_modules = find_roots(self.user_ns, self.shell)
        objs: dict[int, Any] = {id(m): m for m in models}
        callback = callback_class()
        node_kinds = node_types()
        parents: dict[int, dict[int, None]] = {}
        owner = self._owner  # id(a model's own container or function) -> id(model)
        held: dict[int, int] = {}  # id(object) -> references to it from models' attributes
        blockers: dict[int, list[str]] = {}
        down, down_objs = name_map(roots, named, class_ids, callback)
        own = {id(self), id(models), id(objs), id(roots), id(down_objs), id(gc.garbage)}
        for m in models:
            mark_own_parts(m, owner, held, class_ids, self.internal, callback, self._route)
        # The first scan also discovers the models we did not know: an instance refers to its class.
        frontier: list[Any] = [*classes, *(m for m in models if id(m) not in self.internal)]
        discovered: list[Any] = []
        # frozen namespaces and modules (gcfreeze.py) are out of the scans' sight
        boxes = frozen_boxes(named, users_modules)
        own.update((id(boxes), id(named), id(users_modules)))
        for depth in range(self.max_depth + 1):
            if not frontier or (depth and time.thread_time() - t0 > self.time_limit):
                break
            args = tuple(frontier)
            found = gc.get_referrers(*args)
            targets = {id(o) for o in args} - (class_ids if depth == 0 else set())
            found.extend(frozen_holders(targets, boxes))
            self.scans += 1
            skip = own | {id(args), id(found), id(frontier), id(discovered)}
            if depth == 0:
                for r in found:
                    if id(type(r)) in class_ids and id(r) not in objs and id(r) not in skip:
                        objs[id(r)] = r
                        discovered.append(r)
                for m in discovered:
                    mark_own_parts(m, owner, held, class_ids, self.internal, callback, self._route)
                models.extend(discovered)
            frontier_ids = {id(o) for o in args} - (class_ids if depth == 0 else set())
            type_ids = {id(o) for o in args if isinstance(o, type)} if depth else set()
            candidates: list[int] = []
            for r in found:
                rid = id(r)
                if rid in skip or id(type(r)) in type_ids or is_own_frame(r):
                    continue  # ours, or an instance of a class being followed
                kids = frontier_ids.intersection(map(id, gc.get_referents(r)))
                kids.discard(id(type(r)))
                model_id = owner.get(rid)
                if (
                    model_id is None
                    and type(r) is types.MethodType
                    and rid not in down
                    and package_of(r.__func__) in FRAMEWORKS
                    and id(r.__self__) in kids
                ):
                    model_id = id(r.__self__)  # Keras' own bound method (train_step), unnamed
                if model_id is not None:
                    kids.discard(model_id)  # a model's own part holding the model: internal
                if not kids:
                    continue
                for kid in kids:
                    parents.setdefault(kid, {})[rid] = None
                if rid in objs:
                    continue
                objs[rid] = r
                if rid in roots:
                    continue
                if model_id is not None:
                    parents[rid] = {model_id: None}  # e.g. outer.blocks holds inner
                elif node_kinds and isinstance(r, node_kinds):
                    layers = _node_holders(r, objs, parents, roots, down)
                    self._named_enough.update(layers)
                    candidates.extend(layers)
                elif worth_following(r, callback):
                    candidates.append(rid)
                else:
                    for kid in kids:
                        blockers.setdefault(kid, []).append(type(r).__qualname__)
            r = found = args = None  # type: ignore[assignment]  # no frame keeps them alive
            frontier = self._settle(candidates, objs, parents, down, down_objs, held, roots)
            if depth == 0:  # the holders of models found by this scan: next scan
                frontier = [m for m in discovered if id(m) not in self.internal] + frontier
                discovered = []
        self.complete = not frontier
        self._chains(parents, roots, objs, {id(m) for m in models}, blockers)

    def _settle(
        self,
        candidates: list[int],
        objs: dict[int, Any],
        parents: dict[int, dict[int, None]],
        down: dict[int, list[int]],
        down_objs: dict[int, Any],
        held: dict[int, int],
        roots: Roots,
    ) -> list[Any]:
        """Holders the name map explains need no scan: their parents come from the map, and when
        their reference count has no room for other holders, their own holders are all known."""
        nxt: list[Any] = []
        todo = list(candidates)
        while todo:
            cid = todo.pop()
            ups = down.get(cid)
            obj = objs[cid]
            if ups is None:
                nxt.append(obj)
                continue
            for up in ups:
                parents.setdefault(cid, {})[up] = None
                if up not in objs and up not in roots:
                    objs[up] = down_objs[up]
                    todo.append(up)
            if isinstance(obj, type) or cid in self._named_enough:
                continue  # a class bound to a name: its instances and subclasses refer to it;
                # a layer holding a node, named by you: its other holders are Keras' graph
            if _refcount(obj) - _OWN_REFS > len(ups) + held.get(cid, 0):
                nxt.append(obj)  # someone else holds it too: look for them
        return nxt

    def _chains(
        self,
        parents: dict[int, dict[int, None]],
        roots: Roots,
        objs: dict[int, Any],
        model_ids: set[int],
        blockers: dict[int, list[str]],
    ) -> None:
        """Turn the holder graph into named chains, model by model: nearest root first, so that
        a name of yours is found before the chain cap fills with a traceback's frames."""
        hops = _hops_to_a_root(parents, roots)
        for mid in model_ids:
            chains: list[Chain] = []
            stack: list[list[int]] = [[mid]]
            while stack and len(chains) < 4 * self.max_paths:
                ids = stack.pop()
                top = ids[-1]
                if len(ids) > 1 and (top in roots or top in model_ids):
                    down = self._expand(
                        [roots[i][0] if i in roots else objs[i] for i in reversed(ids)]
                    )
                    if top in roots:
                        chains.extend(named_chains(self._root(roots[top][1]), down))
                    else:  # starts at another model: its own paths come first
                        from_model = named_chains(Root("model", "", False), down, objs[top])
                        chains.extend(
                            c
                            for c in from_model
                            if not (
                                c.edges[0].kind == "attr"
                                and is_keras_nesting(c.objs[0], c.edges[0].key)
                            )
                        )
                    continue
                if len(ids) <= self.max_depth + 1:
                    ups = sorted(reversed(parents.get(top, ())), key=lambda p: -hops.get(p, _FAR))
                    stack.extend([*ids, p] for p in ups if p not in ids)  # the nearest pops first
            self.chains[mid] = chains
            if not chains:
                if any(p in model_ids for p in _above(mid, parents)):
                    self.internal.add(mid)  # e.g. Sequential._functional: part of its model
                else:
                    self.blockers[mid] = sorted(
                        {b for i in _above(mid, parents) for b in blockers.get(i, ())}
                        | set(blockers.get(mid, ()))
                    )

    def _expand(self, down: list[Any]) -> list[Any]:
        """Put back the objects between a model and its own part that the walk skipped (the
        part was found by looking into the model): ``outer._outputs[0]``, not ``outer.<?>``."""
        out = down[:1]
        for parent, child in itertools.pairwise(down):
            if self._owner.get(id(child)) == id(parent):
                between: list[Any] = []
                step = self._route.get(id(child))
                while step is not None and step is not parent and len(between) < 8:
                    between.append(step)
                    step = self._route.get(id(step))
                if step is parent:
                    out.extend(reversed(between))
            out.append(child)
        return out

    def _root(self, root: Root | str) -> Root:
        return root if isinstance(root, Root) else module_root(root, self._aliases)

    def paths(self, model: Any, _seen: frozenset[int] = frozenset()) -> list[tuple[str, bool]]:
        """(path, bound to a user name) for every chain of ``model``, best first."""
        out: list[tuple[str, bool]] = []
        for chain in self.chains.get(id(model), ()):
            if chain.via is None:
                out.append((chain.text(), chain.user))
            elif id(chain.via) not in _seen:
                for prefix, user in self.paths(chain.via, _seen | {id(model)})[:3]:
                    out.append((prefix + chain.text(), user))
        texts = {p for p, _ in out}
        mirrors = {
            c.text()
            for c in self.chains.get(id(model), ())
            if c.root.kind in ("hidden", "displayhook") and c.text(mirror=True) in texts
        }
        unique = [pu for pu in dict.fromkeys(out) if pu[0] not in mirrors]
        unique.sort(key=_path_order)
        return unique[: self.max_paths]


_FAR = 1 << 30


def _hops_to_a_root(parents: dict[int, dict[int, None]], roots: Roots) -> dict[int, int]:
    """How many holders up from each object of the holder graph the nearest root is."""
    below: dict[int, list[int]] = {}
    for child, ups in parents.items():
        for up in ups:
            below.setdefault(up, []).append(child)
    hops = {rid: 0 for rid in roots if rid in below}
    todo = collections.deque(hops)
    while todo:
        up = todo.popleft()
        for child in below.get(up, ()):
            if child not in hops:
                hops[child] = hops[up] + 1
                todo.append(child)
    return hops


def _path_order(path: tuple[str, bool]) -> tuple[bool, bool, int, int, str]:
    """Paths you can type first (keras.io's GAN listed its ``discriminator`` as held by
    ``gan._compiled_trainable_state — a _DictWrapper that holds it … (no expression reaches it)``
    before ``Out[7].model.discriminator``), then those from your own names, the least awkward
    first."""
    text, user = path
    return " — " in text, not user, awkwardness(text), len(text), text


def _node_holders(
    node: Any,
    objs: dict[int, Any],
    parents: dict[int, dict[int, None]],
    roots: Roots,
    down: dict[int, list[int]],
) -> list[int]:
    """A Keras node is held by the node lists of the layers it was called on and called from
    (nodes.py): those are its parents, found without a heap scan (a scan through Keras' graph
    fans out into every tensor of it). Returns the layers to look further up from: those your
    names reach (a layer only the graph holds, a run's ``InputLayer``, leads nowhere)."""
    out = []
    for layer, nodes in node_lists(node):
        parents.setdefault(id(node), {})[id(nodes)] = None
        objs.setdefault(id(nodes), nodes)
        parents.setdefault(id(nodes), {})[id(layer)] = None
        if id(layer) not in objs:
            objs[id(layer)] = layer
            if id(layer) not in roots and id(layer) in down:
                out.append(id(layer))
    return out


def _refcount(obj: Any) -> int:
    return sys.getrefcount(obj)


def _own_refs() -> int:
    """References we hold to an object while settling it: two dicts, a local (and the call)."""
    probe = object()
    a, b = {0: probe}, {0: probe}
    del probe
    obj = a[0]
    count = _refcount(obj)
    del a, b
    return count


_OWN_REFS = _own_refs()


def _above(mid: int, parents: dict[int, dict[int, None]]) -> Iterator[int]:
    """Every holder above ``mid`` in the holder graph, each once."""
    seen, todo = {mid}, [mid]
    while todo:
        for p in parents.get(todo.pop(), ()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
                yield p
