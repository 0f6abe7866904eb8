"""Counts tf.function traces during a run (new models and recompiles retrace; stable ones don't).

A scoped, reversible patch of the one TensorFlow function that runs only when a trace is made
(nothing runs on a call that finds its trace cached). Per tf.function (its trace cache: one per
``tf.function`` object, shared by the trace that creates variables and the one after it) it keeps
the distinct inputs traced — shapes, dtypes, Python values — which is what retracing is: the same
function traced again for a new Python number or a new shape. A new model's step traced once is
not; neither is a last partial batch (two inputs).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter
from types import FrameType, ModuleType
from typing import Any

from keras_nbguard import backends
from keras_nbguard.collectors.jax_compiles import JaxCompileCounter, NoTraces
from keras_nbguard.collectors.patching import AttributePatch, PatchGroup, PatchOnImport

TRACING_MODULE = "tensorflow.python.eager.polymorphic_function.tracing_compilation"
TRACE_FUNCTION = "_create_concrete_function"
# Keras' traceback filters: each keeps the frames outside Keras and TensorFlow (EXCLUDED_PATHS)
KERAS_TRACEBACK_FILTERS = ("keras.src.utils.traceback_utils", "tf_keras.src.utils.traceback_utils")
EXCLUDED_PATHS = "_EXCLUDED_PATHS"


DATASET_PREFIX = "Dataset_"  # tf.data names the functions of a pipeline's map/filter/... so
# Keras turns arrays and generators into a tf.data pipeline of its own at every fit: those traces
# are not the user's to fix, and counting them would name a rebuilt dataset in every clean run
KERAS_ADAPTERS = (
    f"{os.sep}trainers{os.sep}data_adapters{os.sep}",  # Keras 3
    f"{os.sep}tf_keras{os.sep}src{os.sep}engine{os.sep}data_adapter",
)  # Keras 2
MODEL_CALLS = frozenset({"fit", "evaluate", "predict"})  # (a subclass's own, too)
# TensorFlow's own tf.functions, traced for what the user asked: a distribution strategy's
# multi-device iterator traces six of them for every iterator it makes (84 in a small fit and
# evaluate on MirroredStrategy). They are the framework's machinery, not the user's to fix:
# counted apart, so "traces" stays what a new model or a user's tf.function adds.
FRAMEWORK_MODULE = "tensorflow."
FRAMES_LOOKED_AT = 60
SIGNATURES_KEPT = 3  # functions kept in a run's record, those traced for the most inputs first


def trace_counter_for(backend: str) -> TraceCounter | JaxCompileCounter | NoTraces:
    """What stands for "traces" on the backend the user's Keras computes with."""
    if backend == "jax":
        return JaxCompileCounter()
    if backend == "torch":
        return NoTraces("the torch backend runs eagerly: nothing is traced")
    if backend != "tensorflow":
        return NoTraces(f"nothing is traced on the {backend} backend")
    return TraceCounter()


class TraceCounter:
    """Top-level traces while installed: ``count`` of tf.functions (a new model or a recompile
    retraces its train step), ``dataset_count`` of the functions of tf.data pipelines the user
    built (a rebuilt dataset retraces its maps), ``framework_count`` of TensorFlow's own
    functions (a strategy's iterators). All None when they can't be read."""

    kind = "tf.function"
    warn = True  # a reason here means TensorFlow changed: worth one warning

    def __init__(self) -> None:
        self.count: int | None = 0
        self.dataset_count: int | None = 0
        self.dataset_seconds: float | None = 0.0  # the time those traces took: what it costs
        self.framework_count: int | None = 0
        self.names: Counter[str] = Counter()  # the tf.functions traced, by name
        # of those, the traces of an input already traced by a first call that made variables
        self.traced_twice: Counter[str] = Counter()
        self.reason: str | None = None
        # per tf.function traced in the run (its trace cache, held only while the run goes): its
        # name and the hashes of the distinct inputs it was traced for
        self._functions: dict[Any, tuple[str, set[int]]] = {}
        self._signatures: tuple[tuple[str, int], ...] | None = None
        self._depth = 0
        self._scope = PatchOnImport(TRACING_MODULE)
        self._unfiltered: PatchGroup | None = None  # our frame, out of Keras' tracebacks

    def install(self) -> None:
        self._scope.install(self._patch)

    def uninstall(self) -> None:
        self._scope.uninstall()
        if self._unfiltered is not None:
            self._unfiltered.restore()
            self._unfiltered = None
        self._signatures = self._top()
        self._functions.clear()  # no trace cache outlives the run

    @property
    def signatures(self) -> tuple[tuple[str, int], ...]:
        """The tf.functions traced for the most distinct inputs in the run: (name, how many),
        most first, three at most."""
        return self._top() if self._signatures is None else self._signatures

    def _top(self) -> tuple[tuple[str, int], ...]:
        counted = sorted(
            ((name, len(seen)) for name, seen in self._functions.values()),
            key=lambda item: -item[1],
        )
        return tuple(counted[:SIGNATURES_KEPT])

    def _patch(self, module: ModuleType) -> AttributePatch | None:
        original = getattr(module, TRACE_FUNCTION, None)
        if original is None:
            self.count = self.dataset_count = self.framework_count = None
            self.dataset_seconds = None
            self.reason = "this TensorFlow version has no trace hook we know"
            return None
        counter = self

        @functools.wraps(original)
        def traced(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # IPython leaves our frame out of the user's traceback
            # nested tf.functions trace inside their caller's trace: count the outer one only
            users_dataset = False
            if counter._depth == 0:
                if counter._unfiltered is None:  # Keras is imported by now: fit is tracing
                    try:
                        counter._unfiltered = out_of_kerases_tracebacks(traced)
                    except Exception:  # a Keras that changed: its traceback shows our frame
                        counter._unfiltered = PatchGroup([])
                users_dataset = counter._count(
                    args[3] if len(args) > 3 else kwargs.get("tracing_options"),
                    args[0] if args else kwargs.get("function_type"),
                )
            counter._depth += 1
            started = time.perf_counter() if users_dataset else 0.0
            try:
                return original(*args, **kwargs)
            finally:
                counter._depth -= 1
                if users_dataset and counter.dataset_seconds is not None:
                    counter.dataset_seconds += time.perf_counter() - started

        return AttributePatch(module, TRACE_FUNCTION, traced)

    def _count(self, tracing_options: Any, function_type: Any) -> bool:
        """Count one trace; True when it is of a pipeline the user built (to be timed)."""
        if self.count is None or self.dataset_count is None or self.framework_count is None:
            return False
        name = str(getattr(tracing_options, "name", ""))
        if name.startswith(DATASET_PREFIX):
            if _built_for_a_models_call():
                return False
            self.dataset_count += 1
            return True
        if _is_tensorflows_own(getattr(tracing_options, "python_function", None)):
            self.framework_count += 1
        else:
            self.count += 1
            self.names[name or "<unnamed>"] += 1
            cache = getattr(tracing_options, "function_cache", None)
            _, seen = self._functions.setdefault(
                name if cache is None else cache, (name or "<unnamed>", set())
            )
            try:
                key = hash(function_type)
            except TypeError:
                key = -len(seen) - 1  # can't tell: a distinct one
            if key in seen and _after_variables(tracing_options):
                self.traced_twice[name or "<unnamed>"] += 1
            seen.add(key)  # the same input traced twice (variables) is one
        return False


def _after_variables(tracing_options: Any) -> bool:
    """Whether this trace is the one TensorFlow makes once a first call has created variables
    (Keras 2's train step, whose optimizer makes its slots there): its input was traced by the
    call that made them, in the same trace cache."""
    scope = getattr(tracing_options, "scope_type", None)
    return getattr(scope, "name", None) == "NO_VARIABLE_CREATION"


def _is_tensorflows_own(function: Any) -> bool:
    """Whether the traced Python function is defined in TensorFlow's package (a bound method's
    ``__module__`` is its function's)."""
    module = getattr(function, "__module__", None)
    return isinstance(module, str) and module.startswith(FRAMEWORK_MODULE)


def _built_for_a_models_call() -> bool:
    """Whether this trace is of a pipeline a model's own ``fit``, ``evaluate`` or ``predict``
    builds from what it was given, anew at every call: Keras' data adapters, or a library's
    model that turns arrays into tf.data itself (KerasHub's tasks: a false `dataset_rebuilt`
    on every re-run of keras.io's BERT classifier). Rare enough to walk the stack."""
    frame: FrameType | None = sys._getframe(2)
    models = backends.model_classes()
    for _ in range(FRAMES_LOOKED_AT):
        if frame is None:
            return False
        if any(part in frame.f_code.co_filename for part in KERAS_ADAPTERS):
            return True
        if frame.f_code.co_name in MODEL_CALLS and isinstance(frame.f_locals.get("self"), models):
            return True
        frame = frame.f_back
    return False


def out_of_kerases_tracebacks(wrapper: Any) -> PatchGroup:
    """Our trace hook's file added to what Keras' traceback filters leave out, until restored.
    A fit given the wrong shape fails inside TensorFlow's tracing, under our hook: Keras' filter
    drops its own frames and TensorFlow's and kept ours, the last one left, which IPython shows
    whatever ``__tracebackhide__`` says (keras.io's VAE: `keras_nbguard/collectors/traces.py
    … traced`, twice). Left out too, the traceback is the one a bare cell shows: Keras' own
    innermost frame, where the error was raised."""
    patches = []
    ours = wrapper.__code__.co_filename
    for name in KERAS_TRACEBACK_FILTERS:
        excluded = getattr(sys.modules.get(name), EXCLUDED_PATHS, None)
        if isinstance(excluded, tuple) and ours not in excluded:
            patches.append(AttributePatch(sys.modules[name], EXCLUDED_PATHS, (*excluded, ours)))
    return PatchGroup(patches)
