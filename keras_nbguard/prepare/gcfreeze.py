"""The frameworks' own objects out of the garbage collector's sight, so a run's gc is cheap.

A full ``gc.collect()`` scans every tracked object. Once TensorFlow and Keras are imported that is
~400k objects, almost all of them the frameworks' own modules, functions and classes, alive for the
kernel's life: 160 ms a collection on a quiet machine, and ``clear_session`` collects again. Frozen
(``gc.freeze()``), they are never scanned: the same collection takes ~10 ms.

A frozen object is never collected, so nothing the user builds may be frozen. We freeze once per
framework, right after its top-level package has finished importing (an import hook), when no
object of it can exist yet; or at load, when a framework is already imported and no Keras layer
exists. Plain references still free frozen objects as usual: only reference cycles would leak, and
the objects frozen are modules, classes and functions that live as long as the kernel anyway.

A heap scan (``gc.get_referrers``) does not see frozen objects either: ``frozen_holders`` finds,
among the containers the leak finder ends its chains at (namespaces, modules), those that hold
one of the objects it looks for.
"""

from __future__ import annotations

import gc
import importlib.abc
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

FRAMEWORKS = ("tensorflow", "keras", "tf_keras", "jax", "torch")
OFF_VARIABLE = "KERAS_NBGUARD_GC_FREEZE"  # "0": never freeze


class FrameworkFreeze:
    """One per Session: the import hook, and what was frozen when."""

    def __init__(self, warn: Callable[[str], object] | None = None) -> None:
        self.frozen: list[tuple[str, int, float]] = []  # (framework, objects frozen, seconds)
        self.reason: str | None = None  # why nothing is frozen, when nothing is
        self._warn = warn
        self._hook: _AfterImport | None = None

    @property
    def active(self) -> bool:
        return _frozen_here()

    def install(self) -> None:
        """Freeze what is imported already (if safe), and hook the frameworks still to come."""
        if os.environ.get(OFF_VARIABLE, "").strip() == "0":
            self.reason = f"off ({OFF_VARIABLE}=0)"
            return
        imported = [name for name in FRAMEWORKS if name in sys.modules]
        if imported and not self.active:
            if _framework_objects_exist():
                self.reason = (
                    "Keras objects existed when the extension loaded; load it before "
                    "building models (or use the keras-nbguard kernel) for cheaper runs"
                )
            else:
                self._freeze(imported[0])
        pending = [name for name in FRAMEWORKS if name not in sys.modules]
        if pending:
            self._hook = _AfterImport(pending, self._imported)
            sys.meta_path.insert(0, self._hook)

    def uninstall(self) -> None:
        """Remove the import hook. What is frozen stays so: those objects live as long as the
        kernel, and unfreezing would only make every later collection slow again."""
        if self._hook is not None:
            if self._hook in sys.meta_path:
                sys.meta_path.remove(self._hook)
            self._hook = None

    def describe(self) -> str:
        if self.frozen:
            # each count is all the kernel held as that import ended, not that framework's own
            # ("jax (334,455 objects), tensorflow (21,523)": TensorFlow imports jax itself)
            total = sum(count for _, count, _ in self.frozen)
            names = ", ".join(name for name, _, _ in self.frozen)
            return (
                f"{total:,} objects frozen out of gc's scans, all the kernel held as each "
                f"framework's import ended ({names})"
            )
        if self.active:
            return f"{gc.get_freeze_count():,} objects frozen (not by keras_nbguard)"
        return f"nothing frozen: {self.reason or 'no framework imported yet'}"

    def _imported(self, name: str) -> None:
        if self.reason is None or not self.reason.startswith("Keras objects existed"):
            self._freeze(name)
        if self._hook is not None and not self._hook.pending:
            self.uninstall()  # every framework came: no import needs to ask us any more

    def _freeze(self, name: str) -> None:
        try:
            start = time.perf_counter()
            before = gc.get_freeze_count()
            gc.collect()  # garbage of the import itself is not frozen
            gc.freeze()
            _frozen[0] = True
            self.frozen.append((name, gc.get_freeze_count() - before, time.perf_counter() - start))
        except Exception as exc:  # never in the way of the user's import
            self.reason = f"freezing failed ({type(exc).__name__}: {exc})"
            if self._warn is not None:
                self._warn(f"gc freeze {self.reason}; runs collect the whole heap")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``done(name)`` when one of ``names`` (top-level packages) has finished importing.

    It finds the module with the finders after it, then runs the real loader's ``exec_module``
    and calls back; the module's spec and ``__loader__`` keep the real loader."""

    def __init__(self, names: Sequence[str], done: Callable[[str], None]) -> None:
        self.pending = set(names)
        self.done = done

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)  # once, whatever happens next
        spec = _spec_from_others(self, fullname, path, target)
        loader = getattr(spec, "loader", None)
        if spec is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(loader, lambda: self.done(fullname))
        return spec


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, after: Callable[[], None]) -> None:
        self.loader = loader
        self.after = after

    def create_module(self, spec: Any) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self.loader
        self.loader.exec_module(module)
        self.after()


def _spec_from_others(hook: Any, fullname: str, path: Any, target: Any) -> Any:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is hook or find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _framework_objects_exist() -> bool:
    """Whether any Keras layer or operation (models included) is alive: an instance refers to
    its class, so one heap scan over the classes answers."""
    classes = []
    for module_name, class_name in (
        ("keras.src.ops.operation", "Operation"),
        ("tf_keras.src.engine.base_layer", "Layer"),
    ):
        base = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(base, type):
            classes.extend(_subclasses(base))
    if not classes:
        return False
    ids = {id(c) for c in classes}
    return any(id(type(r)) in ids for r in gc.get_referrers(*classes))


def _subclasses(base: type) -> list[type]:
    seen: list[type] = [base]
    todo: list[type] = [base]
    while todo:
        subclasses: list[type] = todo.pop().__subclasses__()
        for sub in subclasses:
            if sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return seen


def frozen_boxes(containers: Iterable[Any], users_modules: list[dict[str, Any]]) -> list[Any]:
    """Of ``containers``, and the namespaces of the user's own modules (``is_users_module``),
    those a heap scan cannot see once frozen, with the attributes of the instances among
    ``containers``. Asked once per walk: ``frozen_holders`` looks in them at each of its levels.

    Installed packages' and the standard library's modules are left out (thousands of dicts,
    twice a heap scan's cost per level of a walk): a model they hold is held by a framework's
    container anyway, which the leak finder does not follow."""
    if not _frozen_here():
        return []
    boxes: list[Any] = list(users_modules)
    for box in containers:
        boxes.append(box)
        inner = getattr(box, "__dict__", None)  # an instance's attributes live in its own dict
        if isinstance(inner, dict):
            boxes.append(inner)
    return boxes


def frozen_holders(targets: Iterable[int], boxes: list[Any]) -> list[Any]:
    """The ``boxes`` (``frozen_boxes``) that refer directly to an object whose id is in
    ``targets``."""
    wanted = set(targets)
    if not wanted:
        return []
    return [box for box in boxes if wanted.intersection(map(id, gc.get_referents(box)))]


def is_users_module(namespace: dict[str, Any]) -> bool:
    """A module of the user's own: not installed, not the standard library's, not built in.
    Remembered per namespace (thousands of them, the same at every run), as long as its
    ``__file__`` is the same string."""
    path = namespace.get("__file__")
    known = _MODULE_KINDS.get(id(namespace))
    if known is not None and known[0] is path:
        return known[1]
    users = isinstance(path, str) and not path.startswith(_INSTALLED)
    _MODULE_KINDS[id(namespace)] = (path, users)
    return users


_MODULE_KINDS: dict[int, tuple[Any, bool]] = {}  # id(namespace) -> (its __file__, users?)
_INSTALLED = tuple(
    dict.fromkeys(
        os.path.join(os.path.realpath(p), "")
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)
    )
)


def _frozen_here() -> bool:
    """Whether anything is frozen in this process (``gc.get_freeze_count`` walks the whole
    frozen list: ~0.1 s; a frozen object in the permanent generation is not in any other)."""
    return _frozen[0] or gc.get_freeze_count() > 0


# whether this process froze (process-wide, like the gc state it mirrors; set once)
_frozen = [False]
