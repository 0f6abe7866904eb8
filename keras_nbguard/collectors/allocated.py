"""What the process's allocators have handed out and not had back: the C heap in use (glibc's,
or jemalloc's or tcmalloc's where the kernel was started on one: ``LD_PRELOAD``) and Python's own
blocks. Read between runs (after a collection and a trim), they tell memory kept from memory an
allocator keeps resident for reuse: a leak raises them run after run, a pool or an arena that
touched more pages does not (``findings.allocators_keep``)."""

from __future__ import annotations

import ctypes
import functools
import os
import re
import struct
import sys
from collections.abc import Callable

GLIBC, JEMALLOC, TCMALLOC = "glibc", "jemalloc", "tcmalloc"
DEBIAN_PACKAGES = {JEMALLOC: "libjemalloc2", TCMALLOC: "libtcmalloc-minimal4"}
SONAMES = {JEMALLOC: "libjemalloc.so.2", TCMALLOC: "libtcmalloc_minimal.so.4"}  # as preloaded
LOADER_CACHE = "/etc/ld.so.cache"  # where the loader looks a bare name up (``ldconfig`` writes it)
_MULTIARCH = getattr(sys.implementation, "_multiarch", None)  # Debian's x86_64-linux-gnu
# then its own folders: Debian's multiarch ones, Fedora's lib64 (a library for another ABI
# found there is not taken: _loads_here)
LOADER_DIRS = (
    *((f"/lib/{_MULTIARCH}", f"/usr/lib/{_MULTIARCH}") if _MULTIARCH else ()),
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)
CACHE_MAGIC = b"glibc-ld.so.cache1.1"
CACHE_HEADER = struct.Struct("<20sII4xI12x")  # magic, entries, strings' length, extension
CACHE_ENTRY = struct.Struct("<iIIIQ")  # flags, name, path (offsets in the file), -, hwcap


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
    ``LD_PRELOAD`` gives, for this process's kind of binary: in ``LD_LIBRARY_PATH``, Python's
    own ``lib`` (conda's and pyenv's Pythons run with it on their library path), the loader's
    cache or its default folders (~0.1 ms; ``ctypes.util.find_library`` runs ``ldconfig``,
    5-60 ms, and takes any ``.so.N``)."""
    soname = SONAMES[malloc]
    folders = [
        *re.split("[:;]", os.environ.get("LD_LIBRARY_PATH", "")),
        os.path.join(sys.base_prefix, "lib"),
        *LOADER_DIRS,
    ]
    paths = [os.path.join(folder, soname) for folder in folders if folder]
    return any(_loads_here(path) for path in [*paths, *_cached(soname)])


def _cached(soname: str) -> list[str]:
    """The paths ``ldconfig``'s cache (glibc's format since 2.32; an older one reads as
    empty) gives for ``soname``."""
    try:
        with open(LOADER_CACHE, "rb") as file:
            cache = file.read()
        magic, entries, _, _ = CACHE_HEADER.unpack_from(cache)
        if magic != CACHE_MAGIC:
            return []
        # where the name is written whole (a name is kept as the tail of its path)
        wanted = soname.encode() + b"\0"
        at = {
            m.start()
            for m in re.finditer(re.escape(wanted), cache)
            if cache[m.start() - 1] in b"/\0"
        }
        table = cache[CACHE_HEADER.size : CACHE_HEADER.size + entries * CACHE_ENTRY.size]
        return [
            os.fsdecode(_string_at(cache, path))
            for _, name, path, _, _ in CACHE_ENTRY.iter_unpack(table)
            if name in at
        ]
    except (OSError, struct.error, ValueError):  # no cache (musl, macOS), or one cut short
        return []


def _string_at(cache: bytes, offset: int) -> bytes:
    return cache[offset : cache.index(b"\0", offset)]


def _loads_here(path: str) -> bool:
    """Whether ``path`` is a library the running interpreter's loader can take: an ELF file of
    its class, byte order and machine (a 32-bit jemalloc in /usr/lib is skipped by a 64-bit
    Python's loader)."""
    kind = _elf_kind(path)
    return kind is not None and kind == _own_elf_kind()


@functools.cache
def _own_elf_kind() -> bytes | None:
    return _elf_kind("/proc/self/exe")


def _elf_kind(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            header = file.read(20)
    except OSError:
        return None
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    return header[4:6] + header[18:20]  # class and byte order, machine


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
