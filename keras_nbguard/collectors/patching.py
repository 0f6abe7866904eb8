"""Scoped, reversible patches: wrap an attribute while a run is tracked, put it back afterwards.

Restoring means putting back exactly what the owner itself held — the raw ``staticmethod`` or
``classmethod`` object from its ``__dict__``, not what a lookup returns — or deleting our
replacement when the attribute was inherited, so the class is left as if never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from keras_nbguard.backends import PACKAGES, unsupported
from keras_nbguard.collectors.imports import ImportWatch, when_imported

_MISSING = object()


class AttributePatch:
    """``owner.name`` replaced by ``replacement`` from construction until ``restore()``."""

    def __init__(self, owner: Any, name: str, replacement: Any) -> None:
        self.owner, self.name = owner, name
        # vars(), not getattr(): a lookup would unwrap descriptors and see inherited attributes.
        self._saved = vars(owner).get(name, _MISSING)
        self._replacement = replacement
        setattr(owner, name, replacement)

    def restore(self) -> None:
        """Put back what was there, unless another patch went over ours meanwhile
        (``mlflow.autolog()`` in a run's cell wraps ``Model.fit``, ours inside it): that one
        stays, as it would have without us, and ours, inside it, passes calls through."""
        if vars(self.owner).get(self.name, _MISSING) is not self._replacement:
            return
        if self._saved is _MISSING:
            delattr(self.owner, self.name)  # inherited: the base class's one shows through again
        else:
            setattr(self.owner, self.name, self._saved)


class PatchGroup:
    """Several patches restored together, the last made first."""

    def __init__(self, patches: list[AttributePatch]) -> None:
        self.patches = patches

    def restore(self) -> None:
        for patch in reversed(self.patches):
            patch.restore()


Patch = AttributePatch | PatchGroup


class PatchOnImport:
    """A patch applied to a module as soon as it is imported (at once if it already is) and undone
    by ``uninstall()``; ``apply(module)`` makes it and returns it, or None when it cannot."""

    def __init__(self, module_name: str) -> None:
        self.module_name = module_name
        self._patch: Patch | None = None
        self._watch: ImportWatch | None = None

    def install(self, apply: Callable[[ModuleType], Patch | None]) -> None:
        # ``apply`` is held only by the import watch, so nothing outlives uninstall().
        def on_import(module: ModuleType) -> None:
            self._patch = apply(module)

        self._watch = when_imported(self.module_name, on_import)

    def uninstall(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._patch is not None:
            self._patch.restore()
            self._patch = None


class PatchEveryKeras:
    """``apply(package)`` on every Keras package (``keras``, ``tf_keras``) imported now or later
    in the run, each undone by ``uninstall()``. A Keras we can't handle is not patched: its
    reason goes to ``reasons``, so a figure says why it is missing instead of reading "no fit"."""

    def __init__(self) -> None:
        self._scopes = [PatchOnImport(package) for package in PACKAGES]
        self.reasons: list[str] = []

    def install(self, apply: Callable[[ModuleType], Patch | None]) -> None:
        def checked(module: ModuleType) -> Patch | None:
            why = unsupported(module, module.__name__)
            if why:
                self.reasons.append(why)
                return None
            return apply(module)

        for scope in self._scopes:
            scope.install(checked)

    def uninstall(self) -> None:
        for scope in self._scopes:
            scope.uninstall()
