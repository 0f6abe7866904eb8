"""Which notebook a run belongs to, as the kernel can tell."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

from keras_nbguard.identity import UNNAMED_KERNEL, notebook_key


def test_jupyters_session_name_comes_first(monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/a.ipynb")
    assert notebook_key(SimpleNamespace(user_ns={"__session__": "/other.ipynb"})) == (
        "/home/me/a.ipynb")


def test_vscode_session_then_the_script(monkeypatch, tmp_path):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert notebook_key(SimpleNamespace(user_ns={"__session__": "/b.ipynb"})) == "/b.ipynb"
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "train.py")])
    assert notebook_key() == os.path.abspath(tmp_path / "train.py")
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert notebook_key() == "<interactive>"


def test_a_kernel_without_a_session_name_is_not_keyed_by_ipykernels_launcher(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    for launcher in ("/venv/lib/python3.11/site-packages/ipykernel_launcher.py",
                     "/venv/lib/python3.11/site-packages/ipykernel/__main__.py"):
        monkeypatch.setattr(sys, "argv", [launcher, "-f", "/run/kernel-1.json"])
        assert notebook_key(SimpleNamespace(user_ns={})) == UNNAMED_KERNEL
