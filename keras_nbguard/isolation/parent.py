"""The kernel's side of an isolated run: start the child process, stream what it says into the
cell while sampling its RSS, and turn what comes back into the run's record (``IsolatedRun``),
the names bound and the cell's value. A child that dies or is interrupted is recorded too."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from ..records import GpuReading, RunRecord
from ..tracking import Run

SAMPLE_SECONDS = 0.1  # the child's RSS, read from here: also what a died run keeps
GRACE_SECONDS = 30  # after its result, for the child to exit


@dataclass
class ChildResult:
    """What one child process gave back (``result`` None: it died or was stopped)."""

    result: dict[str, Any] | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)
    pid: int | None = None
    startup: float | None = None  # seconds from spawn to the child's "ready"
    wall: float = 0.0
    exit: str | None = None  # how it ended, in words, when it did not give a result
    where: str = "fresh process"  # or "Ray task" (a fresh worker process on a Ray cluster)
    messages: list[tuple[Any, ...]] = field(default_factory=list)  # a Ray task's, shown after


class Child:
    """One fresh interpreter running ``isolation/child.py``: spawned with the modules to load
    while it waits (``preload``), then given one job (``start``)."""

    def __init__(self, preload: Sequence[str] = (), cwd: str | None = None) -> None:
        import cloudpickle

        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.spawned = self.started = time.perf_counter()
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "keras_nbguard.isolation.child",
                str(to_child_r),
                str(from_child_w),
            ],
            pass_fds=(to_child_r, from_child_w),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.inbox = Connection(from_child_r, writable=False)
        self.outbox = Connection(to_child_w, readable=False)
        self.outbox.send_bytes(cloudpickle.dumps(list(preload)))
        self.done = ChildResult(pid=self.popen.pid)
        self.prestarted = False  # a spare: its start-up is counted from the job, not the spawn

    def start(self, job: dict[str, Any]) -> Child:
        import cloudpickle

        if self.prestarted:
            self.started = time.perf_counter()
        self.outbox.send_bytes(cloudpickle.dumps(job))
        self.outbox.close()
        return self

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, on_message: Any, on_sample: Any) -> ChildResult:
        """Pass each message on as it comes, sample the child's RSS, until it gives its result
        or ends. KeyboardInterrupt (the stop button) kills it and goes on up."""
        import psutil

        process = psutil.Process(self.popen.pid)
        done = self.done
        try:
            while done.result is None:
                if self.inbox.poll(SAMPLE_SECONDS):
                    try:
                        message = pickle.loads(self.inbox.recv_bytes())
                    except EOFError:
                        break
                    if message[0] == "ready":
                        done.startup = time.perf_counter() - self.started
                    elif message[0] == "result":
                        done.result = message[1]
                    else:
                        on_message(message)
                elif self.popen.poll() is not None:
                    break
                self._sample(process, on_sample)
        except KeyboardInterrupt:
            self.kill()
            done.exit = "interrupted: the child process was stopped"
            raise
        finally:
            done.wall = time.perf_counter() - self.started
        if done.result is None:
            self.popen.wait()
            done.exit = describe_exit(self.popen.returncode)
        else:
            try:
                self.popen.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
        return done

    def _sample(self, process: Any, on_sample: Any) -> None:
        try:
            rss = int(process.memory_info().rss)
        except Exception:  # it has just ended
            return
        t = time.perf_counter() - self.started
        self.done.samples.append((t, rss))
        on_sample(t, rss)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()

    def close(self) -> None:
        self.inbox.close()
        if not self.outbox.closed:
            self.outbox.close()


class Spare:
    """The next run's process, started while the user reads this run's result (``--prestart``)
    with the cell's imports loaded, so that the next run skips the interpreter's and the
    framework's start-up. One per kernel; it holds the memory of what it imported meanwhile."""

    def __init__(self) -> None:
        self.child: Child | None = None
        atexit.register(self.close)

    def take(self) -> Child | None:
        child, self.child = self.child, None
        if child is not None and child.alive():
            child.prestarted = True
            return child
        if child is not None:
            child.close()
        return None

    def make(self, preload: Sequence[str]) -> None:
        self.close()
        self.child = Child(preload)

    def close(self) -> None:
        if self.child is not None:
            self.child.kill()  # waiting for a job, or still importing: nothing to lose
            self.child.close()
            self.child = None


def describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = " (the OOM killer, or kill -9)" if name == "SIGKILL" else ""
        return f"the child process died: {name}{why}"
    return f"the child process exited with code {code} before it sent its result"


class IsolatedRun(Run):
    """A run whose cell happens in a child process: nothing is prepared or measured in the
    kernel; the record is the child's own, marked isolated (or, if it died, the kernel's view of
    it: its RSS samples and how it ended)."""

    child: ChildResult | None = None
    params: dict[str, Any] | None = None
    not_sent: dict[str, str] | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self, exc: BaseException | None) -> RunRecord:
        child = self.child or ChildResult(exit="the child process did not start")
        record = self._from_child(child, exc)
        key = self.key
        self.record = dataclasses.replace(
            record,
            label=self.label,
            run_number=self.run_number,
            cleared=True,
            notebook=key.notebook if key else None,
            cell_id=key.cell_id if key else None,
            kernel_id=key.kernel_id if key else None,
            pid=key.pid if key else None,
            isolated=self._note(child),
            params=self.params,
            findings=(),
            deep_clean=None,
            stale_models=None,
            released_models=None,
        )
        return self.record

    def _from_child(self, child: ChildResult, exc: BaseException | None) -> RunRecord:
        stored = (child.result or {}).get("record")
        if stored is not None:
            return RunRecord.from_dict(stored)
        samples = tuple(child.samples)
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "died"
        if child.result is not None:  # it answered, but ran nothing (a syntax error)
            status = "error"
        return RunRecord(
            label=self.label,
            status=status,
            started_at=self.started_at,
            wall_seconds=child.wall,
            fit_seconds=None,
            fits=(),
            rss_before=samples[0][1] if samples else None,
            rss_after=samples[-1][1] if samples else None,
            rss_peak=max((rss for _, rss in samples), default=None),
            gpu=GpuReading(reason="the isolated process ended before its GPU was read"),
            cleared=True,
            traces=None,
            trace_reason="the isolated process ended first",
            error=child.exit or (child.result or {}).get("error"),
            rss_samples=samples,
        )

    def _note(self, child: ChildResult) -> str:
        start = "n/a" if child.startup is None else f"{child.startup:.2f} s"
        words = f"{child.where} (pid {child.pid}), start-up {start}"
        if self.not_sent:
            words += "; not sent back: " + ", ".join(
                f"{name} ({why})" for name, why in self.not_sent.items()
            )
        return words
