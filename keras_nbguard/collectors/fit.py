"""Times every ``Model.fit`` of a run through a scoped, reversible patch of ``keras.Model.fit``.

The injected callback uses epoch and train hooks only: overriding a batch hook would make Keras turn
off its asynchronous dispatch and slow down the very fit we measure. The user's own callbacks are
timed method by method (``callback_clock.py``), and a Python input's batches as they are made
(``input_clock.py``).
"""

from __future__ import annotations

import functools
import inspect
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..patching import AttributePatch, PatchOnImport
from ..records import FitRecord
from .callback_clock import CallbackClock
from .input_clock import InputClock

MODEL_MODULE = "keras.src.models.model"
KERAS_DEFAULT_BATCH_SIZE = 32

EpochListener = Callable[[int, float], None]


@dataclass
class _FitInProgress:
    batch_size: int | None
    model_name: str | None
    epoch_seconds: list[float] = field(default_factory=list)
    epoch_started: float | None = None
    steps: int | None = None


class FitTimer:
    """While installed, every fit is timed and appended to ``fits`` (also fits that raise)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.fits: list[FitRecord] = []
        self.models: list[weakref.ref[Any]] = []  # every model fit in this run, weakly
        self.epoch_listeners: list[EpochListener] = []
        self._scope = PatchOnImport(MODEL_MODULE)

    # -- the scoped patch ------------------------------------------------------------------------
    def install(self) -> None:
        self._scope.install(self._patch)

    def uninstall(self) -> None:
        self._scope.uninstall()

    def _patch(self, module: ModuleType) -> AttributePatch:
        model_class = module.Model
        original = model_class.fit  # as looked up: Keras defines it on a base class
        signature = _signature(original)
        timer = self

        @functools.wraps(original)
        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            return timer._timed_fit(original, signature, model, args, kwargs)

        return AttributePatch(model_class, "fit", fit)

    # -- one fit ---------------------------------------------------------------------------------
    def _timed_fit(self, original: Callable[..., Any], signature: inspect.Signature, model: Any,
                   args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        try:
            bound = signature.bind(model, *args, **kwargs)
        except TypeError:  # let Keras report the user's bad call in its own words
            return original(model, *args, **kwargs)
        progress = _FitInProgress(_batch_size(bound.arguments), getattr(model, "name", None))
        if not any(ref() is model for ref in self.models):
            self.models.append(weakref.ref(model))
        user_callbacks = bound.arguments.get("callbacks")
        callbacks = CallbackClock(user_callbacks, self.clock)
        bound.arguments["callbacks"] = self._with_our_callback(user_callbacks, progress)
        inputs = InputClock(self.clock)
        if "x" in bound.arguments:
            bound.arguments["x"] = inputs.wrap(bound.arguments["x"])
        completed = False
        start = self.clock()
        try:
            result = original(*bound.args, **bound.kwargs)
            completed = True
            return result
        finally:
            seconds = self.clock() - start
            breakdown = callbacks.breakdown()
            callbacks.restore()
            inputs.restore()
            self.fits.append(FitRecord(
                seconds=seconds,
                epochs=len(progress.epoch_seconds),
                epoch_seconds=tuple(progress.epoch_seconds),
                callback_seconds=callbacks.seconds,
                batch_size=progress.batch_size,
                steps=progress.steps,
                model_name=progress.model_name,
                completed=completed,
                callbacks=breakdown,
                input_kind=inputs.kind,
                input_seconds=inputs.seconds,
                input_batches=inputs.batches if inputs.kind else None,
            ))

    def _with_our_callback(self, callbacks: Any, progress: _FitInProgress) -> Any:
        if callbacks is not None and not isinstance(callbacks, (list, tuple)):
            return callbacks  # a CallbackList of the user's: leave it alone, epochs stay unknown
        return [*(callbacks or ()), self._make_callback(progress)]

    def _make_callback(self, progress: _FitInProgress) -> Any:
        return _epoch_clock_class()(progress, self.clock, self.epoch_listeners)


@functools.lru_cache(maxsize=8)
def _signature(function: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(function)  # ~0.2 ms: once per Keras, not once per run


def _batch_size(arguments: dict[str, Any]) -> int | None:
    """The batch size fit will use: the argument, Keras' default for arrays, None if unknown."""
    size = arguments.get("batch_size")
    if size is not None:
        return int(size)
    x = arguments.get("x")
    if x is not None and hasattr(x, "shape") and hasattr(x, "__len__"):
        return KERAS_DEFAULT_BATCH_SIZE  # arrays; datasets and generators batch themselves
    return None


@functools.cache
def _epoch_clock_class() -> type:
    """Our callback class, built on first use so that keras is only imported by the user."""
    from keras.callbacks import Callback

    class EpochClock(Callback):
        def __init__(self, progress: _FitInProgress, clock: Callable[[], float],
                     listeners: list[EpochListener]) -> None:
            super().__init__()
            self._progress = progress
            self._clock = clock
            self._listeners = listeners

        def on_train_begin(self, logs: Any = None) -> None:
            self._progress.steps = (self.params or {}).get("steps")

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._progress.epoch_started = self._clock()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            started = self._progress.epoch_started
            if started is None:
                return
            seconds = self._clock() - started
            self._progress.epoch_seconds.append(seconds)
            for listener in self._listeners:
                listener(epoch, seconds)

    return EpochClock
