"""Pure data: what one call of the user's to ``fit``, ``evaluate`` or ``predict`` measured."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

T = TypeVar("T")


def from_fields(cls: type[T], data: dict[str, Any]) -> T:
    """``cls(**data)`` without the keys ``cls`` has no field for: what a newer version of ours
    added. Every kernel of a machine writes one run history, whatever version each runs."""
    known = _FIELD_NAMES.get(cls)
    if known is None:
        known = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    if known.issuperset(data):  # the usual case, checked at C speed (the history page: 10k runs)
        return cls(**data)
    return cls(**{k: v for k, v in data.items() if k in known})


_FIELD_NAMES: dict[type, frozenset[str]] = {}  # from_fields' classes, by their field names


@dataclass(frozen=True)
class CallbackTime:
    """One method of the user's callbacks, over one fit: ``name`` is "Class.method"."""

    name: str
    seconds: float
    calls: int
    bytes_written: int | None = None  # by the fit's thread inside it; None: not readable here
    # its slowest call in the fit: one-time work (TensorBoard writes the model's graph at the
    # first batch end, ~130 ms) that no other call repeats; None: recorded before it was kept
    slowest: float | None = None

    @property
    def repeated_seconds(self) -> float:
        """Its time less its slowest call, for a hook called more than once: what it costs
        again and again, which a longer fit multiplies."""
        if self.calls > 1 and self.slowest is not None:
            return self.seconds - self.slowest
        return self.seconds


@dataclass(frozen=True)
class FitRecord:
    """One call to ``Model.fit`` inside a run."""

    seconds: float
    epochs: int | None
    epoch_seconds: tuple[float, ...] = ()
    callback_seconds: float | None = None
    batch_size: int | None = None
    steps: int | None = None
    model_name: str | None = None
    completed: bool = True
    callbacks: tuple[CallbackTime, ...] = ()  # slowest first
    # the user's Python input (a generator, a PyDataset): time making its batches; None: other
    input_kind: str | None = None
    input_seconds: float | None = None
    input_batches: int | None = None
    # the kernel's peak RSS and the GPU allocator's peak during this fit (None: unknown)
    rss_peak: int | None = None
    gpu_peak: int | None = None
    # the process's CPU time during it, all its threads: a fit that takes longer for as much
    # work waited for a busier machine (None: recorded before it was measured)
    cpu_seconds: float | None = None
    # its steps ran as programs XLA compiled on TensorFlow (``jit_compile``, Keras 3's default
    # on a GPU): TensorFlow keeps every one for the process's life (None: not TensorFlow)
    xla: bool | None = None
    # from its last callback (``on_train_end``) to its return: the fit letting go of what it
    # made, its data first. TensorFlow's autotuned tf.data iterators (Keras 3 makes them of
    # arrays too) wait as they close for their tuning thread's next wake-up: up to ~5 s
    # after a 10 s epoch, bare as under the magic (None: not measured)
    closing_seconds: float | None = None

    @property
    def reached_training(self) -> bool:
        """False for a fit that failed before its first epoch ended: its time is no fit time."""
        return self.completed or bool(self.epoch_seconds)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FitRecord:
        return from_fields(
            cls,
            {
                **data,
                "epoch_seconds": tuple(data.get("epoch_seconds", ())),
                "callbacks": tuple(from_fields(CallbackTime, c) for c in data.get("callbacks", ())),
            },
        )


@dataclass(frozen=True)
class InferenceRecord:
    """One ``evaluate`` or ``predict`` of the user's in a run (not those ``fit`` makes itself)."""

    kind: str  # "evaluate" or "predict"
    seconds: float
    batch_size: int | None = None
    steps: int | None = None
    rss_peak: int | None = None  # the kernel's peak RSS during the call
    gpu_peak: int | None = None  # the GPU allocator's peak during it
    completed: bool = True
    # the calls it stands for: past a run's first ``KEPT_INFERENCE`` records, a kind's further
    # calls that complete fold into its last record (a predict in a loop: a run of 10,000 calls
    # kept 10,000 records); seconds summed, peaks the highest, batch and steps None where
    # the calls' differ
    calls: int = 1

    def folded(self, other: InferenceRecord) -> InferenceRecord:
        """This record with ``other``'s call(s) folded in."""
        return replace(
            self,
            seconds=self.seconds + other.seconds,
            batch_size=self.batch_size if self.batch_size == other.batch_size else None,
            steps=self.steps if self.steps == other.steps else None,
            rss_peak=_highest(self.rss_peak, other.rss_peak),
            gpu_peak=_highest(self.gpu_peak, other.gpu_peak),
            calls=self.calls + other.calls,
        )


KEPT_INFERENCE = 16


def _highest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
