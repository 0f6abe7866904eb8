"""What several test modules share: running cells on the real shell, tiny real Keras models,
stand-in records, and waiting on a condition instead of sleeping a guessed time."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from IPython.core.interactiveshell import InteractiveShell

from keras_nbguard.records.run import FitRecord, GpuReading, RunRecord

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


def make_record(**changes) -> RunRecord:
    fields = dict(
        label="mlp",
        status="ok",
        started_at=1.0,
        wall_seconds=1.5,
        fit_seconds=1.2,
        fits=(
            FitRecord(
                seconds=1.2,
                epochs=2,
                epoch_seconds=(0.7, 0.5),
                callback_seconds=0.01,
                batch_size=32,
                steps=8,
            ),
        ),
        rss_before=100 * 2**20,
        rss_after=110 * 2**20,
        rss_peak=120 * 2**20,
        gpu=GpuReading(reason="no GPU: TensorFlow sees none"),
        cleared=True,
        traces=3,
        rss_samples=((0.0, 100 * 2**20), (0.5, 120 * 2**20)),
    )
    fields.update(changes)
    return RunRecord(**fields)


def wait_until(condition: Callable[[], object], timeout: float = 10.0, step: float = 0.01) -> None:
    """Return once ``condition()`` holds; fail after ``timeout`` seconds. Wait on a thread or a
    process by its effect, not by a sleep long enough on a fast machine and flaky on a slow one."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout} s: {condition}")
        time.sleep(step)


@contextlib.contextmanager
def one_ray_at_a_time() -> Iterator[None]:
    """Held by every test that starts a Ray cluster: two clusters on one machine at once (pytest
    -n 2 runs test files side by side) find each other's session in /tmp/ray and connect to the
    wrong address."""
    with open(os.path.join(tempfile.gettempdir(), "keras_nbguard_tests_ray.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def alive_at_each_load(monkeypatch, earlier) -> list[bool]:
    """Whether ``earlier`` (a weak reference) was still alive at each model load of an isolated
    run's way back (isolation/back.py ``_load_model``), in load order."""
    from keras_nbguard.isolation import back

    seen: list[bool] = []
    load = back._load_model

    def watched(package, data, *functions):
        seen.append(earlier() is not None)
        return load(package, data, *functions)

    monkeypatch.setattr(back, "_load_model", watched)
    return seen


# -- the loader's view of the machine (collectors/allocated.installed), at the OS's boundary -----
def fake_library(path) -> None:
    """A file the loader of this Python would take for a library: an ELF header of its kind."""
    with open("/proc/self/exe", "rb") as exe:
        path.write_bytes(exe.read(64))


def loader_cache(path, libraries: dict[str, str]) -> None:
    """``ldconfig``'s cache (glibc's format since 2.32) giving each soname's path."""
    import struct

    strings, offsets = b"", []
    header = 48 + 24 * len(libraries)
    for soname, library in libraries.items():
        offsets.append((header + len(strings), header + len(strings) + len(soname) + 1))
        strings += soname.encode() + b"\0" + library.encode() + b"\0"
    table = b"".join(struct.pack("<iIIIQ", 0x0303, key, value, 0, 0) for key, value in offsets)
    head = struct.pack("<20sII4xI12x", b"glibc-ld.so.cache1.1", len(libraries), len(strings), 0)
    path.write_bytes(head + table + strings)
