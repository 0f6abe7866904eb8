"""Where a chain may end: the objects the user can name (the namespace, IPython's output cache
and ``_``/``__``/``___``, the last traceback, ``sys``, every module, running frames), and a map of
who holds what just below the user's namespaces, so most holders a heap scan meets are named
without another scan."""

from __future__ import annotations

import gc
import operator
import sys
import types
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from keras_nbguard.models.frameworks import worth_following
from keras_nbguard.models.naming import Root
from keras_nbguard.prepare.gcfreeze import is_users_module

# id -> (the object, how it is named): a Root, or a module's name (named lazily: there are
# thousands of modules and few chains end at one).
Roots = dict[int, tuple[Any, Root | str]]
_MAPPED = ("ns", "out", "hidden", "displayhook", "exec", "traceback")
_PACKAGE = __name__.rpartition(".")[0]  # keras_nbguard.models: the leak finder and free()


class FoundRoots(NamedTuple):
    roots: Roots  # every object a chain may end at, by id, with how the user names it
    aliases: dict[int, str]  # id of a module the user imported under a name of their own -> it
    named: list[Any]  # the roots that are not a module's namespace (a few dozen, of thousands)
    users_modules: list[dict[str, Any]]  # the namespaces of the user's own modules


def find_roots(ns: Mapping[str, Any], shell: Any) -> FoundRoots:
    """Where the chains of a walk may end (``FoundRoots``)."""
    roots: Roots = {}

    def add(obj: Any, root: Root) -> None:
        if obj is not None and id(obj) not in roots:
            roots[id(obj)] = (obj, root)

    hidden = frozenset(getattr(shell, "user_ns_hidden", None) or ())
    add(ns, Root("ns", "", True, namespace=True, hidden=hidden))
    out = ns.get("Out")
    add(out if isinstance(out, dict) else None, Root("out", "Out", False))
    tracebacks = [("sys.last_traceback", getattr(sys, "last_traceback", None))]
    for name in ("last_value", "last_exc"):
        tb = getattr(getattr(sys, name, None), "__traceback__", None)
        tracebacks.append((f"sys.{name}.__traceback__", tb))
    if shell is not None:
        add(
            getattr(shell, "user_ns_hidden", None),
            Root("hidden", "get_ipython().user_ns_hidden", False),
        )
        add(shell, Root("shell", "get_ipython()", False))
        add(
            getattr(shell, "displayhook", None),
            Root("displayhook", "get_ipython().displayhook", False),
        )
        result = getattr(shell, "last_execution_result", None)
        add(result, Root("exec", "get_ipython().last_execution_result", False))
        tracebacks.append(
            (
                "get_ipython().InteractiveTB.tb",
                getattr(getattr(shell, "InteractiveTB", None), "tb", None),
            )
        )
        error = getattr(result, "error_in_exec", None)
        tracebacks.append(
            (
                "get_ipython().last_execution_result.error_in_exec.__traceback__",
                getattr(error, "__traceback__", None),
            )
        )
    for source, tb in tracebacks:
        for obj, path in _traceback_objects(source, tb):
            add(obj, Root("traceback", path, False))
    add(sys.__dict__, Root("sys", "sys", False, namespace=True))
    aliases = {
        id(v): k for k, v in ns.items() if isinstance(v, types.ModuleType) and k not in hidden
    }
    frames = [f for f in _running_frames() if id(f) not in roots]
    named = [obj for obj, _ in roots.values()] + frames
    modules, users_modules = MODULES.now()
    roots = {**modules, **roots}  # a namespace of yours is named as yours, not as a module
    for frame in frames:
        roots[id(frame)] = (frame, Root("frame", f"<frame {frame.f_code.co_name}>", False))
    return FoundRoots(roots, aliases, named, users_modules)


class ModuleNamespaces:
    """Every module's namespace as a root (named lazily by its module's name), with which of
    them are the user's own modules. Looked over again only when ``sys.modules`` changed: there
    are thousands, the same from one walk to the next (looking them over took ~8 ms of a walk
    here; handing out what is remembered takes ~1.5 ms). Remembered weakly: a module taken out
    of ``sys.modules`` is never kept alive by us."""

    def __init__(self) -> None:
        self._ids: tuple[int, ...] = ()  # sys.modules' values as last looked over, by id
        self._keys: list[int] = []  # each module's namespace, by id
        self._modules: list[weakref.ref[types.ModuleType]] = []
        self._names: list[str] = []
        self._users: list[int] = []  # the positions of the user's own modules

    def now(self) -> tuple[Roots, list[dict[str, Any]]]:
        """The modules' namespaces as roots, and the user's own modules' namespaces."""
        ids = tuple(map(id, sys.modules.values()))  # ~0.1 ms; a module that came or went moves
        if ids != self._ids:
            self._look_over()
            self._ids = ids
        modules = list(map(operator.call, self._modules))  # C loops from here on: ~0.5 ms
        if None in modules:  # one went while its id stayed (taken by a new object): look again
            self._ids = ()
            return self.now()
        namespaces = list(map(vars, modules))
        roots: Roots = dict(zip(self._keys, zip(namespaces, self._names, strict=True), strict=True))
        return roots, [namespaces[i] for i in self._users]

    def _look_over(self) -> None:
        self._keys, self._modules, self._names, self._users = [], [], [], []
        seen: set[int] = set()
        for name, module in list(sys.modules.items()):
            if isinstance(module, types.ModuleType) and id(module.__dict__) not in seen:
                seen.add(id(module.__dict__))
                if is_users_module(module.__dict__):
                    self._users.append(len(self._keys))
                self._keys.append(id(module.__dict__))
                self._modules.append(weakref.ref(module))
                self._names.append(name)


MODULES = ModuleNamespaces()


def module_root(name: str, aliases: Mapping[int, str]) -> Root:
    """How the user names a module: by their own alias for it, else ``sys.modules[...]``."""
    module = sys.modules.get(name)
    alias = aliases.get(id(module))
    return Root("module", alias or f"sys.modules[{name!r}]", alias is not None, namespace=True)


def name_map(
    roots: Roots,
    named: list[Any],  # the roots that are not modules' (``find_roots``): where the map starts
    class_ids: set[int],
    callback: tuple[type, ...],
    max_depth: int = 3,
    max_size: int = 5000,
    max_nodes: int = 50_000,
) -> tuple[dict[int, list[int]], dict[int, Any]]:
    """Who holds the objects near the user's namespaces, one entry per reference: a bounded walk
    *down* (depth 3, small containers only) so that most holders a scan meets are already named.
    Models, modules and framework objects are not entered."""
    down: dict[int, list[int]] = {}
    down_objs: dict[int, Any] = {}
    level = [obj for obj in named if _mapped(roots[id(obj)][1])]  # the roots not modules'
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
                if (
                    cid in roots
                    or child is ptype
                    or not gc.is_tracked(child)
                    or id(type(child)) in class_ids
                ):
                    continue
                ups = down.get(cid)
                if ups is None:
                    if len(down_objs) >= max_nodes:
                        continue
                    down[cid] = ups = []
                    down_objs[cid] = child
                    if worth_following(child, callback) and not isinstance(
                        child, (types.FrameType, types.TracebackType, BaseException)
                    ):
                        nxt.append(child)
                ups.append(pid)
        level = nxt
    return down, down_objs


def _mapped(root: Root | str) -> bool:
    return isinstance(root, Root) and root.kind in _MAPPED


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
    for top in sys._current_frames().values():
        frame: types.FrameType | None = top
        while frame is not None:
            if not is_own_frame(frame):
                yield frame
            frame = frame.f_back


def is_own_frame(obj: Any) -> bool:
    """Frames of this package (the leak finder, free()): they hold the models being probed."""
    if not isinstance(obj, types.FrameType):
        return False
    name = obj.f_globals.get("__name__")
    return isinstance(name, str) and (name == _PACKAGE or name.startswith(f"{_PACKAGE}."))
