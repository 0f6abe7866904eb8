"""TensorFlow lookup tables whose memory goes with them.

An eager ``tf.lookup.StaticHashTable`` keeps its keys and values in a resource that TensorFlow
registers under a unique name, and nothing ever destroys it: once the table object is gone, its
contents stay for the life of the process (measured: +1.06 MiB of heap for every table of 20,000
string tokens made and dropped; +0.03 with the resource destroyed). Keras' ``TextVectorization``
and ``StringLookup`` hold such tables, so a model with them loaded again and again — what
``--isolate`` does in the kernel with each run's model — kept its whole vocabulary once a load.

While ``freed_with_their_objects()`` is active, every lookup table made gets a finalizer that
destroys its resource once the table object itself is collected. Only then: a table alive
somewhere keeps working, and a resource already destroyed is no error.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator
from typing import Any

from keras_nbguard.collectors.patching import AttributePatch

# tf.lookup's tables with a resource of their own (StaticVocabularyTable keeps a StaticHashTable)
TABLES = ("StaticHashTable",)
EXPERIMENTAL_TABLES = ("MutableHashTable", "DenseHashTable")


@contextlib.contextmanager
def freed_with_their_objects() -> Iterator[None]:
    """While inside, each ``tf.lookup`` table made destroys its resource when it is collected
    (nothing at all where TensorFlow is not imported)."""
    tf = sys.modules.get("tensorflow")
    patches = [] if tf is None else [_patch(table, tf) for table in _table_classes(tf)]
    try:
        yield
    finally:
        for patch in reversed(patches):
            patch.restore()


def _table_classes(tf: Any) -> list[type]:
    lookup = getattr(tf, "lookup", None)
    experimental = getattr(lookup, "experimental", None)
    found = [getattr(lookup, name, None) for name in TABLES]
    found += [getattr(experimental, name, None) for name in EXPERIMENTAL_TABLES]
    return [table for table in found if isinstance(table, type)]


def _patch(table: type, tf: Any) -> AttributePatch:
    original: Any = getattr(table, "__init__")  # noqa: B009 (mypy: a class, not an instance)

    def made(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True  # IPython leaves our frame out of the user's traceback
        original(self, *args, **kwargs)
        _destroy_when_gone(self, tf)

    return AttributePatch(table, "__init__", made)


def _destroy_when_gone(table: Any, tf: Any) -> None:
    try:
        handle = table.resource_handle
        if not hasattr(handle, "numpy"):  # made in a graph being traced: the graph's to free
            return
        finalizer = weakref.finalize(table, _destroy, tf, handle)
    except (TypeError, AttributeError, RuntimeError, ValueError):
        return  # a table we can't watch leaks as it did before
    finalizer.atexit = False  # at exit, TensorFlow is being torn down: nothing to give back


def _destroy(tf: Any, handle: Any) -> None:
    with contextlib.suppress(Exception):  # a finalizer must never raise
        tf.raw_ops.DestroyResourceOp(resource=handle, ignore_lookup_error=True)
