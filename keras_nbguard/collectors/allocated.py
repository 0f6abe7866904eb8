"""What the process's allocators have handed out and not had back: glibc's heap in use and
Python's own blocks. Read between runs (after a collection and a trim), they tell memory kept
from memory an allocator keeps resident for reuse: a leak raises them run after run, a pool or an
arena that touched more pages does not (``findings.allocators_keep``)."""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


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
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        function = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError, TypeError):  # no such symbol; Windows has no CDLL(None)
        return None
    function.restype = _MallInfo2
    return function


def heap_in_use() -> int | None:
    """Bytes glibc has handed out: in-use chunks of every arena plus the chunks it mapped apart
    (``mallinfo2``, ~5 µs with TensorFlow's arenas). None off glibc 2.33 or later."""
    read = _mallinfo2()
    if read is None:
        return None
    info = read()
    return int(info.uordblks + info.hblkhd)


def python_blocks() -> int:
    """Python's own small objects' blocks in use (``sys.getallocatedblocks``)."""
    return sys.getallocatedblocks()
