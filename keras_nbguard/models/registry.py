"""Which tracked run made each Keras model, by weak reference only, and the watch that sees every
model a run builds (also those it never fits)."""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from keras_nbguard.collectors.patching import AttributePatch, PatchEveryKeras, PatchGroup
from keras_nbguard.models.nodes import graph_nodes


class RunRef(NamedTuple):
    """A tracked run: its label, its number and its id. Numbers can repeat (a history reset, an
    earlier kernel's runs): recency is the order runs were noted in, and ``run_id`` tells two runs
    of the same number apart."""

    label: str
    run_number: int
    run_id: str = ""


class _Ref(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that also carries its model's runs (slots: no dict per model)."""

    __slots__ = ("created", "held_unseen", "key", "last")
    created: RunRef
    key: int
    last: RunRef
    held_unseen: bool  # a cut of its callbacks' links did not free it (tentative.py)


class _NodeRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a Keras node, with the run that made it."""

    __slots__ = ("into", "key", "run")
    into: str  # the model of that run whose graph it is in, as you named it ("" unknown)
    key: int
    run: RunRef


MADE_OUTSIDE = RunRef("", 0, "outside")  # made by a cell run without the magic


def _deref(item: Any) -> Any:
    return item() if isinstance(item, weakref.ref) else item


class ModelRegistry:
    """Which run made each model, by weak reference only: a model dies whenever the user lets go.

    A run hands over, when it ends, the models it fit (``FitTimer.models``) and those it built
    (``CreationWatch.models``): the first run to hand a model over made it, the latest used it
    (fit, built, or built a model out of it).
    Runs don't nest, so the order they are noted in is the order they happened: a model is stale
    when a later run of its label was noted, whatever the run numbers say.
    """

    def __init__(self) -> None:
        self._refs: dict[int, _Ref] = {}
        self._nodes: dict[int, _NodeRef] = {}  # the Keras nodes runs made (probes/nodes.py)
        self.latest: dict[str, RunRef] = {}  # label -> the run of that label noted last
        self._noted = 0

    def note_run(
        self,
        label: str,
        run_number: int,
        models: Iterable[Any] = (),
        run_id: str | None = None,
        nodes: Iterable[Any] = (),
        names: Mapping[int, str] | None = None,
        built: Iterable[Any] | None = None,
    ) -> int:
        """Record the end of a run; ``models`` are models or weak references to them, ``nodes``
        the Keras nodes it made (or weak references); ``names``: id(model) -> the name you bound
        it to; ``built``: those of ``models`` the run constructed (None: all it hands over), so
        that one a cell without the magic made and the run only fit is made outside a run
        (keras.io's knowledge distillation: the setup's ``student_scratch`` read "made by #1").
        Returns how many of the models this run created (seen for the first time)."""
        self._noted += 1
        run = RunRef(label, run_number, run_id or f"noted-{self._noted}")
        made_here = None if built is None else {id(_deref(item)) for item in built}
        self.latest[label] = run
        created = 0
        into: dict[int, str] = {}  # id(node) -> the model whose graph it is in
        for item in models:
            model = item() if isinstance(item, weakref.ref) else item
            if model is None:
                continue
            named = (names or {}).get(id(model))
            for node in graph_nodes(model):
                if named or id(node) not in into:
                    into[id(node)] = named or str(getattr(model, "name", ""))
            ref = self._ref(model)
            if ref is None:
                ref = _Ref(model, self._forget)
                outside = made_here is not None and id(model) not in made_here
                ref.key, ref.held_unseen = id(model), False
                ref.created = MADE_OUTSIDE if outside else run
                self._refs[ref.key] = ref
                created += not outside
            ref.last = run
            for part in _reused_parts(model):  # an earlier run's layer it is made of: used now
                part_ref = self._ref(part)
                if part_ref is not None:
                    part_ref.last = run
        for item in nodes:
            node = item() if isinstance(item, weakref.ref) else item
            if node is not None and id(node) not in self._nodes:
                try:
                    node_ref = _NodeRef(node, self._forget_node)
                except TypeError:
                    continue
                node_ref.key, node_ref.run = id(node), run
                node_ref.into = into.get(id(node), "")
                self._nodes[node_ref.key] = node_ref
        return created

    def earlier_nodes(self, label: str | None, latest: bool = False) -> list[tuple[Any, RunRef]]:
        """(node, the run that made it) for the live nodes made by runs of ``label`` (every label:
        None) before the latest of that label (``latest``: that one's too); strong references:
        drop the list soon."""
        out = []
        for ref in list(self._nodes.values()):
            node = ref()
            if node is None or (label is not None and ref.run.label != label):
                continue
            if latest or self.latest.get(ref.run.label) != ref.run:
                out.append((node, ref.run))
        return out

    def node_run(self, node: Any) -> tuple[RunRef, str] | None:
        """(the run that made ``node``, the model it went into); None if no run we know of."""
        ref = self._nodes.get(id(node))
        return (ref.run, ref.into) if ref is not None and ref() is node else None

    def origin(self, model: Any) -> RunRef | None:
        """The run that created ``model`` (label, run number); None if no run we know of."""
        ref = self._ref(model)
        return None if ref is None else ref.created

    def last_run(self, model: Any) -> RunRef | None:
        """The latest run that created or fit ``model``."""
        ref = self._ref(model)
        return None if ref is None else ref.last

    def is_stale(self, model: Any) -> bool:
        """Whether a later run of the label that last used ``model`` has been noted."""
        used = self.last_run(model)
        return used is not None and self.latest.get(used.label, used) != used

    def held_unseen(self, model: Any) -> bool:
        """Whether something the cheap walk does not see kept ``model`` alive (tentative.py)."""
        ref = self._ref(model)
        return ref is not None and ref.held_unseen

    def mark_held_unseen(self, model: Any) -> None:
        ref = self._ref(model) if model is not None else None
        if ref is not None:
            ref.held_unseen = True

    def of_label(self, label: str) -> list[Any]:
        """The live models that a run of ``label`` used last (strong references: drop soon)."""
        return [
            m
            for m, ref in ((r(), r) for r in list(self._refs.values()))
            if m is not None and ref.last.label == label
        ]

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

    def _forget_node(self, ref: _NodeRef) -> None:
        if self._nodes.get(ref.key) is ref:
            del self._nodes[ref.key]


def _reused_parts(model: Any) -> list[Any]:
    """The layers ``model`` is made of, but itself: a model an earlier run made and this one's
    model reuses (``head(encoder(inputs))`` with run 1's ``encoder``) is this run's too, not
    stale."""
    flatten = getattr(model, "_flatten_layers", None)
    try:
        return list(flatten(include_self=False, recursive=True)) if callable(flatten) else []
    except Exception:
        return []


class CreationWatch:
    """While installed, every Keras model built is remembered weakly: a scoped, reversible patch
    of ``Model.__new__`` (every model class goes through it), so that models a run built but never
    fit are attributed to it too. Costs one weak reference per model built. The nodes of Keras'
    graph the run makes (``Node.__init__``) are remembered the same way: the release step cuts
    those of earlier runs out of the layers that outlive them (probes/nodes.py)."""

    def __init__(self) -> None:
        self.models: list[weakref.ref[Any]] = []
        self.nodes: list[weakref.ref[Any]] = []
        self.watched = False  # a Keras' Model.__new__ was patched: ``models`` is every one built
        self._scope = PatchEveryKeras()

    def install(self) -> None:
        self._scope.install(self._patch)

    def uninstall(self) -> None:
        self._scope.uninstall()

    def _patch(self, package: types.ModuleType) -> AttributePatch | PatchGroup | None:
        cls = package.Model
        original = cls.__dict__.get("__new__")
        if original is None:  # a Keras without its own __new__: models it builds but never
            return None  # fits are not attributed to the run (fitted ones still are)
        make = original.__func__ if isinstance(original, staticmethod) else original
        seen = self.models

        def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            obj = make(klass, *args, **kwargs)
            if not seen or seen[-1]() is not obj:  # Model(inputs, outputs) comes through twice
                seen.append(weakref.ref(obj))
            return obj

        patch = AttributePatch(cls, "__new__", staticmethod(__new__))
        self.watched = True
        node_patch = self._patch_nodes(package)
        return patch if node_patch is None else PatchGroup([patch, node_patch])

    def _patch_nodes(self, package: types.ModuleType) -> AttributePatch | None:
        module = sys.modules.get(_NODE_MODULE.get(package.__name__, ""))
        node_class = getattr(module, "Node", None)
        init = getattr(node_class, "__init__", None) if isinstance(node_class, type) else None
        if init is None:
            return None  # no node graph to clean after this Keras: its models still go
        made = self.nodes

        def __init__(node: Any, *args: Any, **kwargs: Any) -> None:
            __tracebackhide__ = True
            init(node, *args, **kwargs)
            made.append(weakref.ref(node))

        return AttributePatch(node_class, "__init__", __init__)


_NODE_MODULE = {"keras": "keras.src.ops.node", "tf_keras": "tf_keras.src.engine.node"}
