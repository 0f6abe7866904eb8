"""``--sweep ... --parallel N``: up to N children at once on this machine, driven from the
cell's own thread (no thread pool: the stop button reaches it at once). Points are taken from
the sweep as room frees up, so a sweep of a million points holds only N at a time. Each child's
start is told to ``on_start`` and its end handed to ``on_done`` as it comes, and ``on_tick`` is
called between (for a table's running times); the stop button kills the running ones (and what
they started), hands them over as interrupted, and starts no more."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

from keras_nbguard.isolation.parent import SAMPLE_SECONDS, Child, ChildResult, OnMessage

OnDone = Callable[[dict[str, Any], ChildResult, "BaseException | None"], None]
OnJob = Callable[[dict[str, Any]], None]


def run_side_by_side(
    jobs: Iterator[dict[str, Any]],
    parallel: int,
    on_message: OnMessage,
    on_done: OnDone,
    on_start: OnJob | None = None,
    on_tick: Callable[[], None] | None = None,
) -> None:
    running: dict[Child, dict[str, Any]] = {}
    try:
        while True:
            while len(running) < parallel:
                job = next(jobs, None)
                if job is None:
                    break
                child = Child()
                running[child] = job  # before its job goes: a stop now still ends it
                child.start(job)
                if on_start is not None:
                    on_start(job)
            if not running:
                return
            ready = set(wait([child.inbox for child in running], SAMPLE_SECONDS))
            for child in list(running):
                child.step(child.inbox in ready, on_message)
                child.sample(_no_sample)
                if child.finished:
                    job = running.pop(child)
                    child.close()
                    on_done(job, child.done, None)
            if on_tick is not None:
                on_tick()
    except KeyboardInterrupt as stop:
        for child in running:
            child.interrupted()
            child.close()
        for child, job in running.items():
            on_done(job, child.done, stop)
        raise


def _no_sample(t: float, rss: int) -> None:
    """Runs side by side keep their samples but send none live (they would mix)."""
