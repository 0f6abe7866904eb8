"""Keras' name counters after our clear: a new layer never takes the name of one that outlives it.

``clear_session()`` restarts the counters that make layer names unique. A layer made before the
clear keeps its name, so the run's first new ``keras.Sequential`` was named ``sequential`` again,
beside a setup cell's ``encoder`` of that name, and a model joining the two failed ("The name
"sequential" is used 2 times in the model"): a cell that runs bare broke under the magic.

Counting every name on (as plain cells do) gave each run's variables new names, and TensorFlow's
kernel cache, which our clears keep, a new handle kernel for each (+0.76 MiB a run on the MNIST
convnet). So after our clear the counters restart as before, but skip the names that layers made
elsewhere still have: those made by cells run without the magic, and by other labels' latest runs.
A run then takes the lowest free names, the same ones run after run, and a label re-run beside
another keeps its names too (each skips only the other's).

A run's own last layers are replaced, as a rule, and their names taken again; but a cell that
makes a layer once and reuses it on re-runs (``if "encoder" not in globals(): encoder = ...``)
keeps it beside the new ones. The IPython layer says which before the run (``hold``): the run
skips their names too, so its new layers take the names they took the first time.

Keras 3 keys its counters by prefix (``dense``); Keras 2 by ``(namespace, prefix)``. Both name
the n-th object ``prefix_n`` and the first ``prefix``, reading the counter, then adding one.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from keras_nbguard import backends

# prefixes that name no layer: every symbolic tensor and shape inference takes one
UNCHECKED = frozenset({"keras_tensor", "scratch_graph"})
MAX_IMPLIED = 10_000  # names read off one plain counter (a loop that made 100k layers)
MAX_ITEMS = 256  # a longer list or dict is data, not models kept (``names_in`` looks at each)


class _Names:
    """The names to skip: made outside any run, and by each label's latest run."""

    def __init__(self) -> None:
        self.outside: set[str] = set()
        self.by_label: dict[str, set[str]] = {}
        self.held: dict[str, set[str]] = {}  # a label's names its next run keeps (``hold``)
        self.label: str | None = None  # the run naming now; None: a cell without the magic

    def avoided_by(self, label: str | None) -> set[str]:
        others = (names for other, names in self.by_label.items() if other != label)
        return self.outside.union(*others)

    def made(self, name: str) -> None:
        if self.label is None:
            self.outside.add(name)
        else:
            self.by_label.setdefault(self.label, set()).add(name)


NAMES = _Names()


class SkippingCounters(collections.defaultdict[Any, int]):
    """Keras' counters, that never hand out a name in ``avoid`` and note each one handed out."""

    def __init__(self, counters: Mapping[Any, int], avoid: set[str]) -> None:
        super().__init__(int, counters)
        self.avoid = avoid

    def __contains__(self, key: object) -> bool:  # "dense" itself is taken: name "dense_1"
        return super().__contains__(key) or _prefix(key) in self.avoid

    def __missing__(self, key: Any) -> int:
        count = self._free(key, 1 if _prefix(key) in self.avoid else 0)
        dict.__setitem__(self, key, count)
        return count

    def __setitem__(self, key: Any, count: int) -> None:
        prefix = _prefix(key)
        if prefix not in UNCHECKED:
            before = dict.get(self, key, 0)
            NAMES.made(f"{prefix}_{before}" if before else prefix)
            count = self._free(key, count)
        dict.__setitem__(self, key, count)

    def _free(self, key: Any, count: int) -> int:
        prefix = _prefix(key)
        while count and f"{prefix}_{count}" in self.avoid:
            count += 1
        return count


def before_clear(counters: Mapping[Any, int] | None) -> None:
    """Note the names Keras' own counters handed out (before our first clear, or since the
    user's own ``clear_session()``): all made outside our runs, as far as anyone can tell."""
    if counters is None or isinstance(counters, SkippingCounters):
        return  # ours noted each name as it went
    for key, count in list(counters.items()):
        NAMES.outside.update(implied(_prefix(key), count))


def adopt(label: str, counters: Mapping[Any, int]) -> SkippingCounters:
    """``label``'s run ends with Keras' plain counters: Keras was imported in it, or the cell
    ran ``clear_session()`` itself, so every name on them is the run's (not made outside the
    runs, as ``before_clear`` would take them: the next run's new layers skipped them all and
    named themselves ``dense_2``). Returns the counters to go on with, noting each name."""
    NAMES.by_label.setdefault(label, set()).update(
        name for key, count in counters.items() for name in implied(_prefix(key), count)
    )
    return SkippingCounters(counters, set())


def made_by(label: str) -> bool:
    """Whether ``label``'s latest run named any layer (else there is nothing to ``hold``)."""
    return bool(NAMES.by_label.get(label))


def hold(label: str, names: Iterable[str]) -> None:
    """Of ``label``'s latest run's layers, those named ``names`` stay for its next run (the cell
    reuses them): the next run's new layers skip their names."""
    NAMES.held[label] = NAMES.by_label.get(label, set()).intersection(names)


def made_in_another_process(label: str, values: Iterable[Any]) -> None:
    """``label``'s latest run ran in another process (``--isolate``) and sent back the layers
    in ``values``: they are its names, as if it had run here (``hold`` keeps those that its
    next run here reuses, and the rest are taken again)."""
    NAMES.by_label[label] = names_in(values)


def names_in(values: Iterable[Any]) -> set[str]:
    """The names of the Keras layers in ``values`` (and one level into short lists, tuples
    and dicts of them), with the names of the layers each is made of."""
    kinds = tuple(c for c in (k.layer_class for k in backends.loaded()) if c is not None)
    if not kinds:
        return set()
    return {
        part.name
        for value in values
        for layer in _layers_in(value, kinds)
        for part in layer._flatten_layers(include_self=True, recursive=True)  # both Kerases
    }


def _layers_in(value: Any, kinds: tuple[type, ...]) -> Iterator[Any]:
    if isinstance(value, kinds):
        yield value
    elif isinstance(value, list | tuple | dict) and len(value) <= MAX_ITEMS:
        for item in list(value.values() if isinstance(value, dict) else value):
            if isinstance(item, kinds):
                yield item


def counters(kept: Mapping[Any, int], label: str | None) -> SkippingCounters:
    """The counters after a clear: ``kept`` (the inputs'), skipping what ``label``'s run must
    not take. A run's clear (``label``) starts its names: they replace its last run's, but for
    those it holds (``hold``)."""
    held = NAMES.held.get(label, set()) if label is not None else set()
    if label is not None:
        NAMES.label = label
        NAMES.by_label[label] = set(held)
    return SkippingCounters(kept, NAMES.avoided_by(label) | held)


def run_ended() -> None:
    """Names made from now on are the notebook's, outside any run."""
    if NAMES.label is not None:
        NAMES.held.pop(NAMES.label, None)  # said again before each run
    NAMES.label = None


def forget() -> None:
    NAMES.outside.clear()
    NAMES.by_label.clear()
    NAMES.held.clear()
    NAMES.label = None


def implied(prefix: str, count: int) -> Iterable[str]:
    """The names a plain counter at ``count`` handed out: ``prefix``, ``prefix_1``, ..."""
    if prefix in UNCHECKED or count <= 0:
        return ()
    rest = (f"{prefix}_{n}" for n in range(1, min(count, MAX_IMPLIED)))
    return itertools.chain((prefix,), rest)


def all_taken() -> list[str]:
    """Every name a run here skips, for an isolated run's process (it gets the sent layers)."""
    return sorted(NAMES.avoided_by(None).union(*NAMES.by_label.values()))


def _prefix(key: Any) -> str:
    return key[1] if isinstance(key, tuple) else str(key)
