"""What the process's allocators have handed out and not had back: the C heap in use (glibc's,
or jemalloc's or tcmalloc's where the kernel was started on one: ``LD_PRELOAD``) and Python's own
blocks. Read between runs (after a collection and a trim), they tell memory kept from memory an
allocator keeps resident for reuse: a leak raises them run after run, a pool or an arena that
touched more pages does not (``findings.allocators_keep``)."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable

GLIBC, JEMALLOC, TCMALLOC = "glibc", "jemalloc", "tcmalloc"
DEBIAN_PACKAGES = {JEMALLOC: "libjemalloc2", TCMALLOC: "libtcmalloc-minimal4"}
SONAMES = {JEMALLOC: "libjemalloc.so.2", TCMALLOC: "libtcmalloc_minimal.so.4"}  # as preloaded
LOADER_CACHE = "/etc/ld.so.cache"  # where the loader looks a bare name up (``ldconfig`` writes it)
LOADER_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")  # and then, by default


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _process() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # every symbol the process has, a preloaded malloc's first
    except (OSError, TypeError):  # Windows has no CDLL(None)
        return None


@functools.cache
def malloc_name() -> str | None:
    """Whose ``malloc`` this process runs on: ``"jemalloc"`` or ``"tcmalloc"`` (preloaded, their
    own entry points present), ``"glibc"``, or None (musl, macOS, Windows)."""
    process = _process()
    if process is None:
        return None
    if hasattr(process, "mallctl"):
        return JEMALLOC
    if hasattr(process, "MallocExtension_GetNumericProperty"):
        return TCMALLOC
    return GLIBC if hasattr(process, "gnu_get_libc_version") else None


def installed(malloc: str) -> bool:
    """Whether the loader finds ``malloc``'s library by the bare name the shipped kernel's
    ``LD_PRELOAD`` gives: in ``LD_LIBRARY_PATH``, its cache, or its default folders (~0.1 ms;
    ``ctypes.util.find_library`` runs ``ldconfig``, 5-60 ms)."""
    soname = SONAMES[malloc]
    folders = [*os.environ.get("LD_LIBRARY_PATH", "").split(":"), *LOADER_DIRS]
    if any(folder and os.path.exists(os.path.join(folder, soname)) for folder in folders):
        return True
    try:
        with open(LOADER_CACHE, "rb") as cache:
            return soname.encode() + b"\0" in cache.read()
    except OSError:  # no cache (musl, macOS): not found
        return False


def preload_missed() -> str | None:
    """The jemalloc or tcmalloc that ``LD_PRELOAD`` names but the process does not run on (not
    installed: the loader says so on stderr and goes on with glibc's), or None."""
    asked = os.environ.get("LD_PRELOAD", "")
    for wanted in (JEMALLOC, TCMALLOC):
        if wanted in asked and malloc_name() != wanted:
            return wanted
    return None


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        function = _process().mallinfo2  # type: ignore[union-attr]  # glibc >= 2.33
    except AttributeError:  # no such symbol, or no process handle
        return None
    function.restype = _MallInfo2
    return function


def _mallctl_size(name: bytes) -> int | None:
    """jemalloc's ``name`` statistic, refreshed first (its counters are a snapshot per epoch)."""
    mallctl = _process().mallctl  # type: ignore[union-attr]
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(ctypes.sizeof(ctypes.c_uint64))
    mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), size)
    value, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
    if mallctl(name, ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
        return None  # a build without statistics
    return int(value.value)


def _tcmalloc_size(name: bytes) -> int | None:
    value = ctypes.c_size_t(0)
    read = _process().MallocExtension_GetNumericProperty  # type: ignore[union-attr]
    return int(value.value) if read(name, ctypes.byref(value)) else None


def heap_in_use() -> int | None:
    """Bytes the C heap has handed out and not had back: glibc's in-use chunks of every arena
    plus the chunks it mapped apart (``mallinfo2``, ~5 µs with TensorFlow's arenas), jemalloc's
    ``stats.allocated``, tcmalloc's ``generic.current_allocated_bytes``. None where not read
    (glibc before 2.33, another allocator)."""
    name = malloc_name()
    if name == JEMALLOC:
        return _mallctl_size(b"stats.allocated")
    if name == TCMALLOC:
        return _tcmalloc_size(b"generic.current_allocated_bytes")
    read = _mallinfo2()
    if read is None:
        return None
    info = read()
    return int(info.uordblks + info.hblkhd)


def give_back_free_pages() -> None:
    """Hand the heap's free pages back to the system, so RSS shows what is in use: glibc's
    ``malloc_trim(0)``, jemalloc's purge of every arena (it would give them back by itself over
    ~10 s), tcmalloc's ``ReleaseFreeMemory``. A few ms."""
    name, process = malloc_name(), _process()
    if process is None or name is None:
        return
    if name == JEMALLOC:
        process.mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))  # ALL arenas
    elif name == TCMALLOC:
        process.MallocExtension_ReleaseFreeMemory()
    else:
        process.malloc_trim(0)


def python_blocks() -> int:
    """Python's own small objects' blocks in use (``sys.getallocatedblocks``)."""
    return sys.getallocatedblocks()
