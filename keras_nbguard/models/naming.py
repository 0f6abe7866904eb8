"""How a chain of holders reads as a path the user can type: ``models[3]``, ``trainer.best``,
``Out[7].model``, ``cb.__closure__[0].cell_contents``, ``s{…}`` (a set can't be indexed);
where no expression reaches further (a link with no name, a dict key), the rest is said in
words: ``gan — its internal dict holds it as a dict key``. A chain runs from a root (see
roots.py) down to a model."""

from __future__ import annotations

import functools
import itertools
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from keras_nbguard.models.frameworks import FRAMEWORKS, instance_dict, package_of
from keras_nbguard.models.records import UNTYPEABLE

_HIDDEN_NAME = re.compile(r"_+|_\d+|_i+\d*|_(ih|oh|dh)|In|Out|exit|quit|get_ipython")


class Root(NamedTuple):
    """Where a chain starts, and how the user types it."""

    kind: str  # ns, hidden, out, displayhook, exec, traceback, sys, module, frame, shell, model
    prefix: str  # how the user types it; "" for the user namespace (its keys are the names)
    user: bool  # a name the user works with (not a cache, a traceback or someone's module)
    namespace: bool = False  # a namespace dict: its keys read as names / attributes
    hidden: frozenset[str] = frozenset()  # ns: names that are IPython's, not the user's


class Edge(NamedTuple):
    """One link of a chain: how a holder holds the next object."""

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
            if edge.kind == "other":  # no expression reaches past here: say it in words
                return f"{out or self._describe(0)} — {self._words(i)}"
            if i == 0 and namespace and edge.kind in ("item", "attr"):
                key = edge.key
                if isinstance(key, str) and key.isidentifier():
                    out += f".{key}" if out else key
                else:
                    out = f"{out}.__dict__{edge.text}" if out else f"globals()[{key!r}]"
            else:
                out += edge.text
        return out

    def _describe(self, i: int) -> str:
        return f"a {type(self.objs[i]).__qualname__}"

    def _words(self, i: int) -> str:
        """What holds the model from the ``i``-th link on, where no Python expression reaches:
        ``a repeat that holds it internally``."""
        what = f"a {type(self.objs[i]).__qualname__} that holds it"
        if self.edges[i].text == ".keys()":
            return f"{what} as a key {UNTYPEABLE}"
        hops = [type(o).__qualname__ for o in self.objs[i + 1 : -1]]
        where = f"in its internal {' → '.join(hops)}" if hops else "internally"
        return f"{what} {where} {UNTYPEABLE}"

    @property
    def user(self) -> bool:
        if self.root.kind != "ns":
            return self.root.user
        name = self.first_key
        return (
            isinstance(name, str)
            and name not in self.root.hidden
            and not _HIDDEN_NAME.fullmatch(name)
        )


def named_chains(root: Root, objs: list[Any], via: Any = None) -> list[Chain]:
    """Name each link of a chain; a holder that holds the child twice gives two chains."""
    links = [_edges(p, c) or [Edge("", "other")] for p, c in itertools.pairwise(objs)]
    return [
        Chain(root, *_fold_dicts(list(edges), objs), via)
        for edges in itertools.islice(itertools.product(*links), 8)
    ]


def _fold_dicts(edges: list[Edge], objs: list[Any]) -> tuple[list[Any], list[Edge]]:
    """``obj`` -> its ``__dict__`` -> value reads ``obj.name`` (the dict leaves the chain)."""
    out_objs, out_edges = [objs[0]], []  # type: list[Any], list[Edge]
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


def _edges(parent: Any, child: Any) -> list[Edge]:
    """How ``parent`` holds ``child``: one edge per place it holds it."""
    if isinstance(child, dict) and (isinstance(parent, type) or instance_dict(parent) is child):
        return [Edge("", "dict")]
    if isinstance(parent, dict):
        edges = [
            Edge(f"[{_key_text(k)}]", "item", k) for k, v in list(parent.items()) if v is child
        ]
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
        edges = [
            Edge(f".f_locals[{_key_text(k)}]", "local", k) for k, v in local.items() if v is child
        ]
        return edges + _link_edges(parent, child, ("f_back",))
    for kinds, names in _LINKS:
        if isinstance(parent, kinds):
            edges = _link_edges(parent, child, names)
            if edges:
                return edges
    return [
        Edge(_attr_text(parent, name, child), "attr", name)
        for name, value in _attributes(parent)
        if value is child
    ]


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
    d = obj.__dict__ if isinstance(obj, type) else instance_dict(obj)
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
    if (
        public
        and package_of(type(obj)) in FRAMEWORKS
        and isinstance(getattr(type(obj), public, None), property)
    ):
        try:
            if getattr(obj, public) is child:
                return f".{public}"
        except Exception:
            pass
    return f".{name}"


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(key, (int, float, bool, bytes, type(None))):
        return repr(key)
    if isinstance(key, tuple) and len(repr(key)) < 60:
        return repr(key)
    return f"<{type(key).__name__} key>"


# IPython's output cache after the names it outlives; the last result (replaced by every cell)
# and get_ipython()'s attributes last
_HEAD_RANKS = {"Out[": 3, "sys.": 3, "get_ipython": 6, "the last result": 6}


def awkwardness(path: str) -> int:
    """Sort key: stable, public paths first (``Out[7]`` outlives ``_7``, which outlives ``_``)."""
    head = re.match(r"Out\[|_\d+\b|_+\W|sys\.|get_ipython|the last result", path)
    rank = _HEAD_RANKS.get(head.group(), 0) if head else 0
    if head and not rank:
        rank = 4 if head.group()[1:2].isdigit() else 5
    return rank + path.count("._") + 2 * path.count("<") + 8 * (" — " in path)
