"""Shared fixtures: a real IPython shell with the extension loaded, and tiny real Keras models."""

from __future__ import annotations

import gc
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Where TensorFlow turns oneDNN on by itself (recent x86 CPUs), oneDNN keeps freed tensors' memory
# in a pool of its own: RSS would not drop when a model is freed, and the tests that check that
# keras_nbguard reports a real drop could not see one. Measured here: a freed 100 MB variable
# gives back 0 MB with oneDNN on, 96 MB with it off.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

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
    # The instance is shared by every test: names a test leaves (a `history` holding a model)
    # must not show up in the next test's leak or dashboard checks.
    ip.reset(new_session=False)


@pytest.fixture
def keras_shell(shell):
    result = shell.run_cell(SETUP_CELL)
    assert result.success, result.error_in_exec
    return shell


def run(shell, source: str):
    """Run a cell, returning IPython's ExecutionResult."""
    return shell.run_cell(source, store_history=True)


# -- a bare shell with tiny models, for the leak finder and free() (test_probes, test_freeing) ----
TINY = """
import functools, sys, types
import numpy as np
import keras
x = np.zeros((16, 4), "float32")
y = np.zeros((16, 1), "float32")
def tiny(name):
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Dense(1)],
                         name=name)
    m.compile("adam", "mse")
    return m
"""


def clear_tracebacks() -> None:
    """Also IPython's own copy: ``%reset`` leaves InteractiveTB.tb (and its frames) alive."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    InteractiveShell.instance().InteractiveTB.tb = None


def fresh_shell() -> InteractiveShell:
    """The real InteractiveShell, emptied (no extension loaded), with ``tiny(name)``, x and y."""
    shell = InteractiveShell.instance()
    shell.reset(new_session=False)
    clear_tracebacks()
    gc.collect()
    assert run(shell, TINY).success
    return shell


@pytest.fixture
def ip():
    """``fresh_shell()``, emptied again afterwards so no model outlives the test."""
    shell = fresh_shell()
    yield shell
    shell.reset(new_session=False)
    clear_tracebacks()
    sys.modules.pop("usermod", None)  # the module test_probes' HOLDERS registers
