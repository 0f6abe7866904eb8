"""Times every ``Model.fit`` of a run through a scoped, reversible patch of ``keras.Model.fit``.

The injected callback uses epoch and train hooks only: overriding a batch hook would make Keras turn
off its asynchronous dispatch and slow down the very fit we measure. The user's own callbacks are
timed method by method (only the methods they override), so device time that a ``CallbackList``
would absorb is not blamed on them.
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

MODEL_MODULE = "keras.src.models.model"
KERAS_DEFAULT_BATCH_SIZE = 32
CALLBACK_HOOKS = (
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
    "on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end",
    "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end",
)

EpochListener = Callable[[int, float], None]


@dataclass
class _FitInProgress:
    batch_size: int | None
    model_name: str | None
    epoch_seconds: list[float] = field(default_factory=list)
    epoch_started: float | None = None
    steps: int | None = None
    callback_seconds: float | None = 0.0


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
        restore = self._time_user_callbacks(user_callbacks, progress)
        bound.arguments["callbacks"] = self._with_our_callback(user_callbacks, progress)
        completed = False
        start = self.clock()
        try:
            result = original(*bound.args, **bound.kwargs)
            completed = True
            return result
        finally:
            seconds = self.clock() - start
            restore()
            self.fits.append(FitRecord(
                seconds=seconds,
                epochs=len(progress.epoch_seconds),
                epoch_seconds=tuple(progress.epoch_seconds),
                callback_seconds=progress.callback_seconds,
                batch_size=progress.batch_size,
                steps=progress.steps,
                model_name=progress.model_name,
                completed=completed,
            ))

    def _with_our_callback(self, callbacks: Any, progress: _FitInProgress) -> Any:
        if callbacks is not None and not isinstance(callbacks, (list, tuple)):
            return callbacks  # a CallbackList of the user's: leave it alone, epochs stay unknown
        return [*(callbacks or ()), self._make_callback(progress)]

    def _make_callback(self, progress: _FitInProgress) -> Any:
        return _epoch_clock_class()(progress, self.clock, self.epoch_listeners)

    def _time_user_callbacks(self, callbacks: Any,
                             progress: _FitInProgress) -> Callable[[], None]:
        """Wrap the hooks each user callback overrides; returns a function that unwraps them."""
        if not isinstance(callbacks, (list, tuple)):
            if callbacks is not None:
                progress.callback_seconds = None
            return lambda: None
        wrapped: list[tuple[Any, str, Any]] = []
        for callback in callbacks:
            for name in CALLBACK_HOOKS:
                method = getattr(callback, name, None)
                if method is None or getattr(method, "_is_default", False):
                    continue  # Keras' no-op default: nothing to time, and async dispatch stays on
                previous = callback.__dict__.get(name) if hasattr(callback, "__dict__") else None
                try:
                    setattr(callback, name, self._timed_hook(method, progress))
                except (AttributeError, TypeError):  # __slots__ or a frozen object
                    progress.callback_seconds = None
                    continue
                wrapped.append((callback, name, previous))

        def restore() -> None:
            for callback, name, previous in wrapped:
                if previous is None:
                    del callback.__dict__[name]
                else:
                    setattr(callback, name, previous)
        return restore

    def _timed_hook(self, method: Callable[..., Any],
                    progress: _FitInProgress) -> Callable[..., Any]:
        clock = self.clock

        @functools.wraps(method)
        def hook(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return method(*args, **kwargs)
            finally:
                if progress.callback_seconds is not None:
                    progress.callback_seconds += clock() - start
        return hook


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
