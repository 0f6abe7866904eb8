"""RSS samples taken by a helper process, so that sampling never takes the kernel's interpreter
lock.

A Python thread that wakes 50 times a second takes the interpreter lock each time, and a
pure-Python cell pays for the hand-offs (1–4 % here). The helper is a small Python process of its
own (this file run as a script: stdlib only, no site, so it starts in milliseconds) that reads
``/proc/<pid>/statm`` into a ring of samples in shared memory while a run is going; the kernel
drains the ring a few times a second (``DRAIN_SECONDS``) and once more at the run's end. The
helper ends by itself when the kernel does.

A run shorter than ``DRAIN_SECONDS`` wakes no thread of the kernel: the helper writes a byte to
the kernel's sampling thread's pipe once a run has gone on that long, and only then does the
thread start draining (each wake of a thread costs the cell two hand-offs of the interpreter
lock).

Layout of the shared file: a header (samples written so far, by the helper; runs sampling now,
the interval and runs begun so far, by the kernel), then ``SLOTS`` entries of (monotonic time,
RSS in bytes).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time

HEADER = struct.Struct("<QQdQ")  # written, active, interval, begun
WRITTEN, ACTIVE, INTERVAL, BEGUN = 0, 8, 16, 24
ENTRY = struct.Struct("<dq")  # time.monotonic(), RSS bytes
OFFSET = 64
SLOTS = 8192  # 160 s at 50 Hz: the kernel drains every quarter second
SIZE = OFFSET + SLOTS * ENTRY.size
IDLE_SECONDS = 1.0  # an idle helper waits for a run's wake-up byte this long, then looks around
DRAIN_SECONDS = 0.25  # how often the kernel reads the ring while a run goes


class RssWatch:
    """The kernel's side: starts the helper for ``pid`` and reads what it wrote. ``wake_fd``:
    the write end of a pipe the helper writes a byte to once a run has gone ``DRAIN_SECONDS``."""

    def __init__(self, pid: int, wake_fd: int) -> None:
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="keras-nbguard-rss-", dir=folder)
        try:
            os.ftruncate(fd, SIZE)
            self._buffer = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        # -I -S: no site, no user paths; the helper needs the stdlib only. It unlinks the file
        # once it has it open (the two mappings keep the memory). Its stdin is how a run wakes
        # it, and its end of file says the kernel is gone.
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, path, str(pid), str(wake_fd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(wake_fd,),
            )
        except BaseException:
            self._buffer.close()
            os.unlink(path)
            raise
        self._path = path
        self.pid = pid

    def begin(self, interval: float) -> int:
        """A run starts sampling; returns the number written so far (its first index).
        ``OSError`` if the helper is gone."""
        _, active, _, begun = HEADER.unpack_from(self._buffer, 0)
        struct.pack_into("<d", self._buffer, INTERVAL, interval)
        struct.pack_into("<Q", self._buffer, BEGUN, begun + 1)  # before ACTIVE: never missed
        struct.pack_into("<Q", self._buffer, ACTIVE, active + 1)
        assert self.process.stdin is not None
        os.write(self.process.stdin.fileno(), b"\n")  # a system call: no lock hand-off
        return self.written()

    def end(self) -> None:
        active = struct.unpack_from("<Q", self._buffer, ACTIVE)[0]
        struct.pack_into("<Q", self._buffer, ACTIVE, max(0, active - 1))

    def written(self) -> int:
        return int(struct.unpack_from("<Q", self._buffer, WRITTEN)[0])

    def read(self, start: int) -> tuple[int, list[tuple[float, int]], int]:
        """The samples from index ``start`` on: (next index, samples, how many were lost)."""
        end = self.written()
        lost = max(0, end - start - SLOTS)
        samples = [
            ENTRY.unpack_from(self._buffer, OFFSET + (i % SLOTS) * ENTRY.size)
            for i in range(start + lost, end)
        ]
        return end, samples, lost

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.kill()
        self.process.wait()
        if os.path.exists(self._path):
            os.unlink(self._path)


def _helper(path: str, pid: int, wake_fd: int) -> None:
    """The helper's loop: sample while a run is active, idle otherwise, end with the kernel; a
    run that goes on ``DRAIN_SECONDS`` wakes the kernel's thread that drains the samples."""
    # Jupyter's stop button sends SIGINT to the kernel's whole process group, this helper
    # included: it killed the helper, and every later run sampled with a thread instead
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = os.open(path, os.O_RDWR)
    buffer = mmap.mmap(fd, SIZE)
    os.close(fd)
    os.unlink(path)
    statm = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
    page = os.sysconf("SC_PAGE_SIZE")
    parent = os.getppid()
    written = 0
    seen_begun, wake_at = 0, None  # the runs begun so far; when to wake the kernel's thread
    while os.getppid() == parent:  # reparented: the kernel is gone
        _, active, interval, begun = HEADER.unpack_from(buffer, 0)
        if begun != seen_begun:  # a new run (the one before may have ended unseen)
            seen_begun, wake_at = begun, time.monotonic() + DRAIN_SECONDS
        if not active:
            woken, _, _ = select.select([0], [], [], IDLE_SECONDS)
            if woken and not os.read(0, 4096):
                return  # end of file: the kernel is gone
            continue
        try:
            rss = int(os.pread(statm, 128, 0).split()[1]) * page
        except (OSError, ValueError, IndexError):
            return  # the process is gone
        ENTRY.pack_into(buffer, OFFSET + (written % SLOTS) * ENTRY.size, time.monotonic(), rss)
        written += 1
        struct.pack_into("<Q", buffer, WRITTEN, written)  # after the entry: never half read
        if wake_at is not None and time.monotonic() >= wake_at:
            wake_at = None
            with contextlib.suppress(BlockingIOError):  # a pipe full of wake-ups: it is awake
                os.write(wake_fd, b"w")
        time.sleep(interval)


if __name__ == "__main__":
    _helper(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
