"""Scoped patches put back exactly what was there: descriptors as stored, inherited ones removed."""

from __future__ import annotations

import sys
import types

import pytest

from keras_nbguard.collectors.patching import AttributePatch, PatchOnImport


class Base:
    def inherited(self) -> str:
        return "base"


class Child(Base):
    @staticmethod
    def static() -> str:
        return "static"

    @classmethod
    def klass(cls) -> str:
        return "klass"


@pytest.mark.parametrize("name", ["static", "klass"])
def test_restores_the_descriptor_itself(name):
    stored = Child.__dict__[name]
    patch = AttributePatch(Child, name, staticmethod(lambda: "patched"))
    assert getattr(Child, name)() == "patched"
    patch.restore()
    assert Child.__dict__[name] is stored and getattr(Child, name)() == name


def test_an_inherited_method_is_removed_again_not_copied_down():
    patch = AttributePatch(Child, "inherited", lambda self: "patched")
    assert Child().inherited() == "patched"
    patch.restore()
    assert "inherited" not in Child.__dict__ and Child().inherited() == "base"


def test_patches_a_module_when_it_is_imported_and_undoes_it(tmp_path, monkeypatch):
    (tmp_path / "nbguard_patch_target.py").write_text("def f():\n    return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[types.ModuleType] = []

    def apply(module: types.ModuleType) -> AttributePatch:
        seen.append(module)
        return AttributePatch(module, "f", lambda: "patched")

    scope = PatchOnImport("nbguard_patch_target")
    scope.install(apply)
    try:
        import nbguard_patch_target  # type: ignore[import-not-found]

        assert seen == [nbguard_patch_target] and nbguard_patch_target.f() == "patched"
        scope.uninstall()
        assert nbguard_patch_target.f() == "real"
        scope.install(apply)  # already imported: patched at once
        assert nbguard_patch_target.f() == "patched" and len(seen) == 2
    finally:
        scope.uninstall()
        sys.modules.pop("nbguard_patch_target", None)
    assert nbguard_patch_target.f() == "real"


def test_a_patch_made_over_ours_stays_when_ours_is_undone():
    ours = AttributePatch(Child, "inherited", lambda self: "ours")
    theirs = Child.__dict__["inherited"]
    Child.inherited = lambda self: "theirs, around " + theirs(self)
    try:
        ours.restore()
        assert Child().inherited() == "theirs, around ours"  # ours passes through, inside
    finally:
        del Child.inherited
    assert Child().inherited() == "base"
