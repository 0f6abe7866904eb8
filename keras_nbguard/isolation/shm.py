"""Large numpy arrays on their way to an isolated run: through shared memory when ``/dev/shm``
has room for them, else through a temporary file, else pickled through the pipe.

Writing into a shared-memory segment that ``/dev/shm`` has no room for does not fail: the kernel
dies of SIGBUS (Docker's ``/dev/shm`` is 64 MiB by default). So the room is checked first
(``os.statvfs``: an array takes at most half of what is free), and the segment's pages are
reserved (``posix_fallocate``, which fails cleanly) before a byte is copied."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Any

SHM_DIR = "/dev/shm"
KEEP_FREE = 4 << 20  # for the other users of /dev/shm (a DataLoader's workers, NCCL)


def room(folder: str = SHM_DIR) -> int | None:
    """Bytes free in ``folder`` (None: unknown, e.g. no /dev/shm on macOS)."""
    try:
        stat = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    return stat.f_bavail * stat.f_frsize


def fits(nbytes: int, free: int | None) -> bool:
    return free is None or nbytes <= (free - KEEP_FREE) // 2


class TempArray:
    """An array written to a temporary file the child maps read-only; removed after the run
    (``close`` and ``unlink``, like a shared-memory segment)."""

    def __init__(self, path: str, note: str) -> None:
        self.path = path
        self.note = note

    def close(self) -> None:
        pass

    def unlink(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class Note:
    """A word on how an array travelled, kept with the segments (nothing to unlink)."""

    def __init__(self, note: str) -> None:
        self.note = note

    def close(self) -> None:
        pass

    def unlink(self) -> None:
        pass


def pack_array(key: str, array: Any, shared: list[Any]) -> tuple[Any, ...]:
    """``array`` for the child (``sending.py``'s packets): ``("shm", key, segment, shape,
    dtype)``, ``("file", key, path, shape, dtype)`` or ``("value", key, pickle)``. What must be
    removed after the run (and a word when it did not go through shared memory) is appended to
    ``shared``."""
    nbytes = int(array.nbytes)
    free = room()
    if fits(nbytes, free):
        sent = _to_shared_memory(key, array, shared)
        if sent is not None:
            return sent
        why = "/dev/shm refused the space"
    else:
        why = f"/dev/shm has {_mib(free)} free"
    size = f"an array of {_mib(nbytes)}"
    try:
        path = _to_file(array)
    except OSError as exc:
        import cloudpickle

        shared.append(
            Note(
                f"{size} sent through the pipe: {why}, and a temporary file "
                f"failed ({exc.strerror or exc})"
            )
        )
        return ("value", key, cloudpickle.dumps(array))
    shared.append(TempArray(path, f"{size} sent through a temporary file: {why}"))
    return ("file", key, path, tuple(array.shape), array.dtype.str)


def _to_shared_memory(key: str, array: Any, shared: list[Any]) -> tuple[Any, ...] | None:
    from multiprocessing import shared_memory

    import numpy

    segment = shared_memory.SharedMemory(create=True, size=max(1, int(array.nbytes)))
    fd = getattr(segment, "_fd", -1)  # SharedMemory keeps its descriptor there (CPython)
    if fd >= 0 and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, max(1, int(array.nbytes)))  # ENOSPC now, not SIGBUS later
        except OSError as exc:
            if exc.errno not in (95, 22):  # EOPNOTSUPP, EINVAL: can't reserve here; room checked
                segment.close()
                segment.unlink()
                return None
    shared.append(segment)
    numpy.ndarray(array.shape, array.dtype, buffer=segment.buf)[...] = array
    return ("shm", key, segment.name, tuple(array.shape), array.dtype.str)


def _to_file(array: Any) -> str:
    import numpy

    handle, path = tempfile.mkstemp(prefix="keras_nbguard-array-")
    try:
        with os.fdopen(handle, "wb") as out:
            numpy.ascontiguousarray(array).tofile(out)  # write(): ENOSPC, never SIGBUS
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


def writable(sent: tuple[Any, ...]) -> tuple[Any, ...]:
    """``sent`` (``pack_array``'s) for a name the child may change: the same segment or file,
    mapped copy-on-write there (a pickle is the child's own already)."""
    if sent[0] not in ("shm", "file"):
        return sent
    return (sent[0], f"{sent[1]}:writable", *sent[2:5], True)


def unpack(sent: tuple[Any, ...], attached: list[Any]) -> Any:
    """In the child: the array, mapped read-only (it is the kernel's copy for this run), or,
    ``writable``'s, copy-on-write: a page the child changes becomes its own, the kernel's stays."""
    import numpy

    shape, dtype, private = sent[3], numpy.dtype(sent[4]), len(sent) > 5 and sent[5]
    if sent[0] == "file":
        mapped = numpy.memmap(sent[2], dtype=dtype, mode="c" if private else "r", shape=shape)
        attached.append(mapped)
        return mapped
    if private:
        return _private_map(sent[2], shape, dtype, attached)
    segment = _attach(sent[2])
    attached.append(segment)
    array = numpy.ndarray(shape, dtype, buffer=segment.buf)
    array.flags.writeable = False
    return array


def _private_map(name: str, shape: tuple[int, ...], dtype: Any, attached: list[Any]) -> Any:
    """The segment ``name`` mapped MAP_PRIVATE through its file in /dev/shm (Linux); where it
    has none there, a copy of it."""
    import mmap

    import numpy

    nbytes = max(1, int(numpy.prod(shape, dtype=numpy.int64)) * dtype.itemsize)
    try:
        fd = os.open(os.path.join(SHM_DIR, name.lstrip("/")), os.O_RDONLY)
    except OSError:
        segment = _attach(name)
        try:
            return numpy.ndarray(shape, dtype, buffer=segment.buf).copy()
        finally:
            segment.close()
    try:
        mapped = mmap.mmap(
            fd, nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
    finally:
        os.close(fd)
    attached.append(mapped)
    return numpy.ndarray(shape, dtype, buffer=mapped)


def _attach(name: str) -> Any:
    """The kernel's segment, untracked: the kernel owns it. Before Python 3.13 attaching
    registers it with the resource tracker, which starts that tracker's process (then named as
    a process the user's cell left running) and would unlink the segment at this process's exit."""
    from multiprocessing import resource_tracker, shared_memory

    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    register = resource_tracker.register
    resource_tracker.register = lambda name, rtype: None  # briefly: nothing else registers now
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register


def size_of(sent: Any) -> int:
    """Bytes of one packet (an array at its size, wherever it went; the bytes it holds)."""
    if isinstance(sent, (bytes, bytearray)):
        return len(sent)
    if not isinstance(sent, tuple):
        return 0
    if sent and sent[0] in ("shm", "file"):
        import numpy

        count = 1
        for n in sent[3]:
            count *= int(n)
        return count * numpy.dtype(sent[4]).itemsize
    return sum(len(part) for part in sent if isinstance(part, (bytes, bytearray)))


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"
