"""In the child: never outlive the kernel, and never keep it waiting.

The child leads its own process group (the kernel starts it with ``start_new_session``), so what
its cell starts is in that group. When the kernel dies — even by SIGKILL — the kernel can do
nothing; the child ends the group itself: Linux sends it a parent-death signal (``prctl``), and a
watchdog thread checks ``getppid`` twice a second where there is no such signal or the signal's
handler can't run. At the end, the threads the cell left get a short grace, then a word and an
exit that does not wait for them. The kernel's side reads the group from outside (``exited``,
``group_members``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

PR_SET_PDEATHSIG = 1
RSS_HELPER = os.path.join("keras_nbguard", "collectors", "rss_watch.py")  # the run's RSS sampler
WATCH_SECONDS = 0.5
THREAD_GRACE = 1.5  # seconds the threads the cell left get to end by themselves


_guarded_pid: int | None = None  # the child's own: the processes it forks inherit the handler


def end_group(*_: object) -> None:
    """SIGKILL this process's group: the child and every process its cell started."""
    if _guarded_pid is not None and os.getpid() != _guarded_pid:
        _end_as_by_default()
    with contextlib.suppress(OSError):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(1)


def _end_as_by_default() -> None:
    """A fork of the child got the SIGTERM: a worker of the cell's ``multiprocessing`` pool
    (Keras' ``PyDataset(use_multiprocessing=True)``), ended by ``Pool.terminate`` at the end of
    each fit. It inherited our handler, and must end alone, as SIGTERM ends it by default, not
    take the child and its group along."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(128 + signal.SIGTERM)  # (not reached: the signal ends it)


def guard(parent: int) -> None:
    """End with the kernel (pid ``parent``), taking the process group along."""
    global _guarded_pid
    _guarded_pid = os.getpid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    with contextlib.suppress(ValueError):  # not the main thread (never, in child.main)
        signal.signal(signal.SIGTERM, end_group)
    if os.getppid() != parent:  # the kernel died before the signal was asked for
        end_group()
    threading.Thread(
        target=_watch, args=(parent,), name="keras_nbguard-watchdog", daemon=True
    ).start()


def _watch(parent: int) -> None:
    while True:
        time.sleep(WATCH_SECONDS)
        if os.getppid() != parent:
            end_group()


def stray_threads(grace: float = THREAD_GRACE) -> list[str]:
    """The non-daemon threads the cell left that are still running after ``grace`` seconds
    (an interpreter's exit would wait for them forever). Idle thread pools are told to end
    first, as the interpreter's exit would."""
    _wake_idle_pools()
    deadline = time.monotonic() + grace
    for thread in _non_daemon():
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in _non_daemon()]


def _non_daemon() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _wake_idle_pools() -> None:
    """concurrent.futures' workers wait for work until the interpreter's exit tells them to
    end; tell them now (a private part: skipped if it changed)."""
    with contextlib.suppress(Exception):
        from concurrent.futures import thread as pools

        pools._shutdown = True
        for queue in list(pools._threads_queues.values()):
            queue.put(None)


# -- in the kernel: the child's group, seen from outside ----------------------------------


def exited(pid: int) -> bool:
    """Whether the child has exited, leaving it to be reaped (Linux: waitid's WNOWAIT)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already
        return True
    except (AttributeError, OSError):  # no waitid here: tell by its status instead
        return _status(pid) in (None, "zombie")
    return info is not None


def _status(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).status())
    except Exception:
        return None


def group_members(pgid: int) -> list[int]:
    """The live processes of the group, but the child's own RSS helper (ours: it ends with the
    child) and zombies (ended, not yet reaped by the child): "a process its cell started still
    running" named one of those after every run of two of Keras' examples."""
    try:
        import psutil

        pids = psutil.pids()
    except Exception:
        return []
    members = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid and not _ours_or_ended(psutil, pid):
                members.append(pid)
    return members


def _ours_or_ended(psutil: Any, pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        return any(part.endswith(RSS_HELPER) for part in process.cmdline()[:4])
    except Exception:  # gone meanwhile
        return True
