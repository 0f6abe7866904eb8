"""Live Keras models, every path that holds them, and the run that made each one.

Holders are found by walking *up* from the models: one batched ``gc.get_referrers(*frontier)``
per level (a C scan of the heap) until each chain reaches a root the user can name — the user
namespace, IPython's output cache and ``_``/``__``/``___``, the last traceback, a module. Walking
*down* from the namespace costs a Python step per reachable object (0.65 s for 900k); walking up
costs one heap scan per level whatever the namespace holds. A scan also costs ~2 ms more per
target, so the frontier is kept small: a model's own attribute containers and functions (Keras
wraps ``build``/``quantize``/``train_function`` as closures over the model) are recognised by a
one-level look at the model's ``__dict__`` and never followed; framework objects (Keras/TF
internals, IPython's machinery) are not followed; roots, modules and other models end a chain.
Nothing here imports Keras: ``sys.modules`` says whether any model can exist.

Paths read as the user would type them: ``model``, ``models[3]``, ``results["run2"]["model"]``,
``trainer.best``, ``Out[7].model``, ``_7.model``, ``history.model``. Other forms:

- closures ``cb.__closure__[0].cell_contents`` (``Leak.holder`` names ``make_cb.<locals>.cb`` and
  the variable); default arguments ``f.__defaults__[0]``, ``f.__kwdefaults__["m"]``;
- tracebacks ``sys.last_traceback.tb_next.tb_frame.f_locals["model"]``;
- set members ``s{…}`` (a set can't be indexed); a link we cannot name ``.<?>`` (see holder_type);
- a model in another model's attribute ``outer.blocks[0]``; a running frame
  ``<frame train>.f_locals["m"]``. Keras' own nesting (``Sequential._functional``) isn't reported.
"""

from __future__ import annotations

import functools
import gc
import itertools
import re
import sys
import time
import types
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

MODEL_MODULE = "keras.src.models.model"
CALLBACK_MODULE = "keras.src.callbacks.callback"
# Objects of these packages are framework internals: chains through them are not followed (it
# keeps the walk short). Keras callbacks (History included) are the exception: users hold those.
FRAMEWORKS = frozenset({
    "keras", "tensorflow", "tf_keras", "tensorboard", "jax", "jaxlib", "torch", "optree", "tree",
    "absl", "h5py", "ml_dtypes", "google", "wrapt", "IPython", "ipykernel", "traitlets", "zmq",
    "tornado", "jupyter_client", "executing", "stack_data", "keras_nbguard",
})
_CONTAINERS = (dict, list, tuple, set, frozenset)
_FOLLOWED = frozenset({"ExecutionResult"})  # framework objects that hold user results
_HIDDEN_NAME = re.compile(r"_+|_\d+|_i+\d*|_(ih|oh|dh)|In|Out|exit|quit|get_ipython")
_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
             "complex64": 8, "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1}
UNREACHABLE_HINT = (
    "alive, but nothing you can name holds it: its own reference cycles waiting for the garbage "
    "collector, or framework internals (e.g. a tf.function cache). keras_nbguard.free() runs gc "
    "and keras.utils.clear_session(), which releases most of them.")


# -- records ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Leak:
    """One live Keras model and what holds it. Pure data: never a reference to the model."""

    path: str  # the best path, as the user would type it ("" when unreachable)
    paths: tuple[str, ...]  # every path found, best first
    model_name: str
    class_name: str
    params: int | None  # None: not built yet
    weight_bytes: int | None
    optimizer_bytes: int | None  # 0 without an optimizer
    run_label: str | None  # the run that created it; None: made outside a tracked run
    run_number: int | None
    stale: bool
    reason: str  # why it is stale, current or unreachable, in words
    holder: str | None = None  # what holds it directly on ``path``, e.g. "list", "closure ..."
    holder_type: str | None = None
    inside: str | None = None  # the model it lives in, when every path goes through that model
    last_run_number: int | None = None  # the latest run of ``run_label``'s kind that fit it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LeakReport:
    """Every live Keras model: ``leaks`` (reachable, stale first) and ``unreachable`` ones."""

    leaks: tuple[Leak, ...] = ()
    unreachable: tuple[Leak, ...] = ()
    seconds: float = 0.0
    scans: int = 0  # heap scans (gc.get_referrers calls) the walk made
    complete: bool = True  # False when the depth or time limit stopped the walk
    notes: tuple[str, ...] = ()

    @property
    def stale(self) -> tuple[Leak, ...]:
        return tuple(leak for leak in self.leaks if leak.stale)

    @property
    def current(self) -> tuple[Leak, ...]:
        return tuple(leak for leak in self.leaks if not leak.stale)

    @property
    def hint(self) -> str | None:
        return UNREACHABLE_HINT if self.unreachable else None

    def __iter__(self) -> Iterator[Leak]:
        return iter(self.leaks)

    def __len__(self) -> int:
        return len(self.leaks)

    def lines(self) -> list[str]:
        """The text summary, shared by the pretty and HTML reprs."""
        from .records import fmt_bytes

        out = [f"{len(self.leaks)} live Keras model(s), {len(self.stale)} stale, "
               f"{len(self.unreachable)} unreachable"]
        for leak in self.leaks:
            run = f"{leak.run_label!r} #{leak.run_number}" if leak.run_label else "no tracked run"
            opt = f" + {fmt_bytes(leak.optimizer_bytes)} optimizer" if leak.optimizer_bytes else ""
            out.append(f"  {'STALE' if leak.stale else 'ok   '} {leak.model_name} "
                       f"({leak.class_name}, {fmt_bytes(leak.weight_bytes)}{opt}, {run}): "
                       f"{', '.join(leak.paths)}")
        for leak in self.unreachable:
            out.append(f"  unreachable {leak.model_name} ({leak.class_name}, "
                       f"{fmt_bytes(leak.weight_bytes)}): {leak.reason}")
        if self.unreachable:
            out.append(f"  hint: {UNREACHABLE_HINT}")
        out.extend(f"  note: {n}" for n in self.notes)
        return out

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("\n".join(self.lines()))

    def _repr_html_(self) -> str:
        import html

        return "<pre class='keras-nbguard-leaks'>" + html.escape("\n".join(self.lines())) + "</pre>"


# -- which run made which model -----------------------------------------------------------------
class RunRef(NamedTuple):
    label: str
    run_number: int


class _Ref(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("created", "key", "last")


class ModelRegistry:
    """Which run made each model, by weak reference only: a model dies whenever the user lets go.

    A run hands over, when it ends, the models it fit (``FitTimer.models``) and those it built
    (``CreationWatch.models``): the first run to hand a model over made it, the latest used it.
    """

    def __init__(self) -> None:
        self._refs: dict[int, _Ref] = {}
        self.latest: dict[str, int] = {}  # label -> latest run number seen

    def note_run(self, label: str, run_number: int, models: Iterable[Any] = ()) -> int:
        """Record the end of a run; ``models`` are models or weak references to them. Returns
        how many of them this run created (seen for the first time)."""
        self.latest[label] = max(self.latest.get(label, 0), run_number)
        run = RunRef(label, run_number)
        created = 0
        for item in models:
            model = item() if isinstance(item, weakref.ref) else item
            if model is None:
                continue
            ref = self._ref(model)
            if ref is None:
                ref = _Ref(model, self._forget)
                ref.key, ref.created = id(model), run
                self._refs[ref.key] = ref
                created += 1
            ref.last = run
        return created

    def origin(self, model: Any) -> RunRef | None:
        """The run that created ``model`` (label, run number); None if no run we know of."""
        ref = self._ref(model)
        return None if ref is None else ref.created

    def last_run(self, model: Any) -> RunRef | None:
        """The latest run that created or fit ``model``."""
        ref = self._ref(model)
        return None if ref is None else ref.last

    def live(self) -> list[Any]:
        """The known models still alive (strong references: drop the list soon)."""
        return [m for m in (r() for r in list(self._refs.values())) if m is not None]

    def __len__(self) -> int:
        return len(self._refs)

    def _ref(self, model: Any) -> _Ref | None:
        ref = self._refs.get(id(model))
        return ref if ref is not None and ref() is model else None

    def _forget(self, ref: _Ref) -> None:
        if self._refs.get(ref.key) is ref:
            del self._refs[ref.key]


class CreationWatch:
    """While installed, every Keras model built is remembered weakly: a scoped, reversible patch
    of ``Model.__new__`` (every model class goes through it), so that models a run built but never
    fit are attributed to it too. Costs one weak reference per model built."""

    def __init__(self) -> None:
        self.models: list[weakref.ref[Any]] = []
        self._patched: tuple[type, Any] | None = None
        self._watch: Any = None

    def install(self) -> None:
        from .collectors.imports import when_imported

        self._watch = when_imported(MODEL_MODULE, self._patch)

    def uninstall(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._patched is not None:
            cls, original = self._patched
            cls.__new__ = original
            self._patched = None

    def _patch(self, module: types.ModuleType) -> None:
        cls = module.Model
        original = cls.__dict__["__new__"]
        make = original.__func__ if isinstance(original, staticmethod) else original
        seen = self.models

        def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            obj = make(klass, *args, **kwargs)
            if not seen or seen[-1]() is not obj:  # Model(inputs, outputs) comes through twice
                seen.append(weakref.ref(obj))
            return obj

        cls.__new__ = staticmethod(__new__)
        self._patched = (cls, original)


def model_class() -> type | None:
    """Keras' Model class if Keras is imported (never imports it)."""
    return getattr(sys.modules.get(MODEL_MODULE), "Model", None)


def current_shell() -> Any:
    """The running IPython shell, if IPython is imported and has one (never imports IPython)."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get() if get is not None else None


# -- chains: how a model is held ----------------------------------------------------------------
class Root(NamedTuple):
    kind: str  # ns, hidden, out, displayhook, exec, traceback, sys, module, frame, shell, model
    prefix: str  # how the user types it; "" for the user namespace (its keys are the names)
    user: bool  # a name the user works with (not a cache, a traceback or someone's module)
    namespace: bool = False  # a namespace dict: its keys read as names / attributes
    hidden: frozenset[str] = frozenset()  # ns: names that are IPython's, not the user's


class Edge(NamedTuple):
    text: str  # e.g. "[3]", ".best", '["run2"]'
    kind: str  # item, attr, set, cell, local, link, dict (a __dict__, folded away), other
    key: Any = None  # dict key, index or attribute name (what freeing uses)


@dataclass
class Chain:
    """One way a model is held: ``objs`` from the root object down to the model."""

    root: Root
    objs: list[Any]
    edges: list[Edge]  # edges[i] links objs[i] to objs[i + 1]
    via: Any = None  # the outer model when the chain starts at another model

    @property
    def first_key(self) -> Any:
        return self.edges[0].key if self.edges else None

    def text(self, mirror: bool = False) -> str:
        """The path; ``mirror``: as if the root were the user namespace (for _ mirrors)."""
        namespace = self.root.namespace or mirror
        out = "" if mirror else self.root.prefix
        for i, edge in enumerate(self.edges):
            if i == 0 and namespace and edge.kind in ("item", "attr"):
                key = edge.key
                if isinstance(key, str) and key.isidentifier():
                    out += f".{key}" if out else key
                else:
                    out = f"{out}.__dict__{edge.text}" if out else f"globals()[{key!r}]"
            else:
                out += edge.text
        return out

    @property
    def user(self) -> bool:
        if self.root.kind != "ns":
            return self.root.user
        name = self.first_key
        return (isinstance(name, str) and name not in self.root.hidden
                and not _HIDDEN_NAME.fullmatch(name))


class Probe:
    """One walk over the heap. Holds strong references until ``close()``: keep it short-lived."""

    def __init__(self, user_ns: Mapping[str, Any] | None, registry: ModelRegistry | None = None,
                 *, shell: Any = None, max_depth: int = 12, time_limit: float = 1.0,
                 max_paths: int = 12) -> None:
        self.shell = shell
        self.user_ns: Mapping[str, Any] = (user_ns if user_ns is not None
                                           else getattr(shell, "user_ns", {}))
        self.registry = registry
        self.max_depth, self.time_limit, self.max_paths = max_depth, time_limit, max_paths
        self.models: list[Any] = []
        self.chains: dict[int, list[Chain]] = {}  # id(model) -> its chains
        self.blockers: dict[int, list[str]] = {}  # id(model) -> framework holders not followed
        self.internal: set[int] = set()  # models only Keras' own nesting holds
        self.scans, self.complete, self.seconds = 0, True, 0.0
        self._aliases: dict[int, str] = {}

    def run(self) -> Probe:
        t0 = time.perf_counter()
        base = model_class()
        if base is not None:
            self._walk(base, t0)
        self.seconds = time.perf_counter() - t0
        return self

    def close(self) -> None:
        """Drop every strong reference this probe holds."""
        self.models, self.chains = [], {}

    # -- the walk ------------------------------------------------------------------------------
    def _walk(self, base: type, t0: float) -> None:
        classes = _subclasses(base)
        class_ids = {id(c) for c in classes}
        self.models = models = self.registry.live() if self.registry is not None else []
        roots = self._roots()
        objs: dict[int, Any] = {id(m): m for m in models}
        callback = getattr(sys.modules.get(CALLBACK_MODULE), "Callback", None)
        parents: dict[int, dict[int, None]] = {}
        owner: dict[int, int] = {}  # id(a model's own container or function) -> id(model)
        held: dict[int, int] = {}  # id(object) -> references to it from models' attributes
        blockers: dict[int, list[str]] = {}
        down, down_objs = _name_map(roots, class_ids, callback)
        own = {id(models), id(objs), id(roots), id(down_objs), id(gc.garbage)}
        for m in models:
            _own_parts(m, owner, held, class_ids, self.internal, callback)
        # The first scan also discovers the models we did not know: an instance refers to its class.
        frontier: list[Any] = [*classes, *(m for m in models if id(m) not in self.internal)]
        discovered: list[Any] = []
        for depth in range(self.max_depth + 1):
            if not frontier or (depth and time.perf_counter() - t0 > self.time_limit):
                break
            args = tuple(frontier)
            found = gc.get_referrers(*args)
            self.scans += 1
            skip = own | {id(args), id(found), id(frontier), id(discovered)}
            if depth == 0:
                for r in found:
                    if id(type(r)) in class_ids and id(r) not in objs and id(r) not in skip:
                        objs[id(r)] = r
                        discovered.append(r)
                for m in discovered:
                    _own_parts(m, owner, held, class_ids, self.internal, callback)
                models.extend(discovered)
            frontier_ids = {id(o) for o in args} - (class_ids if depth == 0 else set())
            type_ids = {id(o) for o in args if isinstance(o, type)} if depth else set()
            candidates: list[int] = []
            for r in found:
                rid = id(r)
                if rid in skip or id(type(r)) in type_ids or _is_own_frame(r):
                    continue  # ours, or an instance of a class being followed
                kids = frontier_ids.intersection(map(id, gc.get_referents(r)))
                kids.discard(id(type(r)))
                model_id = owner.get(rid)
                if (model_id is None and type(r) is types.MethodType and rid not in down
                        and _package(r.__func__) in FRAMEWORKS and id(r.__self__) in kids):
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
                elif _follow(r, callback):
                    candidates.append(rid)
                else:
                    for kid in kids:
                        blockers.setdefault(kid, []).append(type(r).__qualname__)
            r = found = args = None
            frontier = self._settle(candidates, objs, parents, down, down_objs, held, roots)
            if depth == 0:  # the holders of models found by this scan: next scan
                frontier = [m for m in discovered if id(m) not in self.internal] + frontier
                discovered = []
        self.complete = not frontier
        self._chains(parents, roots, objs, {id(m) for m in models}, blockers)

    def _settle(self, candidates: list[int], objs: dict[int, Any],
                parents: dict[int, dict[int, None]], down: dict[int, list[int]],
                down_objs: dict[int, Any], held: dict[int, int],
                roots: dict[int, Any]) -> list[Any]:
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
            if isinstance(obj, type):
                continue  # a class bound to a name: its instances and subclasses refer to it
            if _refcount(obj) - _OWN_REFS > len(ups) + held.get(cid, 0):
                nxt.append(obj)  # someone else holds it too: look for them
        return nxt

    def _roots(self) -> dict[int, tuple[Any, Root | str]]:
        """Every object a chain may end at, by id, with how the user names it."""
        roots: dict[int, tuple[Any, Root | str]] = {}

        def add(obj: Any, root: Root) -> None:
            if obj is not None and id(obj) not in roots:
                roots[id(obj)] = (obj, root)

        shell, ns = self.shell, self.user_ns
        hidden = frozenset(getattr(shell, "user_ns_hidden", None) or ())
        add(ns, Root("ns", "", True, namespace=True, hidden=hidden))
        out = ns.get("Out")
        add(out if isinstance(out, dict) else None, Root("out", "Out", False))
        tracebacks = [("sys.last_traceback", getattr(sys, "last_traceback", None))]
        for name in ("last_value", "last_exc"):
            tb = getattr(getattr(sys, name, None), "__traceback__", None)
            tracebacks.append((f"sys.{name}.__traceback__", tb))
        if shell is not None:
            add(getattr(shell, "user_ns_hidden", None),
                Root("hidden", "get_ipython().user_ns_hidden", False))
            add(shell, Root("shell", "get_ipython()", False))
            add(getattr(shell, "displayhook", None),
                Root("displayhook", "get_ipython().displayhook", False))
            result = getattr(shell, "last_execution_result", None)
            add(result, Root("exec", "get_ipython().last_execution_result", False))
            tracebacks.append(("get_ipython().InteractiveTB.tb",
                               getattr(getattr(shell, "InteractiveTB", None), "tb", None)))
            error = getattr(result, "error_in_exec", None)
            tracebacks.append(("get_ipython().last_execution_result.error_in_exec.__traceback__",
                               getattr(error, "__traceback__", None)))
        for source, tb in tracebacks:
            for obj, path in _traceback_objects(source, tb):
                add(obj, Root("traceback", path, False))
        add(sys.__dict__, Root("sys", "sys", False, namespace=True))
        self._aliases = {id(v): k for k, v in ns.items()
                         if isinstance(v, types.ModuleType) and k not in hidden}
        for name, module in list(sys.modules.items()):  # named lazily: there are thousands
            if isinstance(module, types.ModuleType) and id(module.__dict__) not in roots:
                roots[id(module.__dict__)] = (module.__dict__, name)
        for frame in _running_frames():
            add(frame, Root("frame", f"<frame {frame.f_code.co_name}>", False))
        return roots

    def _chains(self, parents: dict[int, dict[int, None]], roots: dict[int, tuple[Any, Root | str]],
                objs: dict[int, Any], model_ids: set[int], blockers: dict[int, list[str]]) -> None:
        """Turn the holder graph into named chains, model by model."""
        for mid in model_ids:
            chains: list[Chain] = []
            stack: list[list[int]] = [[mid]]
            while stack and len(chains) < 4 * self.max_paths:
                ids = stack.pop()
                top = ids[-1]
                if len(ids) > 1 and (top in roots or top in model_ids):
                    down = [roots[i][0] if i in roots else objs[i] for i in reversed(ids)]
                    if top in roots:
                        chains.extend(_named(self._root(roots[top][1]), down))
                    else:  # starts at another model: its own paths come first
                        chains.extend(c for c in _named(Root("model", "", False), down, objs[top])
                                      if not (c.edges[0].kind == "attr"
                                              and _keras_nesting(c.objs[0], c.edges[0].key)))
                    continue
                if len(ids) <= self.max_depth + 1:
                    stack.extend([*ids, p] for p in reversed(parents.get(top, ())) if p not in ids)
            self.chains[mid] = chains
            if not chains:
                if any(p in model_ids for p in _above(mid, parents)):
                    self.internal.add(mid)  # e.g. Sequential._functional: part of its model
                else:
                    self.blockers[mid] = sorted({b for i in _above(mid, parents)
                                                 for b in blockers.get(i, ())}
                                                | set(blockers.get(mid, ())))

    def _root(self, root: Root | str) -> Root:
        if isinstance(root, Root):
            return root
        module = sys.modules.get(root)
        alias = self._aliases.get(id(module))
        return Root("module", alias or f"sys.modules[{root!r}]", alias is not None, namespace=True)

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
        mirrors = {c.text() for c in self.chains.get(id(model), ())
                   if c.root.kind in ("hidden", "displayhook") and c.text(mirror=True) in texts}
        unique = [pu for pu in dict.fromkeys(out) if pu[0] not in mirrors]
        unique.sort(key=lambda pu: (not pu[1], _awkwardness(pu[0]), len(pu[0]), pu[0]))
        return unique[: self.max_paths]


def _own_parts(model: Any, owner: dict[int, int], held: dict[int, int], class_ids: set[int],
               internal: set[int], callback: type | None) -> None:
    """Mark what a model keeps on itself as the model's own: its ``__dict__``, attribute
    containers, the functions Keras stores on it (closures over the model) with their cells and
    wrapped methods, and the containers inside framework attributes (TF's dict wrappers). Count
    the references its attributes make (``held``); note the models Keras nests in it. Layers,
    weights and tensors are never entered."""
    attrs = _instance_dict(model)
    if not isinstance(attrs, dict):
        return
    mine = id(model)
    owner[id(attrs)] = mine
    functions: list[Any] = []
    boxes: list[Any] = []  # containers and framework helpers: entered for containers only
    for name, value in list(attrs.items()):
        held[id(value)] = held.get(id(value), 0) + 1
        if id(type(value)) in class_ids:
            if _keras_nesting(model, name):
                internal.add(id(value))  # e.g. Sequential._functional: part of the Sequential
        elif type(value) is types.FunctionType:
            functions.append(value)
        elif type(value) is types.MethodType:
            owner[id(value)] = mine
        elif issubclass(type(value), _CONTAINERS) or (
                _package(type(value)) in FRAMEWORKS
                and not (callback is not None and isinstance(value, callback))):
            boxes.append(value)  # e.g. TF's _DictWrapper, which poses as a dict
    for _ in range(3):
        inner_boxes = []
        for box in boxes:
            if id(box) in owner:
                continue
            owner[id(box)] = mine
            if issubclass(type(box), _CONTAINERS) and len(box) > 1000:
                continue
            inner_boxes.extend(part for part in gc.get_referents(box)
                               if issubclass(type(part), _CONTAINERS))
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
            elif _package(type(value)) in FRAMEWORKS and id(type(value)) not in class_ids:
                parts.append(value)  # a tf.function: what it wraps is the model's too
                functions.extend(f for f in gc.get_referents(value)
                                 if type(f) is types.FunctionType)
        for part in parts:
            if part is not None:
                owner[id(part)] = mine


_MAPPED = ("ns", "out", "hidden", "displayhook", "exec", "traceback")


def _name_map(roots: dict[int, tuple[Any, Root | str]], class_ids: set[int], callback: type | None,
              max_depth: int = 3,
              max_size: int = 5000, max_nodes: int = 50_000) -> tuple[dict[int, list[int]],
                                                                       dict[int, Any]]:
    """Who holds the objects near the user's namespaces, one entry per reference: a bounded walk
    *down* (depth 3, small containers only) so that most holders a scan meets are already named.
    Models, modules and framework objects are not entered."""
    down: dict[int, list[int]] = {}
    down_objs: dict[int, Any] = {}
    level = [obj for obj, root in roots.values() if isinstance(root, Root) and root.kind in _MAPPED]
    budget = 20 * max_nodes  # references looked at, in all
    for _ in range(max_depth):
        nxt = []
        for parent in level:
            refs = gc.get_referents(parent)
            if len(refs) > max_size or budget < len(refs):
                continue
            budget -= len(refs)
            pid, ptype = id(parent), type(parent)
            for child in refs:
                cid = id(child)
                if (cid in roots or child is ptype or not gc.is_tracked(child)
                        or id(type(child)) in class_ids):
                    continue
                ups = down.get(cid)
                if ups is None:
                    if len(down_objs) >= max_nodes:
                        continue
                    down[cid] = ups = []
                    down_objs[cid] = child
                    if _follow(child, callback) and not isinstance(
                            child, (types.FrameType, types.TracebackType, BaseException)):
                        nxt.append(child)
                ups.append(pid)
        level = nxt
    return down, down_objs


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


def _named(root: Root, objs: list[Any], via: Any = None) -> list[Chain]:
    """Name each link of a chain; a holder that holds the child twice gives two chains."""
    links = [_edges(p, c) or [Edge(".<?>", "other")] for p, c in itertools.pairwise(objs)]
    return [Chain(root, *_fold_dicts(list(edges), objs), via)
            for edges in itertools.islice(itertools.product(*links), 8)]


def _fold_dicts(edges: list[Edge], objs: list[Any]) -> tuple[list[Any], list[Edge]]:
    """``obj`` -> its ``__dict__`` -> value reads ``obj.name`` (the dict leaves the chain)."""
    out_objs, out_edges = [objs[0]], []
    for i, edge in enumerate(edges):
        if out_edges and out_edges[-1].kind == "dict" and edge.kind == "item":
            out_objs[-1] = objs[i + 1]
            text = _attr_text(out_objs[-2], edge.key, objs[i + 1])
            out_edges[-1] = Edge(text, "attr", edge.key)
        elif out_edges and out_edges[-1].key == "f_locals" and edge.kind == "item":
            out_objs[-1] = objs[i + 1]  # frame -> its locals dict -> value: a local
            out_edges[-1] = Edge(f".f_locals{edge.text}", "local", edge.key)
        else:
            out_objs.append(objs[i + 1])
            out_edges.append(edge)
    return out_objs, out_edges


def _keras_nesting(outer: Any, name: Any) -> bool:
    """A link Keras made (``Sequential._functional``, ``Model._layers``), not the user's own."""
    if not isinstance(name, str) or not name.startswith("_"):
        return False
    return (_package(type(outer)) in FRAMEWORKS or name in ("_layers", "_functional")
            or name.startswith("_self_"))


def _edges(parent: Any, child: Any) -> list[Edge]:
    """How ``parent`` holds ``child``: one edge per place it holds it."""
    if isinstance(child, dict) and (isinstance(parent, type) or _instance_dict(parent) is child):
        return [Edge("", "dict")]
    if isinstance(parent, dict):
        edges = [Edge(f"[{_key_text(k)}]", "item", k) for k, v in list(parent.items())
                 if v is child]
        if not edges and any(k is child for k in parent):
            edges = [Edge(".keys()", "other")]  # held as a key
        return edges
    if isinstance(parent, (list, tuple)):
        ids = list(map(id, parent))
        return [Edge(f"[{i}]", "item", i) for i, x in enumerate(ids) if x == id(child)]
    if isinstance(parent, (set, frozenset)):
        return [Edge("{…}", "set")]
    if isinstance(parent, types.CellType):
        return [Edge(".cell_contents", "cell")]
    if isinstance(parent, types.FrameType):
        local = parent.f_locals
        if child is local:
            return [Edge(".f_locals", "link", "f_locals")]
        edges = [Edge(f".f_locals[{_key_text(k)}]", "local", k) for k, v in local.items()
                 if v is child]
        return edges + _link_edges(parent, child, ("f_back",))
    for kinds, names in _LINKS:
        if isinstance(parent, kinds):
            edges = _link_edges(parent, child, names)
            if edges:
                return edges
    return [Edge(_attr_text(parent, name, child), "attr", name)
            for name, value in _attributes(parent) if value is child]


_LINKS: tuple[tuple[Any, tuple[str, ...]], ...] = (
    (types.FunctionType, ("__closure__", "__defaults__", "__kwdefaults__")),
    (types.MethodType, ("__self__", "__func__")),
    (types.TracebackType, ("tb_frame", "tb_next")),
    (BaseException, ("__traceback__", "__context__", "__cause__", "args")),
    (types.GeneratorType, ("gi_frame",)),
    (types.CoroutineType, ("cr_frame",)),
    (property, ("fget", "fset", "fdel")),
    ((staticmethod, classmethod), ("__func__",)),
    (functools.partial, ("func", "args", "keywords")),
)


def _link_edges(parent: Any, child: Any, names: tuple[str, ...]) -> list[Edge]:
    out = []
    for name in names:
        try:
            if getattr(parent, name) is child:
                out.append(Edge(f".{name}", "link", name))
        except Exception:
            continue
    return out


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    d = obj.__dict__ if isinstance(obj, type) else _instance_dict(obj)
    if d is not None:
        yield from list(d.items())
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            try:
                yield name, object.__getattribute__(obj, name)
            except Exception:
                continue


def _attr_text(obj: Any, name: Any, child: Any) -> str:
    if not (isinstance(name, str) and name.isidentifier()):
        return f".__dict__[{name!r}]"
    # Keras keeps e.g. History.model in ``_model`` behind a property: show what users type.
    public = name[1:] if name.startswith("_") and not name.startswith("__") else ""
    if public and _package(type(obj)) in FRAMEWORKS and isinstance(
            getattr(type(obj), public, None), property):
        try:
            if getattr(obj, public) is child:
                return f".{public}"
        except Exception:
            pass
    return f".{name}"


def _instance_dict(obj: Any) -> Any:
    try:
        return object.__getattribute__(obj, "__dict__")
    except Exception:
        return None


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(key, (int, float, bool, bytes, type(None))):
        return repr(key)
    if isinstance(key, tuple) and len(repr(key)) < 60:
        return repr(key)
    return f"<{type(key).__name__} key>"


def _follow(obj: Any, callback: type | None) -> bool:
    """Whether to keep walking up from ``obj`` (no: framework internals, modules)."""
    if issubclass(type(obj), (*_CONTAINERS, types.CellType, types.MethodType, types.FrameType,
                              types.TracebackType, BaseException)):
        return True  # by type: a proxy (TF's _DictWrapper) also claims to be a dict
    if isinstance(obj, types.ModuleType):
        return False
    if isinstance(obj, types.FunctionType):
        return _package(obj) not in FRAMEWORKS
    if (callback is not None and isinstance(obj, callback)) or type(obj).__name__ in _FOLLOWED:
        return True
    return _package(obj if isinstance(obj, type) else type(obj)) not in FRAMEWORKS


def _package(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    return module.partition(".")[0] if isinstance(module, str) else ""


def _subclasses(cls: type) -> list[type]:
    out: list[type] = []
    todo = [cls]
    while todo:
        c = todo.pop()
        if c not in out:
            out.append(c)
            todo.extend(type.__subclasses__(c))
    return out


def _traceback_objects(source: str, tb: Any) -> Iterator[tuple[Any, str]]:
    """Each traceback object and frame of a chain, with its path from ``source``."""
    path = source
    for _ in range(1000):
        if not isinstance(tb, types.TracebackType):
            return
        yield tb, path
        yield tb.tb_frame, f"{path}.tb_frame"
        tb, path = tb.tb_next, f"{path}.tb_next"


def _running_frames() -> Iterator[types.FrameType]:
    for frame in sys._current_frames().values():
        while frame is not None:
            if not _is_own_frame(frame):
                yield frame
            frame = frame.f_back


def _is_own_frame(obj: Any) -> bool:
    """Frames of this module and of freeing.py: they hold the models being probed."""
    return (isinstance(obj, types.FrameType)
            and obj.f_globals.get("__name__") in (__name__, f"{__package__}.freeing"))


def _above(mid: int, parents: dict[int, dict[int, None]]) -> Iterator[int]:
    seen, todo = {mid}, [mid]
    while todo:
        for p in parents.get(todo.pop(), ()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
                yield p


def _awkwardness(path: str) -> int:
    """Sort key: stable, public paths first (``Out[7]`` outlives ``_7``, which outlives ``_``)."""
    head = re.match(r"Out\[|_\d+\b|_+\W|sys\.|get_ipython", path)
    rank = {"Out[": 3, "sys.": 3, "get_ipython": 6}.get(head.group(), 0) if head else 0
    if head and not rank:
        rank = 4 if head.group()[1:2].isdigit() else 5
    return rank + path.count("._") + 2 * path.count("<")


# -- the report ---------------------------------------------------------------------------------
def sizes(model: Any) -> tuple[int | None, int | None, int | None]:
    """(params, weight bytes, optimizer bytes); None where unknown (e.g. an unbuilt model)."""
    try:
        weights = list(model.weights)
        built = bool(getattr(model, "built", True))
    except Exception:
        return None, None, None
    params, nbytes = _count(weights)
    optimizer = getattr(model, "optimizer", None)
    try:
        opt_bytes = _count(list(optimizer.variables))[1] if optimizer is not None else 0
    except Exception:
        opt_bytes = None
    if not built and not weights:
        return None, None, opt_bytes
    return params, nbytes, opt_bytes


def _count(variables: list[Any]) -> tuple[int, int | None]:
    params, nbytes = 0, 0
    for v in variables:
        n = 1
        for d in tuple(v.shape):
            n *= int(d)
        params += n
        dtype = str(getattr(v.dtype, "name", v.dtype))
        size = _ITEMSIZE.get(dtype)
        if size is None:
            try:
                size = sys.modules["numpy"].dtype(dtype).itemsize
            except Exception:
                return params, None
        nbytes += n * size
    return params, nbytes


def latest_of(registry: ModelRegistry | None,
              latest_runs: Mapping[str, int] | None) -> dict[str, int]:
    """label -> latest run number, from the registry and the caller's own figures."""
    latest = dict(registry.latest if registry is not None else {})
    for label, number in (latest_runs or {}).items():
        latest[label] = max(latest.get(label, 0), number)
    return latest


def leaks_of(probe: Probe, registry: ModelRegistry | None,
             latest: Mapping[str, int]) -> list[tuple[Any, Leak]]:
    """(model, its Leak) for every model the probe found, Keras' nested models left out."""
    return [(m, _leak(m, probe, probe.paths(m), registry, latest))
            for m in probe.models if id(m) not in probe.internal]


def build_report(probe: Probe, registry: ModelRegistry | None,
                 latest_runs: Mapping[str, int] | None) -> LeakReport:
    pairs = leaks_of(probe, registry, latest_of(registry, latest_runs))
    reachable = sorted((leak for _, leak in pairs if leak.paths),
                       key=lambda leak: (not leak.stale, leak.path))
    unreachable = tuple(leak for _, leak in pairs if not leak.paths)
    notes = () if probe.complete else (
        f"the walk stopped after {probe.scans} heap scans (depth {probe.max_depth} or "
        f"{probe.time_limit:g} s limit): some holders may be missing",)
    return LeakReport(tuple(reachable), unreachable, probe.seconds, probe.scans,
                      probe.complete, notes)


def _leak(model: Any, probe: Probe, paths: list[tuple[str, bool]],
          registry: ModelRegistry | None, latest: Mapping[str, int]) -> Leak:
    origin = registry.origin(model) if registry is not None else None
    last = registry.last_run(model) if registry is not None else None
    used = last or origin
    newest = latest.get(used.label, used.run_number) if used is not None else None
    old = used is not None and newest is not None and used.run_number < newest
    user = any(u for _, u in paths)
    if not paths:
        blockers = probe.blockers.get(id(model)) or []
        reason = ("no path from your names; held only by its own cycles or framework internals"
                  + (f" ({', '.join(blockers[:4])})" if blockers else ""))
        if not probe.complete:
            reason += "; the walk stopped early"
    elif old:
        reason = f"from run {used.label!r} #{used.run_number}; the latest is #{newest}"
    elif not user:
        reason = "held only by IPython's caches, a traceback or a module, not by your names"
    elif used is None:
        reason = "bound to your names (made outside a tracked run)"
    else:
        reason = f"made by the latest run of {used.label!r} and bound to your names"
    holder, holder_type, inside = _holder(probe, model, paths[0][0] if paths else "")
    params, weight_bytes, optimizer_bytes = sizes(model)
    return Leak(
        path=paths[0][0] if paths else "", paths=tuple(p for p, _ in paths),
        model_name=str(getattr(model, "name", "?")), class_name=type(model).__name__,
        params=params, weight_bytes=weight_bytes, optimizer_bytes=optimizer_bytes,
        run_label=origin.label if origin else None,
        run_number=origin.run_number if origin else None,
        stale=old or not user, reason=reason, holder=holder, holder_type=holder_type,
        inside=inside, last_run_number=last.run_number if last else None)


def _holder(probe: Probe, model: Any, best: str) -> tuple[str | None, str | None, str | None]:
    """(what holds the model directly on the best path, its type, the model it lives in)."""
    chains = probe.chains.get(id(model), [])
    inside = None
    if chains and all(c.via is not None for c in chains):
        inside = str(getattr(chains[0].via, "name", "?"))
    chosen = next((c for c in chains if c.via is None and c.text() == best), None)
    chosen = chosen or next((c for c in chains if len(c.objs) >= 2), None)
    if chosen is None or len(chosen.objs) < 2:
        return None, None, inside
    parent, edge = chosen.objs[-2], chosen.edges[-1]
    kind = type(parent).__qualname__
    if edge.kind == "cell" and len(chosen.objs) >= 4:
        func, closure = chosen.objs[-4], chosen.objs[-3]
        if isinstance(func, types.FunctionType) and isinstance(closure, tuple):
            index = next((i for i, c in enumerate(closure) if c is parent), 0)
            names = func.__code__.co_freevars
            var = names[index] if index < len(names) else "?"
            return f"closure variable {var!r} of {func.__qualname__}", "cell", inside
    if edge.kind == "local":
        return f"local {edge.key!r} of {parent.f_code.co_qualname}()", kind, inside
    if chosen.root.kind == "ns" and len(chosen.objs) == 2:
        return "your namespace", kind, inside
    return kind, kind, inside


def find_leaks(user_ns: Mapping[str, Any] | None = None, registry: ModelRegistry | None = None,
               *, shell: Any = None, latest_runs: Mapping[str, int] | None = None,
               max_depth: int = 12, time_limit: float = 1.0, max_paths: int = 12) -> LeakReport:
    """Every live Keras model, with every path that holds it, its size and its run.

    ``user_ns`` defaults to ``shell.user_ns``; ``shell`` adds IPython's hidden holders (output
    cache, ``_``, last result, traceback). ``latest_runs`` (label -> latest run number) decides
    what is stale, on top of what ``registry`` saw. Never keeps a model alive.
    """
    probe = Probe(user_ns, registry, shell=shell, max_depth=max_depth, time_limit=time_limit,
                  max_paths=max_paths)
    try:
        return build_report(probe.run(), registry, latest_runs)
    finally:
        probe.close()
