"""Shared fixtures: a real IPython shell with the extension loaded, and tiny real Keras models."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
from IPython.core.interactiveshell import InteractiveShell

SETUP_CELL = """
import numpy as np
import keras
x = np.random.default_rng(0).random((256, 8), dtype="float32")
y = np.random.default_rng(1).random((256, 1), dtype="float32")
def make_model(units=16):
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(units, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
"""


@pytest.fixture(autouse=True)
def history_database(tmp_path, monkeypatch):
    """Every test gets its own run history database, never the user's."""
    path = tmp_path / "runs.sqlite"
    monkeypatch.setenv("KERAS_NBGUARD_DB", str(path))
    return path


@pytest.fixture
def shell():
    """The real InteractiveShell with keras_nbguard loaded; unloaded again afterwards."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "keras_nbguard")
    yield ip
    ip.run_line_magic("unload_ext", "keras_nbguard")


@pytest.fixture
def keras_shell(shell):
    result = shell.run_cell(SETUP_CELL)
    assert result.success, result.error_in_exec
    return shell


def run(shell, source: str):
    """Run a cell, returning IPython's ExecutionResult."""
    return shell.run_cell(source, store_history=True)
