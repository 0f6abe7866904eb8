"""The kernel's side of an isolated run: start the child process, stream what it says into the
cell while sampling its RSS, and hand over what it gave back (``ChildResult``).

Each child leads a process group of its own (``start_new_session``): what its cell starts is in
it, and ends with it — on an interrupt (``kill``), when its result is in (``close``: the group is
ended once the child has gone), and when the kernel dies (the child's ``guard``: a parent-death
signal and a watchdog). The next run's process, pre-started, is ``spare.Spare``."""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from keras_nbguard.isolation.guard import exited, group_members
from keras_nbguard.isolation.spare import Context

SAMPLE_SECONDS = 0.1  # the child's RSS, read from here: also what a died run keeps
END_SECONDS = 4.0  # after its result: for the child's word on stray threads (it waits 1.5 s)
EXIT_SECONDS = 10.0  # then for it to exit, in the background, before its group is killed
# the stop button: how long the child's cell has to stop as a plain cell does and say its run
# (the epochs it fit), before it is killed; a second press kills it at once
STOP_SECONDS = 3.0

OnMessage = Callable[[tuple[Any, ...]], None]
OnSample = Callable[[float, int], None]

# every child not yet reaped: killed with their groups if the kernel exits before they end
_LIVE: weakref.WeakSet[Child] = weakref.WeakSet()


@dataclass
class ChildResult:
    """What one child process gave back (``result`` None: it died or was stopped)."""

    result: dict[str, Any] | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)
    pid: int | None = None
    startup: float | None = None  # seconds from spawn (or, pre-started, the job) to "ready"
    wall: float = 0.0
    exit: str | None = None  # how it ended, in words, when it did not give a result
    where: str = "fresh process"  # or "Ray task" (a fresh worker process on a Ray cluster)
    messages: list[tuple[Any, ...]] = field(default_factory=list)  # a Ray task's, shown after
    notes: list[str] = field(default_factory=list)  # the end of a run, in words
    sent_bytes: int = 0  # the job as sent (arrays in shared memory counted at their size)


class Child:
    """One fresh interpreter running ``isolation/child.py``: spawned with the modules to load
    while it waits (``preload``), then given one job (``start``)."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.context = Context.now()
        # the child's own stderr (library banners, a crash's last words): kept, not shown
        self.log = tempfile.TemporaryFile(prefix="keras_nbguard-child-")  # noqa: SIM115
        self.spawned = self.started = time.perf_counter()
        try:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "keras_nbguard.isolation.child",
                    str(to_child_r),
                    str(from_child_w),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                stderr=self.log,
                start_new_session=True,  # a process group of its own, led by the child
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        _LIVE.add(self)
        self.inbox = Connection(from_child_r, writable=False)
        self.outbox = Connection(to_child_w, readable=False)
        hello = {
            "preload": list(preload),
            "path": list(sys.path),
            "argv": list(sys.argv),
            "parent": os.getpid(),
        }
        self.outbox.send_bytes(pickle.dumps(hello))
        self.done = ChildResult(pid=self.popen.pid)
        self.prestarted = False  # a spare: its start-up is counted from the job, not the spawn
        self._ended_at: float | None = None  # when the result came: the word may follow
        self._finished = False
        self._process: Any = None

    def start(self, job: dict[str, Any]) -> Child:
        import cloudpickle

        if self.prestarted:
            self.started = time.perf_counter()
        data = cloudpickle.dumps(job)
        self.done.sent_bytes = len(data)
        self.outbox.send_bytes(data)
        self.outbox.close()
        return self

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def finished(self) -> bool:
        """It gave its result and its last word, or it ended without one."""
        return self._finished

    def wait(self, on_message: OnMessage, on_sample: OnSample) -> ChildResult:
        """Pass each message on as it comes, sample the child's RSS, until it has given its
        result or ended. KeyboardInterrupt (the stop button) stops its cell, then kills it, and
        goes on up."""
        try:
            while not self._finished:
                self.step(self.inbox.poll(SAMPLE_SECONDS), on_message)
                self.sample(on_sample)
        except KeyboardInterrupt:
            try:
                self._stop_cell(on_message)
            finally:
                if self.done.result is None:
                    self.interrupted()
            raise
        return self.done

    def _stop_cell(self, on_message: OnMessage) -> None:
        """Interrupt the child's cell as the kernel's own is (SIGINT: KeyboardInterrupt where it
        runs) and wait ``STOP_SECONDS`` for its result: the run it records is the one a plain
        cell stopped there records, its epochs and fit time in. Killed at once, it was
        `fit n/a: the isolated process ended first` after eight seconds of fit."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_SECONDS
        while self.done.result is None and not self._finished and time.monotonic() < deadline:
            self.step(self.inbox.poll(SAMPLE_SECONDS), on_message)

    def step(self, readable: bool, on_message: OnMessage) -> None:
        """Take what the child sent (``readable``: the inbox has data), and notice its end."""
        done = self.done
        while readable:
            try:
                message = pickle.loads(self.inbox.recv_bytes())
            except (EOFError, OSError):
                self._ended(None)
                return
            kind = message[0]
            if kind == "ready":
                done.startup = time.perf_counter() - self.started
            elif kind == "result":
                done.result, done.wall = message[1], time.perf_counter() - self.started
                self._ended_at = time.monotonic()
            elif kind == "end":  # its last word: the threads it left, after a short grace
                self._ended(message[1])
                return
            else:
                on_message(message)
            readable = self.inbox.poll(0)
        if self._ended_at is not None and time.monotonic() - self._ended_at > END_SECONDS:
            self._ended(None)  # a result but no last word: stuck in its exit
        elif self._ended_at is None and self.popen.poll() is not None:
            if self.inbox.poll(0):  # it wrote, then exited, since the inbox was looked at
                self.step(True, on_message)
            else:
                self._ended(None)  # gone without a word

    def _ended(self, threads: list[str] | None) -> None:
        done = self._finish_once()
        if done is None:
            return
        if threads:
            names = ", ".join(threads[:3]) + (", ..." if len(threads) > 3 else "")
            count = f"{len(threads)} thread{'s' if len(threads) > 1 else ''}"
            done.notes.append(f"{count} still running at the end ({names}): ended")
        if done.result is None:
            done.wall = time.perf_counter() - self.started
            deadline = time.monotonic() + 2
            while not exited(self.popen.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            self.end_group()  # before it is reaped: its group id can't have been reused
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(1)
            if self.popen.returncode is None:
                self.kill()
            done.exit = describe_exit(self.popen.returncode, self._last_words())
            _LIVE.discard(self)
            return
        left = [pid for pid in group_members(self.popen.pid) if pid != self.popen.pid]
        for pid in left:  # what its cell started and left running
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if left:
            plural = "es" if len(left) > 1 else ""
            done.notes.append(f"{len(left)} process{plural} its cell started still running: ended")
        self._reap_later()

    def _finish_once(self) -> ChildResult | None:
        if self._finished:
            return None
        self._finished = True
        return self.done

    def sample(self, on_sample: OnSample) -> None:
        import psutil

        try:
            if self._process is None:
                self._process = psutil.Process(self.popen.pid)
            rss = int(self._process.memory_info().rss)
        except Exception:  # it has just ended
            return
        if rss == 0:  # dying (its memory gone, its exit not yet seen): no run's RSS was ever 0
            return
        t = time.perf_counter() - self.started
        self.done.samples.append((t, rss))
        on_sample(t, rss)

    def interrupted(self) -> None:
        """The stop button: the child and what it started end now."""
        self.kill()
        self.done.wall = time.perf_counter() - self.started
        self.done.exit = "interrupted: the child process was stopped"
        self._finished = True

    def kill(self) -> None:
        """The child and its process group, at once."""
        self.end_group()
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()
        _LIVE.discard(self)

    def end_group(self) -> int:
        """SIGKILL what is left of the child's process group (the processes its cell started);
        how many there were. Done before the child is reaped, while its pid can't be reused."""
        members = group_members(self.popen.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        return len([pid for pid in members if pid != self.popen.pid])

    def _reap_later(self) -> None:
        """It gave its result: let it exit in its own time (TensorFlow's teardown), then end
        what its cell left running; the cell goes on meanwhile."""
        threading.Thread(target=self._reap, name="keras_nbguard-reaper", daemon=True).start()

    def _reap(self) -> None:
        deadline = time.monotonic() + EXIT_SECONDS
        while time.monotonic() < deadline and not exited(self.popen.pid):
            time.sleep(0.05)
        self.kill()  # exited but not reaped yet: its group id can't have been reused

    def _last_words(self) -> str:
        """The last line of the child's own stderr (a crash's message), if any."""
        try:
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - 4096))
            lines = self.log.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1].strip()[:300] if lines else ""

    def close(self) -> None:
        self.inbox.close()
        if not self.outbox.closed:
            self.outbox.close()
        with contextlib.suppress(OSError):
            self.log.close()


def kill_all() -> None:
    """The kernel is exiting, or the extension unloading: no child of it lives on."""
    for child in list(_LIVE):
        with contextlib.suppress(Exception):
            child.kill()


atexit.register(kill_all)


def describe_exit(code: int | None, last_words: str = "") -> str:
    said = f" (its last words: {last_words})" if last_words else ""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = " (the OOM killer, or kill -9)" if name == "SIGKILL" else ""
        return f"the child process died: {name}{why}{said}"
    return f"the child process exited with code {code} before it sent its result{said}"
