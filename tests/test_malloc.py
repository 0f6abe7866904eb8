"""Whose malloc the kernel runs on: glibc's, or jemalloc or tcmalloc preloaded (the shipped
"Python 3 (keras-nbguard, jemalloc)" kernel). Each is read and trimmed in its own real process,
started with ``LD_PRELOAD`` as a kernelspec's ``env`` starts a kernel."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import fake_library, loader_cache

from keras_nbguard.collectors import allocated
from keras_nbguard.collectors.allocated import DEBIAN_PACKAGES, installed, malloc_name

REPO = Path(__file__).resolve().parents[1]
SONAMES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}  # to preload

PROBE = """
import json, numpy as np, psutil
from keras_nbguard.collectors.allocated import give_back_free_pages, heap_in_use, malloc_name
process, MiB = psutil.Process(), 2**20
heap, rss = heap_in_use(), process.memory_info().rss
chunks = [np.ones(256 * 1024 // 8) for _ in range(400)]  # 100 MiB in blocks of 256 KiB
held = heap_in_use() - heap
del chunks
kept = process.memory_info().rss - rss
give_back_free_pages()
print(json.dumps(dict(malloc=malloc_name(), held=held / MiB, kept=kept / MiB,
                      given_back=(process.memory_info().rss - rss) / MiB)))
"""


def _probe(preload: str) -> dict[str, object]:
    env = {**os.environ, "LD_PRELOAD": preload, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return seen


def test_glibcs_heap_is_read_and_trimmed() -> None:
    seen = _probe("")
    assert seen["malloc"] == "glibc"
    assert 95 <= seen["held"] <= 110  # type: ignore[operator]
    assert seen["given_back"] < 10  # type: ignore[operator]


@pytest.mark.parametrize("malloc", sorted(SONAMES))
def test_a_preloaded_malloc_is_named_read_and_gives_its_free_pages_back(malloc: str) -> None:
    if not installed(malloc):
        pytest.skip(f"{malloc} is not installed here (apt-get install {DEBIAN_PACKAGES[malloc]})")
    seen = _probe(SONAMES[malloc])
    assert seen["malloc"] == malloc
    # its own counter, not glibc's (which, unused, reads ~0 there)
    assert 95 <= seen["held"] <= 110  # type: ignore[operator]
    # freed, it keeps the pages resident (jemalloc ~50 MiB for 10 s, tcmalloc all of them)...
    assert seen["kept"] > 30  # type: ignore[operator]
    # ...until given back, as the magic does before each run's RSS reading
    assert seen["given_back"] < 10  # type: ignore[operator]


@pytest.mark.parametrize("malloc", sorted(SONAMES))
def test_installed_agrees_with_ldconfig_and_reads_the_loaders_places(
    malloc: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    library = {"jemalloc": "jemalloc", "tcmalloc": "tcmalloc_minimal"}[malloc]
    assert installed(malloc) == (ctypes.util.find_library(library) == SONAMES[malloc])
    # nowhere: no cache, no folder, not in Python's lib
    monkeypatch.setattr(allocated, "LOADER_CACHE", str(tmp_path / "no-cache"))
    monkeypatch.setattr(allocated, "LOADER_DIRS", ())
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "python"))
    assert not installed(malloc)
    # on LD_LIBRARY_PATH, or in Python's own lib (conda's), or as the cache says
    (tmp_path / "lib").mkdir()
    fake_library(tmp_path / "lib" / SONAMES[malloc])
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nowhere:{tmp_path / 'lib'}")
    assert installed(malloc)
    monkeypatch.delenv("LD_LIBRARY_PATH")
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    assert installed(malloc)
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "python"))
    cache = tmp_path / "ld.so.cache"
    loader_cache(cache, {"libc.so.6": "/nowhere/libc.so.6"})
    monkeypatch.setattr(allocated, "LOADER_CACHE", str(cache))
    assert not installed(malloc)
    loader_cache(
        cache, {"libc.so.6": "/x", SONAMES[malloc]: str(tmp_path / "lib" / SONAMES[malloc])}
    )
    assert installed(malloc)
    # a library of another kind (a 32-bit one where Python is 64-bit) is not the loader's
    other = bytearray((tmp_path / "lib" / SONAMES[malloc]).read_bytes())
    other[4] = 3 - other[4]  # ELF class: 1 (32-bit) <-> 2 (64-bit)
    (tmp_path / "lib" / SONAMES[malloc]).write_bytes(bytes(other))
    assert not installed(malloc)


def test_a_kernel_asking_for_jemalloc_that_runs_on_glibc_is_told_at_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The shipped kernel's LD_PRELOAD names the library only: where it is not installed the
    loader prints a line to the terminal Jupyter was started from and runs on glibc."""
    from IPython.core.interactiveshell import InteractiveShell

    if malloc_name() != "glibc":
        pytest.skip("the tests themselves run on another malloc")
    monkeypatch.setenv("LD_PRELOAD", "libjemalloc.so.2")
    shell = InteractiveShell.instance()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shell.run_line_magic("load_ext", "keras_nbguard")
    try:
        said = [str(w.message) for w in caught if "jemalloc" in str(w.message)]
        assert said and said[0].startswith(
            "keras_nbguard: this kernel asks for jemalloc (LD_PRELOAD=libjemalloc.so.2) but runs "
            "on glibc's malloc"
        )
        assert "apt-get install libjemalloc2" in said[0]
        status = shell.run_line_magic("nbguard", "status")
        assert "LD_PRELOAD asks for jemalloc, which the loader did not find" in str(status)
    finally:
        shell.run_line_magic("unload_ext", "keras_nbguard")
    monkeypatch.delenv("LD_PRELOAD")
    with warnings.catch_warnings(record=True) as caught:  # nothing asked: nothing said
        warnings.simplefilter("always")
        shell.run_line_magic("load_ext", "keras_nbguard")
    try:
        assert not [w for w in caught if "jemalloc" in str(w.message)]
        # the status row offers the jemalloc kernel (found as ldconfig finds it), and where the
        # loader can't find jemalloc (its cache, at the OS's boundary), says what to install
        status = str(shell.run_line_magic("nbguard", "status"))
        found = ctypes.util.find_library("jemalloc") is not None
        offered = 'glibc (the kernel "Python 3 (keras-nbguard, jemalloc)" '
        assert offered + ("runs on jemalloc" if found else "keeps its slack out once") in status
        without_it = tmp_path / "ld.so.cache"
        loader_cache(without_it, {"libc.so.6": "/lib/libc.so.6"})
        monkeypatch.setattr(allocated, "LOADER_CACHE", str(without_it))
        monkeypatch.setattr(allocated, "LOADER_DIRS", ())
        monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "python"))
        status = str(shell.run_line_magic("nbguard", "status"))
        assert offered + "keeps its slack out once jemalloc is installed: `apt-get install" in (
            status
        )
    finally:
        shell.run_line_magic("unload_ext", "keras_nbguard")


def test_the_status_row_points_to_no_jemalloc_kernel_where_tensorflows_pool_was_read() -> None:
    """With oneDNN on, TensorFlow's CPU pool takes its regions with malloc; glibc gives them back
    and jemalloc keeps them (it left more on 3 of 12 of Keras' examples): the row must not offer
    that kernel as the way out there, as the rss trend row no longer does."""
    from types import SimpleNamespace

    from helpers import make_record

    from keras_nbguard.ipython.status import _pool_read, malloc_status

    if malloc_name() != "glibc" or os.environ.get("LD_PRELOAD"):
        pytest.skip("the row is glibc's")

    def session(**fields: object) -> SimpleNamespace:
        return SimpleNamespace(history=[make_record(**fields)])

    assert _pool_read(session(pid=os.getpid(), host_pool_peak=2**20))
    assert not _pool_read(session(pid=os.getpid(), host_pool_peak=None))  # oneDNN off
    assert not _pool_read(session(pid=os.getpid() + 1, host_pool_peak=2**20))  # another kernel's
    row = malloc_status(pool_read=True)
    assert row.startswith("glibc: stay on it here (oneDNN is on") and "3 of 12" in row
    assert "keeps its slack out" not in row and "keeps its slack out" in malloc_status()
