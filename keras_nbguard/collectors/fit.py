"""Times every ``fit``, ``evaluate`` and ``predict`` of a run through a scoped, reversible patch of
the public ``Model`` of each Keras the user has (``keras.Model``, ``tf_keras.Model``).

The injected callback uses epoch and train hooks only: overriding a batch hook would make Keras turn
off its asynchronous dispatch and slow down the very fit we measure. The user's own callbacks are
timed method by method (``callback_clock.py``), and a Python input's batches as they are made
(``input_clock.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import operator
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from keras_nbguard import backends
from keras_nbguard.collectors.call_peaks import CallPeaks
from keras_nbguard.collectors.callback_clock import CallbackClock
from keras_nbguard.collectors.finalizer_stops import StopsInFinalizers
from keras_nbguard.collectors.input_clock import InputClock
from keras_nbguard.collectors.patching import AttributePatch, PatchEveryKeras, PatchGroup
from keras_nbguard.records.calls import KEPT_INFERENCE, FitRecord, InferenceRecord

KERAS_DEFAULT_BATCH_SIZE = 32
INFERENCE = ("evaluate", "predict")

EpochListener = Callable[[int, float], None]


@dataclass
class _FitInProgress:
    batch_size: int | None
    model_name: str | None
    epoch_seconds: list[float] = field(default_factory=list)
    epoch_started: float | None = None
    steps: int | None = None
    kind: str = "fit"  # or "evaluate", "predict"
    train_ended: float | None = None  # when its last on_train_end came (our callback's)
    returned: float | None = None  # when Keras' fit returned


@dataclass
class _Call:
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the process's, all threads
    rss_peak: int | None = None
    gpu_peak: int | None = None
    completed: bool = False  # False: it raised (or was interrupted)


@dataclass(frozen=True)
class LastFit:
    """A fit's model, ``x`` and ``y`` (None: not given), weakly, the names that held them when
    its run ended, and its batch size: what ``%%kerasrun --batch-advice`` probes before the
    label's next run. A name bound anew since (a re-run setup cell makes new arrays) is used."""

    model: weakref.ref[Any]
    x: weakref.ref[Any] | None
    y: weakref.ref[Any] | None
    batch_size: int | None
    referable: bool = True  # False: x or y can't be held weakly (a list, a tuple)
    names: tuple[str | None, str | None, str | None] = (None, None, None)

    @classmethod
    def of(cls, model: Any, arguments: dict[str, Any], batch: int | None) -> LastFit:
        x, y = arguments.get("x"), arguments.get("y")
        try:
            weak = [None if v is None else weakref.ref(v) for v in (x, y)]
        except TypeError:
            return cls(weakref.ref(model), None, None, batch, referable=False)
        return cls(weakref.ref(model), weak[0], weak[1], batch)

    def named_in(self, namespace: dict[str, Any]) -> LastFit:
        """This fit with the names that hold its model, x and y in ``namespace`` now."""
        held = [ref() if ref is not None else None for ref in (self.model, self.x, self.y)]
        names = [
            next((k for k, v in namespace.items() if v is obj and not k.startswith("_")), None)
            if obj is not None
            else None
            for obj in held
        ]
        return dataclasses.replace(self, names=(names[0], names[1], names[2]))

    def get(self, namespace: dict[str, Any]) -> tuple[Any, Any, Any] | None:
        """(model, x, y): each the object itself while it lives, else what its name holds in
        ``namespace`` now; None when one of them is neither."""
        found: list[Any] = []
        for ref, name in zip((self.model, self.x, self.y), self.names, strict=True):
            if ref is None:  # not given (y with a dataset)
                found.append(None)
                continue
            value = ref()
            if value is None and name is not None:
                value = namespace.get(name)
            if value is None:
                return None
            found.append(value)
        return found[0], found[1], found[2]


class FitTimer:
    """While installed, every fit is timed and appended to ``fits``, every evaluate and predict
    to ``inference`` (also calls that raise). ``reasons`` says why a Keras could not be patched."""

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        peaks: CallPeaks | None = None,
        cpu_clock: Callable[[], float] = time.process_time,
        stops: StopsInFinalizers | None = None,
    ) -> None:
        self.clock = clock
        # a stop dropped in a finalizer (an iterator's, as fit lets go of it) is raised here
        self.stops = stops or StopsInFinalizers()
        self.cpu_clock = cpu_clock
        self.peaks = peaks or CallPeaks()
        self.fits: list[FitRecord] = []
        self.inference: list[InferenceRecord] = []
        self.models: list[weakref.ref[Any]] = []  # every model fit in this run, weakly
        self.last_fit: LastFit | None = None  # the latest fit's model and data, weakly
        self.epoch_listeners: list[EpochListener] = []
        self._scope = PatchEveryKeras()
        self._depth = 0  # inside one of our calls: fit's validation runs evaluate, not the user
        # our wrappers can outlive the run inside another's patch (patching.py): then they
        # pass every call through
        self._installed = False

    @property
    def reasons(self) -> list[str]:
        return self._scope.reasons

    # -- the scoped patch ------------------------------------------------------------------------
    def install(self) -> None:
        self._installed = True
        self._scope.install(self._patch)

    def uninstall(self) -> None:
        self._installed = False
        self._scope.uninstall()

    def _patch(self, package: ModuleType) -> PatchGroup:
        model_class = package.Model
        callback_base = package.callbacks.Callback
        patches = []
        for name in ("fit", *INFERENCE):
            original = getattr(model_class, name, None)  # as looked up: may live on a base class
            if original is None:
                self.reasons.append(f"{package.__name__}.Model has no {name}(): not timed")
                continue
            patches.append(
                AttributePatch(
                    model_class, name, self._wrapper(name, original, callback_base, model_class)
                )
            )
        return PatchGroup(patches)

    def _wrapper(
        self, name: str, original: Callable[..., Any], base: type, model_class: type
    ) -> Callable[..., Any]:
        signature = _call_signature(model_class, name, original)
        # said by a run that calls it: one that never fit read "fit n/a: … a wrapper" (tf_keras)
        unreadable = (
            f"{backends.package_of(model_class)}.Model.{name} is "
            f"{getattr(original, '__qualname__', name)}() of {original.__module__}, a wrapper "
            "without functools.wraps: its epochs and batch size can't be read"
            if "callbacks" not in signature.parameters
            else None
        )
        timer = self

        @functools.wraps(original)
        def timed(model: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if timer._depth or not timer._installed:  # fit's own evaluate, a predict in a
                return original(model, *args, **kwargs)  # callback: part of the fit; or after it
            if unreadable is not None and unreadable not in timer.reasons:
                timer.reasons.append(unreadable)
            timer._depth += 1
            try:
                if name == "fit":
                    result = timer._timed_fit(original, signature, base, model, args, kwargs)
                else:
                    result = timer._timed_inference(
                        name, original, signature, base, model, args, kwargs
                    )
            finally:
                timer._depth -= 1
            timer.stops.raise_if_pressed(f"as {name}() returned")  # its last iterator's
            return result

        return timed

    # -- one evaluate or predict -----------------------------------------------------------------
    def _timed_inference(
        self,
        kind: str,
        original: Callable[..., Any],
        signature: inspect.Signature,
        base: type,
        model: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        __tracebackhide__ = True
        try:
            bound = signature.bind(model, *args, **kwargs)
        except TypeError:  # let Keras report the user's bad call in its own words
            return original(model, *args, **kwargs)
        progress = _FitInProgress(
            _batch_size(bound.arguments), getattr(model, "name", None), kind=kind
        )
        bound.arguments["callbacks"] = self._with_our_callback(
            bound.arguments.get("callbacks"), progress, base
        )

        def record(call: _Call) -> None:
            self._keep_inference(
                InferenceRecord(
                    kind=kind,
                    seconds=call.seconds,
                    batch_size=progress.batch_size,
                    steps=progress.steps,
                    rss_peak=call.rss_peak,
                    gpu_peak=call.gpu_peak,
                    completed=call.completed,
                )
            )

        with self._call(record) as call:
            result = original(*bound.args, **bound.kwargs)
            _wait_for_the_device(model)
            call.completed = True
            return result

    def _keep_inference(self, call: InferenceRecord) -> None:
        """Append ``call``; past ``KEPT_INFERENCE`` records, fold it into its kind's last one
        (one that raised stays a record of its own: the summary counts those)."""
        if len(self.inference) >= KEPT_INFERENCE and call.completed:
            for i in range(len(self.inference) - 1, -1, -1):
                if self.inference[i].kind == call.kind and self.inference[i].completed:
                    self.inference[i] = self.inference[i].folded(call)
                    return
        self.inference.append(call)

    # -- one fit ---------------------------------------------------------------------------------
    def _timed_fit(
        self,
        original: Callable[..., Any],
        signature: inspect.Signature,
        base: type,
        model: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        __tracebackhide__ = True
        try:
            bound = signature.bind(model, *args, **kwargs)
        except TypeError:  # let Keras report the user's bad call in its own words
            return original(model, *args, **kwargs)
        progress = _FitInProgress(_batch_size(bound.arguments), getattr(model, "name", None))
        if not any(ref() is model for ref in self.models):
            self.models.append(weakref.ref(model))
        self.last_fit = LastFit.of(model, bound.arguments, progress.batch_size)
        user_callbacks = bound.arguments.get("callbacks")
        callbacks = CallbackClock(user_callbacks, self.clock)
        bound.arguments["callbacks"] = self._with_our_callback(user_callbacks, progress, base)
        inputs = InputClock(self.clock)
        if "x" in bound.arguments:
            bound.arguments["x"] = inputs.wrap(bound.arguments["x"])

        def record(call: _Call) -> None:
            closing = None
            if progress.train_ended is not None and progress.returned is not None:
                closing = progress.returned - progress.train_ended
            breakdown = callbacks.breakdown()
            callbacks.restore()
            inputs.restore()
            self.fits.append(
                FitRecord(
                    seconds=call.seconds,
                    epochs=len(progress.epoch_seconds),
                    epoch_seconds=tuple(progress.epoch_seconds),
                    callback_seconds=callbacks.seconds,
                    batch_size=progress.batch_size,
                    steps=progress.steps,
                    model_name=progress.model_name,
                    completed=call.completed,
                    callbacks=breakdown,
                    input_kind=inputs.kind,
                    input_seconds=inputs.seconds,
                    input_batches=inputs.batches if inputs.kind else None,
                    rss_peak=call.rss_peak,
                    gpu_peak=call.gpu_peak,
                    cpu_seconds=call.cpu_seconds,
                    xla=_xla_on_tensorflow(model),
                    closing_seconds=closing,
                )
            )

        with self._call(record) as call:
            result = original(*bound.args, **bound.kwargs)
            progress.returned = self.clock()
            _wait_for_the_device(model)
            call.completed = True
            return result

    @contextlib.contextmanager
    def _call(self, record: Callable[[_Call], None]) -> Iterator[_Call]:
        """Time one call of the user's and its peaks; ``record`` it however it ends."""
        __tracebackhide__ = True
        call = _Call()
        self.peaks.begin()
        start, cpu = self.clock(), self.cpu_clock()
        try:
            yield call
        finally:
            call.seconds = self.clock() - start
            call.cpu_seconds = self.cpu_clock() - cpu
            call.rss_peak, call.gpu_peak = self.peaks.end()
            record(call)

    def _with_our_callback(self, callbacks: Any, progress: _FitInProgress, base: type) -> Any:
        if callbacks is not None and not isinstance(callbacks, (list, tuple)):
            return callbacks  # a CallbackList of the user's: leave it alone, epochs stay unknown
        return [
            *(callbacks or ()),
            _epoch_clock_class(base)(progress, self.clock, self.epoch_listeners, self.stops),
        ]


def _wait_for_the_device(model: Any) -> None:
    """On JAX, until the call's last step has run: JAX dispatches steps and returns, and a step
    that could not run (out of GPU memory) fails in the arrays it leaves. Seen on an H200: fits
    that ran out of memory returned, silently, as ``ok``; the error surfaced only at the next
    use of the weights. Waiting here raises it from the call that caused it (fit, evaluate,
    predict), and the call's time covers the work on the device."""
    jax = sys.modules.get("jax")
    # Keras 3 imports JAX where it is installed, whatever its backend: ask the backend first
    # (reading every variable of a TensorFlow ResNet50 took 0.6 ms a call)
    if jax is None or backends.in_use() != "jax":
        return
    arrays = [v.value for v in getattr(model, "variables", ()) if _is_jax_array(v, jax)]
    if arrays:
        jax.block_until_ready(arrays)


def _is_jax_array(variable: Any, jax: Any) -> bool:
    try:
        return isinstance(variable.value, jax.Array)
    except Exception:  # a variable whose value can't be read (TF's uninitialized): not JAX's
        return False


@functools.lru_cache(maxsize=8)
def _signature(function: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(function)  # ~0.2 ms: once per Keras, not once per run


def _call_signature(
    model_class: type, name: str, original: Callable[..., Any]
) -> inspect.Signature:
    """How a call of ``name`` is bound: ``original``'s signature, or where it names no
    ``callbacks`` (a tool's ``def fit(self, *args, **kwargs)`` put on ``Model`` without
    ``functools.wraps``), Keras' own method's from the class's bases: the call goes on to the
    wrapper by Keras' names, which it passes to Keras."""
    signature = _signature(original)
    if "callbacks" in signature.parameters:
        return signature
    for klass in model_class.__mro__:
        own = klass.__dict__.get(name)
        if (
            own is original
            or not inspect.isfunction(own)
            or backends.package_of(own) not in backends.PACKAGES
        ):
            continue
        keras_own = _signature(own)
        if "callbacks" in keras_own.parameters:
            return keras_own
    return signature


def _batch_size(arguments: dict[str, Any]) -> int | None:
    """The batch size a fit, evaluate or predict will use: the argument; for arrays (or dicts,
    lists and tuples of them: several inputs), Keras' own choice (the samples over the steps
    where ``steps_per_epoch`` or ``steps`` is given, else 32); a pipeline's ``batch()``; None
    if unknown. Never raises: it runs inside the user's call."""
    try:
        size = arguments.get("batch_size")
        if size is not None:
            return int(size)
        x = arguments.get("x")
        arrays = _arrays_in(x)
        if not arrays:  # datasets and generators batch themselves
            return _dataset_batch_size(x)
        steps = arguments.get("steps_per_epoch", arguments.get("steps"))
        if steps is None:
            return KERAS_DEFAULT_BATCH_SIZE
        return math.ceil(_samples_trained(arrays[0], arguments) / operator.index(steps))
    except Exception:  # an odd input of the user's: the figure is unknown, the call goes on
        return None


def _samples_trained(array: Any, arguments: dict[str, Any]) -> int:
    """The samples Keras slices into the steps: all of them, or the part before
    ``validation_split`` where it splits them off (not when ``validation_data`` is given)."""
    samples = int(array.shape[0])
    split = arguments.get("validation_split")
    if split and arguments.get("validation_data") is None:
        samples = math.floor(samples * (1.0 - float(split)))  # Keras' own rounding
    return samples


def _arrays_in(x: Any, depth: int = 2) -> list[Any]:
    """The arrays ``x`` is made of, where it is an array (a first dimension: NumPy, a tensor, a
    DataFrame) or a dict, list or tuple of them (a model of several inputs: keras.io's endpoint
    layer pattern fits on a dict of three arrays); [] for anything else."""
    if len(getattr(x, "shape", ())) >= 1:
        return [x]
    if depth == 0 or not isinstance(x, (dict, list, tuple)) or not x:
        return []
    found = []
    for item in x.values() if isinstance(x, dict) else x:
        arrays = _arrays_in(item, depth - 1)
        if not arrays:
            return []
        found += arrays
    return found


def _dataset_batch_size(dataset: Any) -> int | None:
    """What a tf.data pipeline's ``batch()`` asked for, found below its map/cache/prefetch; None
    for other inputs (a generator, a PyDataset: they batch as they like). Public attributes can't
    tell it: ``element_spec`` says None where the last batch may be partial."""
    for _ in range(32):  # pipelines are short; a cycle must not hang a fit
        kind = type(dataset).__name__
        if dataset is None or "Unbatch" in kind:
            return None
        if "Batch" in kind and hasattr(dataset, "_batch_size"):
            try:
                return int(dataset._batch_size)
            except (TypeError, ValueError):  # a symbolic size: unknown until it runs
                return None
        dataset = getattr(dataset, "_input_dataset", None)
    return None


@functools.cache
def _epoch_clock_class(callback_base: type) -> type:
    """Our callback class for one Keras (its own Callback base: Keras 2 and 3 each check theirs),
    built on first use so that Keras is only imported by the user."""

    class EpochClock(callback_base):
        def __init__(
            self,
            progress: _FitInProgress,
            clock: Callable[[], float],
            listeners: list[EpochListener],
            stops: StopsInFinalizers,
        ) -> None:
            super().__init__()
            self._progress = progress
            self._clock = clock
            self._listeners = listeners
            self._stops = stops

        def on_train_begin(self, logs: Any = None) -> None:
            self._progress.steps = (self.params or {}).get("steps")

        def on_train_end(self, logs: Any = None) -> None:
            self._progress.train_ended = self._clock()

        # evaluate's and predict's steps (not fit's validation: it calls on_test_begin too)
        def on_test_begin(self, logs: Any = None) -> None:
            if self._progress.kind == "evaluate":
                self.on_train_begin(logs)

        def on_predict_begin(self, logs: Any = None) -> None:
            if self._progress.kind == "predict":
                self.on_train_begin(logs)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            # the last epoch's iterator goes as this one begins
            self._stops.raise_if_pressed(f"as epoch {epoch + 1} began")
            self._progress.epoch_started = self._clock()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            started = self._progress.epoch_started
            if started is None:
                return
            seconds = self._clock() - started
            self._progress.epoch_seconds.append(seconds)
            for listener in self._listeners:
                listener(epoch, seconds)
            self._stops.raise_if_pressed(f"as epoch {epoch + 1} ended")

    return EpochClock


def _xla_on_tensorflow(model: Any) -> bool | None:
    """Whether ``model``'s fit ran XLA-compiled steps on TensorFlow (``jit_compile``, resolved by
    the fit); None on another backend or when it can't be read. TensorFlow keeps each program
    XLA compiles until the process ends (no API frees it): +8 MiB a run for a small MLP."""
    keras = next(
        (k for k in backends.loaded() if k.model_class and isinstance(model, k.model_class)), None
    )
    if keras is None or keras.backend != "tensorflow":
        return None
    try:
        return bool(model.jit_compile) and not bool(getattr(model, "run_eagerly", False))
    except Exception:
        return None
