"""What of the user's own grows run after run: the names in the notebook's namespace whose value
gained items or bytes since the last run, with about how much memory the new items hold.

Cheap by design: every run notes only ``len()`` (or ``nbytes``) of each top-level name, a few
microseconds; the new items are sized only when the run's RSS after grew, and then by sampling a
few of them, never by walking a whole container.
"""

from __future__ import annotations

import itertools
import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from keras_nbguard.diagnosis.findings import GROWTH_BYTES_PER_RUN
from keras_nbguard.records.run import Growth, RunRecord

SAMPLED_ITEMS = 8  # new items sized, their mean times the count is the estimate
DEPTH = 3  # how deep an item is sized (a History's dict of lists is 3 deep)
MIN_BYTES = 64 * 2**10  # growth below this is not worth naming
SHOWN = 3
SIZED = (list, dict, set, deque, tuple)


class NamespaceCensus:
    def __init__(self, warn: Callable[[str], object]) -> None:
        self.warn = warn
        self._sizes: dict[str, tuple[int, int]] = {}  # name -> (items, nbytes) after last run

    def after_run(
        self, record: RunRecord, previous: RunRecord | None, namespace: Mapping[str, Any]
    ) -> RunRecord:
        """``record`` with what grew in ``namespace`` since the last run, when RSS grew."""
        try:
            return self._after_run(record, previous, namespace)
        except Exception as exc:  # a bug of ours, or a hostile object, must not lose the run
            self.warn(f"what grew was not looked for: {type(exc).__name__}: {exc}")
            return record

    def _after_run(
        self, record: RunRecord, previous: RunRecord | None, namespace: Mapping[str, Any]
    ) -> RunRecord:
        sizes = {
            name: _size(value)
            for name, value in list(namespace.items())
            if not name.startswith("_")
        }
        earlier, self._sizes = self._sizes, {k: v for k, v in sizes.items() if v is not None}
        # over what the last run left: its RSS after, or this run's start where lower (its
        # collection gave back what the last one's end still held: a prediction's temporaries
        # there hid the 32 MiB a list of the user's kept here, and no name was named)
        left = None if previous is None else previous.rss_after
        if left is not None and record.rss_before is not None:
            left = min(left, record.rss_before)
        grew = (
            left is not None
            and record.rss_after is not None
            and record.rss_after - left >= GROWTH_BYTES_PER_RUN
        )
        if not grew or not earlier:
            return record
        found = []
        for name, size in self._sizes.items():
            was = earlier.get(name)
            if was is None or size <= was:
                continue
            items, nbytes = size[0] - was[0], size[1] - was[1]
            value = namespace.get(name)
            estimate = nbytes if items <= 0 else _new_items_bytes(value, items)
            if estimate >= MIN_BYTES:
                found.append(
                    Growth(name, type(value).__name__, items if items > 0 else None, estimate)
                )
        found.sort(key=lambda g: -(g.bytes or 0))
        return record.replaced(growth=tuple(found[:SHOWN]))


def _size(value: Any) -> tuple[int, int] | None:
    if isinstance(value, SIZED):
        return (len(value), 0)
    nbytes = getattr(type(value), "nbytes", None)  # numpy arrays: on the type, cheap to read
    if nbytes is not None:
        try:
            return (0, int(value.nbytes))
        except (TypeError, ValueError, AttributeError):
            return None
    return None


def _new_items_bytes(container: Any, count: int) -> int:
    """About how much the last ``count`` items of ``container`` hold, from a sample of them."""
    if isinstance(container, dict):
        newest = reversed(container.values())
    elif isinstance(container, set):
        newest = iter(container)
    else:
        newest = reversed(container)
    sample = list(itertools.islice(newest, min(count, SAMPLED_ITEMS)))
    if not sample:
        return 0
    return int(sum(_deep_bytes(item, DEPTH) for item in sample) / len(sample) * count)


def _deep_bytes(value: Any, depth: int) -> int:
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if hasattr(value, "count_params"):  # a Keras model or layer: its weights
        try:
            return int(value.count_params()) * 4
        except Exception:  # an unbuilt model can't count
            return sys.getsizeof(value)
    own = sys.getsizeof(value)
    if depth <= 0:
        return own
    parts: Iterable[Any]
    if isinstance(value, dict):
        parts = itertools.chain(value.keys(), value.values())
    elif isinstance(value, SIZED):
        parts = value
    elif isinstance(getattr(value, "__dict__", None), dict):
        parts = vars(value).values()
    else:
        return own
    return own + sum(_deep_bytes(p, depth - 1) for p in itertools.islice(parts, 10_000))
