"""Run a callback right after a module is imported, for patches a run needs when the cell itself
is the one that imports Keras or TensorFlow."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # hand the module its real loader back: nothing of ours stays on it
        module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        self._callback(module)


class ImportWatch(importlib.abc.MetaPathFinder):
    """A meta path entry that calls ``callback(module)`` once ``name`` has been executed.

    Remove it with ``close()``; it is inert for every other module name.
    """

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self._callback = callback
        self._finding = False
        sys.meta_path.insert(0, self)

    def close(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        # (asked again by a finder we asked: another import hook that asks the others too, as
        # gcfreeze's does; answering would wrap the loader twice and call back twice, and a
        # second patch of Model.fit over the first left the first on it after the run)
        if fullname != self.name or self._finding:
            return None
        # Several watches may wait for one module (the fit timer and the leak finder): the first
        # speaks for all of them, and every finder of ours is skipped when asking the real ones.
        watches = [f for f in sys.meta_path if isinstance(f, ImportWatch) and f.name == fullname]
        if watches[0] is not self:
            return None
        self._finding = True
        try:
            return _spec_calling_back(fullname, path, target, watches)
        finally:
            self._finding = False


def _spec_calling_back(fullname: str, path: Any, target: Any, watches: list[ImportWatch]) -> Any:
    """The real finders' spec, its loader calling each of ``watches`` back once it has run."""
    for finder in sys.meta_path:
        if isinstance(finder, ImportWatch) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):

                def notify(module: ModuleType) -> None:
                    for watch in watches:
                        watch._callback(module)

                spec.loader = _CallbackLoader(spec.loader, notify)
            return spec
    return None


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> ImportWatch | None:
    """Call ``callback`` now if ``name`` is imported, else right after its import; returns the
    watch to close (None when the callback already ran)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return None
    return ImportWatch(name, callback)
