"""Process memory: RSS now, and a background sampler that catches short-lived peaks.

This process's own RSS is sampled by a helper process (``rss_watch``): a thread that woke 50
times a second would take the interpreter lock from the cell as often. The thread here only
drains the helper's samples a few times a second; it samples by itself where there is no helper
(not Linux, or a reader of one's own)."""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable

from keras_nbguard.collectors.rss_watch import DRAIN_SECONDS, RssWatch
from keras_nbguard.records.downsample import halve

RssReader = Callable[[], int]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _statm_reader() -> RssReader | None:
    """A reader of /proc/self/statm through one open descriptor: a few µs a read."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        return None

    def read() -> int:
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE

    try:
        read()
    except (OSError, ValueError, IndexError):
        os.close(fd)
        return None
    return read


@functools.cache
def _reader_of(pid: int) -> RssReader:
    reader = _statm_reader()
    if reader is None:  # not Linux: psutil, imported only here to keep %load_ext cheap
        import psutil

        process = psutil.Process()
        reader = lambda: process.memory_info().rss  # noqa: E731
    return reader


def default_rss_reader() -> RssReader:
    """This process's RSS reader, opened once (per pid: a forked child's /proc/self differs)."""
    return _reader_of(os.getpid())


class PeakRss:
    """The kernel's own high-water mark (VmHWM), reset per run on Linux. None where unsupported.

    Both files stay open (per pid), since opening /proc files cost more than all the rest of a
    run's bookkeeping."""

    def reset(self) -> bool:
        fd = _proc_fd(os.getpid(), "clear_refs", os.O_WRONLY)
        if fd is None:
            return False
        try:
            os.write(fd, b"5")  # "5" resets the peak RSS counter only (Linux >= 4.0)
            return True
        except OSError:
            return False

    def read(self) -> int | None:
        return self.read_with_rss()[0]

    def read_with_rss(self) -> tuple[int | None, int | None]:
        """(the peak, the RSS now) from one read of ``/proc/self/status`` (VmRSS counts what
        statm's second field does): a run's end needs both, and each read costs 10-50 µs."""
        fd = _proc_fd(os.getpid(), "status", os.O_RDONLY)
        if fd is None:
            return None, None
        try:
            status = os.pread(fd, 4096, 0)
        except OSError:
            return None, None
        return _kib_field(status, b"VmHWM:"), _kib_field(status, b"VmRSS:")


def _kib_field(status: bytes, name: bytes) -> int | None:
    try:
        start = status.index(name) + len(name)
        return int(status[start : status.index(b"kB", start)]) * 1024
    except ValueError:
        return None


@functools.cache
def _proc_fd(pid: int, name: str, flags: int) -> int | None:
    try:
        return os.open(f"/proc/{pid}/{name}", flags)
    except OSError:
        return None


class RssSampler:
    """Samples RSS on a daemon thread every ``interval`` seconds, keeping the peak and a series.

    The series is halved (neighbours merged, keeping the larger value, and the step doubled)
    whenever it reaches ``max_samples``, so a long run costs bounded memory and keeps its peaks.
    """

    def __init__(
        self, read: RssReader | None = None, interval: float = 0.01, max_samples: int = 2000
    ) -> None:
        self._read = read or default_rss_reader()
        self._own_rss = read is None  # what the helper process can sample: /proc/<our pid>
        self._watch: RssWatch | None = None
        self._next = 0  # the helper's next sample to read
        self.lost = 0  # helper samples overwritten before they were read
        self.interval = interval
        self._max_samples = max_samples
        self._stop = threading.Event()
        # Held around each sample: stop() takes it once to know no sample is half taken, and
        # never has to wait for the thread itself to wake up and end.
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._t0 = 0.0
        self._keep_every = 1
        self._count = 0
        self._pending: int | None = None
        self.peak: int | None = None
        self.samples: list[tuple[float, int]] = []
        self.error: str | None = None
        self.listeners: list[Callable[[float, int], None]] = []  # each kept sample
        self.visit_listeners: list[Callable[[], None]] = []  # after each visit's samples

    def read_now(self) -> int:
        return self._read()

    @property
    def running(self) -> bool:
        """Whether samples are still being taken."""
        return self._started and not self._stopped

    @property
    def wait_seconds(self) -> float:
        """How long the sampling thread sleeps between visits: a draining of the helper's
        samples, or a sample of its own."""
        return DRAIN_SECONDS if self._watch is not None else self.interval

    def start(self, first: int | None = None) -> None:
        """Start sampling; ``first``: an RSS just read, to begin the series with."""
        self._t0 = time.monotonic()  # the helper's clock too: one clock for the whole machine
        self._take(first)
        if self._own_rss:
            self._watch = _helper()
            if self._watch is not None:
                try:
                    self._next = self._watch.begin(self.interval)
                except OSError:  # it ended: sample here, and from now on
                    self._watch = None
                    _helper_ended()
        self._started = True
        if not _shared_thread().take_on(self):  # it is sampling another run: a thread of our own
            _thread.start_new_thread(self._loop, ())

    def stop(self, last: int | None = None) -> None:
        """End sampling (the thread wakes and ends by itself); safe to call twice or unstarted.
        ``last``: an RSS just read, to end the series with (else it is read here)."""
        with self._lock:
            already, self._stopped = self._stopped, True
            if not already and self._watch is not None:
                self._drain()
                self._watch.end()
        if not already and self.error is None:
            self._take(last, flush=True)  # the series always ends with the state at stop
        self._stop.set()  # last: the woken thread would take the interpreter lock from the read

    def _loop(self) -> None:
        while not self._stop.wait(self.wait_seconds) and self._sample():
            pass

    def _sample(self) -> bool:
        """One sample from the sampling thread; False once sampling has ended."""
        try:
            with self._lock:
                if self._stopped:
                    return False
                if self._watch is not None:
                    self._drain()
                else:
                    self._take()
            for listener in self.visit_listeners:
                listener()
            return True
        except Exception as exc:  # a broken reader must not kill the run, only the figure
            self.error = f"RSS sampler stopped: {exc!r}"
            self._stopped = True  # (the lock is released by now) no retrying a broken reader
            return False

    def _drain(self) -> None:
        assert self._watch is not None
        self._next, samples, lost = self._watch.read(self._next)
        self.lost += lost
        for at, rss in samples:
            if at >= self._t0:
                self._take(rss, at=at - self._t0)

    def _take(self, rss: int | None = None, flush: bool = False, at: float | None = None) -> None:
        if rss is None:
            rss = self._read()
        if self.peak is None or rss > self.peak:
            self.peak = rss
        # A kept sample carries the largest value since the last one, so decimation never
        # hides a spike from the series.
        self._pending = rss if self._pending is None else max(self._pending, rss)
        self._count += 1
        if self._count % self._keep_every and not flush:
            return
        t = at if at is not None else time.monotonic() - self._t0
        kept = self._pending
        self._pending = None
        new = [(t, kept)]
        if flush and kept != rss:
            new.append((t, rss))  # keep the spike, and still end on the state now
        if len(self.samples) + len(new) >= self._max_samples:  # the last ones, too, stay under
            self._halve()
        self.samples.extend(new)
        for listener in self.listeners:
            listener(t, kept)

    def _halve(self) -> None:
        self.samples[:] = halve(self.samples)
        self._keep_every *= 2


class _SamplingThread:
    """One daemon thread per process that samples whichever RssSampler it was handed, and
    sleeps in between runs: starting a thread for every run cost more than the rest of a run's
    bookkeeping.

    It sleeps on a pipe, not an Event, so that the helper process can wake it: a run the helper
    samples wakes it only once it has gone on ``DRAIN_SECONDS`` (a byte from the helper), and a
    shorter run never hands the interpreter lock to it. A run sampled here wakes it at once."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.native_id: int | None = None  # the OS thread id, for accounting its CPU time
        self._wake_read, self.wake_fd = os.pipe()
        os.set_blocking(self.wake_fd, False)  # a wake-up never waits: one pending is enough
        self._sampler: RssSampler | None = None
        _thread.start_new_thread(self._loop, ())

    def take_on(self, sampler: RssSampler) -> bool:
        """Sample ``sampler`` until it stops; False if another one is still being sampled."""
        current = self._sampler
        if current is not None and current.running:
            return False
        self._sampler = sampler
        if sampler._watch is None:  # nobody else will wake the thread: now
            self.wake()
        return True

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # wake-ups pile up unread: it is awake
            os.write(self.wake_fd, b"k")

    def _loop(self) -> None:
        self.native_id = threading.get_native_id()
        while True:
            os.read(self._wake_read, 4096)  # every wake-up so far: one look suffices
            # (self._sampler is left as it is: clearing it here could drop one handed over
            # meanwhile; a stopped one, or a late wake-up, sends the loop back to sleep)
            sampler = self._sampler
            if sampler is None or not sampler.running:
                continue
            if sampler._watch is not None and not sampler._sample():  # the helper woke us
                continue  # a quarter second in: its samples so far, at once
            while not sampler._stop.wait(sampler.wait_seconds) and sampler._sample():
                pass


_shared: _SamplingThread | None = None


def _shared_thread() -> _SamplingThread:
    global _shared
    if _shared is None or _shared.pid != os.getpid():  # a forked child has no such thread
        _shared = _SamplingThread()
    return _shared


_watch: RssWatch | None = None
_watch_failed_for: int | None = None


def _helper() -> RssWatch | None:
    """This process's helper (started on first use), or None where there is none: no /proc (not
    Linux), it could not be started, or it ended (then runs go back to a sampling thread rather
    than start a helper each time). Whether it lives is not asked here (a system call a run):
    a run's ``begin`` finds out, its write to a helper gone raising, and calls _helper_ended."""
    global _watch, _watch_failed_for
    pid = os.getpid()
    if _watch is not None and _watch.pid == pid:  # (a forked child starts one of its own)
        return _watch
    if _watch_failed_for == pid or not os.path.exists(f"/proc/{pid}/statm"):
        return None
    try:
        _watch = RssWatch(pid, wake_fd=_shared_thread().wake_fd)
    except OSError:
        _watch_failed_for = pid
        return None
    return _watch


def _helper_ended() -> None:
    """The helper is gone: runs sample with a thread in this process from now on."""
    global _watch, _watch_failed_for
    if _watch is not None:
        _watch.close()
    _watch, _watch_failed_for = None, os.getpid()
