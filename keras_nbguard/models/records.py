"""The leak finder's results as pure data: a ``Leak`` per live model and the ``LeakReport`` that
lists them, with its text and HTML renderings. Never a reference to a model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

UNTYPEABLE = "(no expression reaches it)"  # ends a path only words can say (naming.py)
# long lines wrap at spaces, a word broken only where it is longer than the line: JupyterLab's
# output style breaks anywhere (a walkthrough read "sca / le_layer", "free / d")
WRAP_AT_SPACES = ' style="white-space: pre-wrap; word-break: normal; overflow-wrap: break-word"'
UNREACHABLE_HINT = (
    "alive, but nothing you can name holds it: its own reference cycles waiting for the garbage "
    "collector, or framework internals (e.g. a tf.function cache). keras_nbguard.free() runs gc "
    "and keras.utils.clear_session(), which releases most of them."
)
# after the collection that %nbguard leaks makes first: what is left is no garbage
HELD_INSIDE_HINT = (
    "alive after a garbage collection, though nothing you can name holds it: the frameworks' "
    "own objects keep it (e.g. a tf.function cache, a callback list). "
    "keras.utils.clear_session(), or keras_nbguard.free(), releases most of them."
)


@dataclass(frozen=True)
class Leak:
    """One live Keras model and what holds it. Pure data: never a reference to the model."""

    path: str  # the best path, as the user would type it ("" when unreachable)
    paths: tuple[str, ...]  # every path found, best first
    model_name: str
    class_name: str
    params: int | None  # None: not built yet
    weight_bytes: int | None
    optimizer_bytes: int | None  # 0 without an optimizer
    run_label: str | None  # the run that created it; None: made outside a tracked run
    run_number: int | None
    stale: bool
    reason: str  # why it is stale, current or unreachable, in words
    holder: str | None = None  # what holds it directly on ``path``, e.g. "list", "closure ..."
    holder_type: str | None = None
    inside: str | None = None  # the model it lives in, when every path goes through that model
    last_run_number: int | None = None  # the latest run that fit, built or reused it
    held_as: str | None = None  # in words, when a path is no plain attribute: a layer's node
    weights_in: str | None = None  # another live model that holds every weight of this one
    used_by: tuple[str, int] | None = None  # that run (label, number), where not the maker

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def size_words(self) -> str:
        """``5.4 MiB weights (all in gan too) + 10.8 MiB optimizer``, as every view says it (the
        dashboard's list left the optimizer out where %nbguard leaks said it)."""
        from keras_nbguard.records.formatting import fmt_weights  # formatting imports records

        shared = f"all in {self.weights_in} too" if self.weights_in else ""
        return fmt_weights(self.weight_bytes, self.optimizer_bytes, shared)

    def some_paths(self) -> str:
        """The paths a user can type first, then those only words can say, ``PATHS_SHOWN`` of
        them at most, as every view lists them (the dashboard's list and %nbguard leaks' had
        rules of their own, and differed): a VAE's encoder had ten, seven through
        ``_compiled_trainable_state``."""
        typed = [p for p in self.paths if UNTYPEABLE not in p]
        ordered = typed + [p for p in self.paths if UNTYPEABLE in p]
        more = len(ordered) - PATHS_SHOWN
        return ", ".join(ordered[:PATHS_SHOWN]) + (f" and {more} more" if more > 0 else "")

    def run_words(self, quoted: bool = True) -> str:
        """Which run made it, and the later one that used it where there is one: keras.io's
        timeseries classification trains, each run, the model the run before it loaded."""

        def named(label: str) -> str:
            return repr(label) if quoted else label

        made = (
            f"{named(self.run_label)} #{self.run_number}"
            if self.run_label
            else "made outside %%kerasrun"
        )
        if self.used_by is None:
            return made
        label, number = self.used_by
        by = f"#{number}" if label == self.run_label else f"{named(label)} #{number}"
        return f"{made}, used by {by}"


@dataclass(frozen=True)
class LeakReport:
    """Every live Keras model: ``leaks`` (reachable, stale first) and ``unreachable`` ones."""

    leaks: tuple[Leak, ...] = ()
    unreachable: tuple[Leak, ...] = ()
    seconds: float = 0.0
    scans: int = 0  # heap scans (gc.get_referrers calls) the walk made
    complete: bool = True  # False when the depth or time limit stopped the walk
    notes: tuple[str, ...] = ()
    collected: bool = False  # garbage was collected first: no model is listed for being garbage

    @property
    def stale(self) -> tuple[Leak, ...]:
        return tuple(leak for leak in self.leaks if leak.stale)

    @property
    def current(self) -> tuple[Leak, ...]:
        return tuple(leak for leak in self.leaks if not leak.stale)

    @property
    def hint(self) -> str | None:
        if not self.unreachable:
            return None
        return HELD_INSIDE_HINT if self.collected else UNREACHABLE_HINT

    def __iter__(self) -> Iterator[Leak]:
        return iter(self.leaks)

    def __len__(self) -> int:
        return len(self.leaks)

    def lines(self) -> list[str]:
        """The text summary, shared by the pretty and HTML reprs."""
        out = [
            f"{len(self.leaks)} live Keras model(s), {len(self.stale)} stale, "
            f"{len(self.unreachable)} unreachable"
        ]

        def sized(leak: Leak) -> str:
            return f"({leak.class_name}, {leak.size_words()}, {leak.run_words()})"

        for leak in self.leaks:
            words = f" ({leak.held_as})" if leak.held_as else ""
            out.append(
                f"  {'STALE' if leak.stale else 'ok   '} {leak.model_name} {sized(leak)}: "
                f"{leak.some_paths()}{words}"
            )
        for leak in self.unreachable:  # which run made it says whose garbage it is
            out.append(f"  unreachable {leak.model_name} {sized(leak)}: {leak.reason}")
        if self.leaks or self.unreachable:
            out.append(
                "  (sizes count weights and optimizer state; what else a model pins, "
                "TensorFlow's graphs or JAX's compiled steps, shows as the RSS drop when it is "
                "freed)"
            )
        if self.hint:
            out.append(f"  hint: {self.hint}")
        out.extend(f"  note: {n}" for n in self.notes)
        return out

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("\n".join(self.lines()))

    def _repr_html_(self) -> str:
        import html

        return (
            f"<pre class='keras-nbguard-leaks'{WRAP_AT_SPACES}>"
            + html.escape("\n".join(self.lines()))
            + "</pre>"
        )


PATHS_SHOWN = 3  # a model held by the user's names is also held through Keras' own state
