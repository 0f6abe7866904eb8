"""Which notebook a run belongs to, as the kernel can tell."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from keras_nbguard.store.identity import UNNAMED_KERNEL, kernel_id, notebook_key

pytestmark = pytest.mark.kernel


def test_jupyters_session_name_comes_first(monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/a.ipynb")
    assert notebook_key(SimpleNamespace(user_ns={"__session__": "/other.ipynb"})) == (
        "/home/me/a.ipynb"
    )
    monkeypatch.setenv("KERAS_NBGUARD_NOTEBOOK", "train.ipynb")  # said by the user: first
    assert notebook_key() == "train.ipynb"


def test_vscode_session_then_the_script(monkeypatch, tmp_path):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert notebook_key(SimpleNamespace(user_ns={"__session__": "/b.ipynb"})) == "/b.ipynb"
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "train.py")])
    assert notebook_key() == os.path.abspath(tmp_path / "train.py")
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert notebook_key() == "<interactive>"


def test_a_kernel_without_a_session_name_is_not_keyed_by_ipykernels_launcher(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    for launcher in (
        "/venv/lib/python3.11/site-packages/ipykernel_launcher.py",
        "/venv/lib/python3.11/site-packages/ipykernel/__main__.py",
    ):
        monkeypatch.setattr(sys, "argv", [launcher, "-f", "/run/kernel-1.json"])
        key = notebook_key(SimpleNamespace(user_ns={}))
        assert key == UNNAMED_KERNEL.format(kernel=kernel_id(), cwd=os.getcwd())
        assert "ipykernel" not in key


def test_two_notebooks_executed_headless_never_share_numbers(tmp_path, history_database):
    """nbclient (as nbconvert and papermill) tells the kernel no notebook path."""
    import nbformat
    from nbclient import NotebookClient

    cells = [
        "%load_ext keras_nbguard",
        "%%kerasrun --label a --quiet\nz = 1",
        "%%kerasrun --label a --quiet\nz = 2",
        "import keras_nbguard\nprint([(r.notebook, r.run_number) for r in keras_nbguard.runs()])",
    ]
    seen = []
    for _ in ("first", "second"):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
        seen.append(eval(nb.cells[-1].outputs[0]["text"]))
    (a1, a2), (b1, b2) = seen
    assert [a1[1], a2[1], b1[1], b2[1]] == [1, 2, 1, 2]  # numbering of its own
    assert a1[0] == a2[0] != b1[0] and "without a notebook path" in b1[0]
