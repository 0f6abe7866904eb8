"""Run a cell's code with room on Python's frame stack, so that deep calls stop paying for it.

CPython (3.11 and later) keeps a thread's frames in chunks of 16 KiB (``push_chunk`` in
``Python/pystate.c``): a call that finds no room left in the last chunk maps a new one, and its
return unmaps it again. Code whose depth goes up and down across a chunk's end — TensorFlow
tracing a train step, AutoGraph converting it — maps and unmaps the same chunk thousands of times,
faulting its pages in each time. Measured on Keras' GAN example: 32k page faults and ~190 ms of
system time in one fit under ``%%kerasrun``, 19k bare (where the ends fall depends on the depth a
cell starts at, so any wrapper can make it better or worse); with room, 7k and 20 ms.

A frame with a large value stack opens a chunk of its own with as much room again after it, and
every call below it stays in that chunk. The room costs address space only: nothing writes a
frame's value stack before it is used, and a page never touched is never faulted in.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# 2**15 slots of 8 bytes: a 256 KiB frame in a 512 KiB chunk, ~256 KiB of room below it — more
# than a thousand frames, past Python's own recursion limit (2**13 was enough for the GAN example).
ROOM_SLOTS = 1 << 15


def _call(function: Callable[..., T], *args: Any) -> T:
    __tracebackhide__ = True  # IPython leaves this frame out of the user's tracebacks
    return function(*args)


def _with_room(function: Callable[..., T]) -> Callable[..., T]:
    """``function`` with ``ROOM_SLOTS`` more of value stack in its frame; ``function`` itself
    where this Python can't make such a copy (the call still works, without the room)."""
    code = getattr(function, "__code__", None)
    try:
        roomy = code.replace(co_stacksize=code.co_stacksize + ROOM_SLOTS)  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return function
    return types.FunctionType(roomy, function.__globals__, function.__name__)


call_with_room: Callable[..., Any] = _with_room(_call)
"""``call_with_room(function, *args)``: ``function(*args)``, with every frame it makes kept in one
chunk of Python's frame stack."""
