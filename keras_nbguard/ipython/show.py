"""A run's summary, shown as ``display(bundle, raw=True)`` shows it, without two round trips.

ipykernel's display publisher flushes stdout and stderr before each display message, so that
text printed earlier comes out first. Each flush waits for the kernel's IOPub thread to answer,
even with nothing to send: +0.3 ms on every summary (bench_core.py). When neither stream holds
unsent text, the summary cannot overtake any, so it goes out without them; anything unsent, or
a front end that is not ipykernel's, and it is shown the usual way."""

from __future__ import annotations

import sys
from typing import Any

from IPython.display import display


def show_bundle(shell: Any, bundle: dict[str, Any]) -> None:
    publisher: Any = getattr(shell, "display_pub", None)
    if not hasattr(publisher, "_flush_streams") or not (
        _nothing_unsent(sys.stdout) and _nothing_unsent(sys.stderr)
    ):
        display(bundle, raw=True)
        return
    publisher._flush_streams = _flushed_already  # this message only: the class's comes back
    try:
        display(bundle, raw=True)
    finally:
        del publisher._flush_streams


def _flushed_already() -> None:
    pass


def _nothing_unsent(stream: Any) -> bool:
    """True when ipykernel's ``OutStream`` has no text waiting for its timed flush. It sets the
    flag on each write and clears it as it takes the buffers, on the IOPub thread, where our
    message is queued after that flush's own."""
    for flag in ("_flush_pending", "_subprocess_flush_pending"):
        if getattr(stream, flag, True):
            return False
    buffers = getattr(stream, "_buffers", None)
    return buffers is not None and not any(buffer.tell() for buffer in list(buffers.values()))
