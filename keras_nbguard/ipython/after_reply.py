"""A callback that runs right after the cell's reply, on a Jupyter kernel's loop (ipykernel).

ipykernel runs a cell inside the coroutine that then sends its reply and the kernel's "idle";
IPython runs a cell without top-level ``await`` synchronously, never yielding to the loop, so a
callback the cell puts on the loop runs once that coroutine has returned: after the reply, and
in ipykernel 7.4 before the loop looks for the next request (a delay would let a plain cell of
Run All go first; where a version takes a queued request first, that cell's pre_run_cell does
the work before its code). The front end sees the cell end without waiting for the work; Run
All pays for it before the next cell, as it did in the cell. A cell with top-level ``await``
runs as a task of its own, and the callback runs before its reply, as the work did. Anywhere
else (a terminal, a script, a thread of the user's or a kernel's subshell, a loop of the user's)
the schedule answers False, and the work is done at once (with whatever a callback already on
the kernel's loop had still to do).

While it runs it holds the interpreter lock, and a thread with the reply still to pass on
(ipykernel 7's shell channel thread) may wait for it: the cell's own time in a kernel is 0.1-0.4
ms shorter, and seen from the front end it ended ~0.3 ms sooner in one pair of rounds of
bench_core.py's kernel bench and within the noise in another (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

Schedule = Callable[[Callable[[], None]], bool]


def after_reply(shell: Any) -> Schedule | None:
    """The schedule for ``shell``'s kernel, or None where the shell has no kernel loop."""
    io_loop = getattr(getattr(shell, "kernel", None), "io_loop", None)
    loop = getattr(io_loop, "asyncio_loop", None)  # tornado's IOLoop over asyncio's
    if not isinstance(loop, asyncio.AbstractEventLoop):
        return None

    def schedule(callback: Callable[[], None]) -> bool:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread
            return False
        if running is not loop or loop.is_closed():
            return False
        loop.call_soon(callback)
        return True

    return schedule
