"""Shared fixtures: a real IPython shell with the extension loaded, and tiny real Keras models."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Where TensorFlow turns oneDNN on by itself (recent x86 CPUs), oneDNN keeps freed tensors' memory
# in a pool of its own: RSS would not drop when a model is freed, and the tests that check that
# keras_nbguard reports a real drop could not see one. Measured here: a freed 100 MiB variable
# gives back 0 MiB with oneDNN on, 96 MiB with it off.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pytest
from helpers import SETUP_CELL, clear_tracebacks, fresh_shell
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture(autouse=True)
def history_database(tmp_path, monkeypatch):
    """Every test gets its own run history database, never the user's."""
    path = tmp_path / "runs.sqlite"
    monkeypatch.setenv("KERAS_NBGUARD_DB", str(path))
    return path


@pytest.fixture(autouse=True)
def earlier_tests_objects_frozen():
    """What the tests before this one left alive, out of the garbage collector's sight, as the
    frameworks are in a kernel (``prepare/gcfreeze.py``). A test worker runs hundreds of tests in
    one process, and what they leave (TensorFlow's traced functions, IPython's history, pytest's
    reports) every full collection of a later test walked again: 773 s of the two workers' 3,208
    in one run of the suite, 116 s with this. Only what survived a collection is frozen, so
    nothing this test builds is."""
    gc.collect()
    gc.freeze()


_previous_test: list[str] = []  # the test this worker ran last, for the warning below


@pytest.fixture(autouse=True)
def python_sigint_handler(request):
    """Every test starts under Python's own SIGINT handler, as a kernel runs a cell. pytest-xdist's
    workers start with SIGINT ignored (CI's warning: "SIG_IGN (test before: none)"), and then
    ``_thread.interrupt_main()`` — the stop button in the interrupt tests — does nothing: they
    passed only where an earlier test in the worker had put Python's handler back. A warning
    names any other handler found, and the test run before it."""
    if threading.current_thread() is threading.main_thread():
        found = signal.signal(signal.SIGINT, signal.default_int_handler)
        if found is not signal.default_int_handler:  # who did it shows in the warnings summary
            after = _previous_test[-1] if _previous_test else "none"
            warnings.warn(f"SIGINT was handled by {found!r} (test before: {after})", stacklevel=1)
    yield
    _previous_test[:] = [request.node.nodeid]


@pytest.fixture(autouse=True)
def keras_dtype_policy():
    """A test that sets a mixed precision policy (``track(mixed_precision=...)`` keeps it, as
    Keras does) must not hand float16 layers to the tests after it."""
    keras = sys.modules.get("keras")
    before = keras.config.dtype_policy().name if keras else None
    yield
    keras = sys.modules.get("keras")
    if keras is not None and keras.config.dtype_policy().name != (before or "float32"):
        keras.config.set_dtype_policy(before or "float32")


@pytest.fixture
def shell():
    """The real InteractiveShell with keras_nbguard loaded; unloaded again afterwards."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "keras_nbguard")
    yield ip
    ip.run_line_magic("unload_ext", "keras_nbguard")
    # The instance is shared by every test: names a test leaves (a `history` holding a model)
    # must not show up in the next test's leak or dashboard checks; nor may its dashboard.
    ip.reset(new_session=False)
    board = sys.modules.get("keras_nbguard.board.kernel_board")
    if board is not None:
        board.close()


@pytest.fixture
def keras_shell(shell):
    result = shell.run_cell(SETUP_CELL)
    assert result.success, result.error_in_exec
    return shell


@pytest.fixture
def ip():
    """``fresh_shell()``, emptied again afterwards so no model outlives the test."""
    shell = fresh_shell()
    yield shell
    shell.reset(new_session=False)
    clear_tracebacks()
    sys.modules.pop("usermod", None)  # the module test_probes' HOLDERS registers


@pytest.fixture
def unhurried_walk(monkeypatch):
    """On a loaded machine a heap scan takes over a second, not 20 ms: the release step's walk
    would stop at its 1 s limit and (rightly) release nothing. Where the walk's conclusions are
    what a test checks, it may take its time."""
    from keras_nbguard.models import autorelease

    monkeypatch.setattr(autorelease, "WALK_SECONDS", 30.0)
