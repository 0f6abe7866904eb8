"""Short training steps on a copy of the user's model, each step's memory peak measured: what
``batch_advice`` fits its line to.

The copy is ``clone_model`` + the user's weights + a fresh compile from the model's own compile
config (a new optimizer of the same config, the same loss): the user's model, its weights and its
optimizer state are never touched. A peak is read, over what was in use before the copy was made
(so the copy's own weights count as a fit's do), from the kernel's ``VmHWM`` on the host
(collectors/process.py: reset by writing 5 to /proc/self/clear_refs) and on a GPU from what
bounds a run under a cap there: TensorFlow's allocator peak, torch's reserved peak, and for JAX,
whose one peak per process holds a compile's autotuning, XLA's plan of the step (checked on an
H200 with bench/gpu_check.py).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keras_nbguard import backends
from keras_nbguard.collectors.allocators import Allocator, allocator_for
from keras_nbguard.collectors.gpu import NvmlReader, TfGpu
from keras_nbguard.collectors.process import PeakRss, default_rss_reader

if TYPE_CHECKING:
    from keras_nbguard.records.options import RunOptions

MIB = 2**20
REACH = 0.8  # of half the limit: how far the last probe should get
OUTPUTS_IN_GUESS = 3  # activations_guess counts each output thrice (itself, its gradient, a temp)


@dataclass(frozen=True)
class Probe:
    """One probe: a few training steps at one batch size."""

    batch: int
    peak_mib: float  # the highest of its steps, over the memory in use before the copy
    seconds: float


class HostPeaks:
    """The kernel's peak RSS (VmHWM), over the RSS before probing."""

    where = "host (VmHWM)"

    def __init__(self) -> None:
        self._hwm = PeakRss()
        self._rss = default_rss_reader()
        self.base = self._rss()

    def unavailable(self) -> str | None:
        if not self._hwm.reset() or self._hwm.read() is None:
            return "the kernel's peak RSS (VmHWM) can't be reset here (Linux only)"
        return None

    def reset(self) -> None:
        self._hwm.reset()

    def read(self) -> int:
        return (self._hwm.read() or 0) - self.base

    def peak_after(self, copy: Any, x: Any, y: Any, batch: int) -> int:
        return self.read()


class AllocatorPeaks:
    """The backend's GPU allocator: its peak bytes in use, over the bytes in use before probing."""

    def __init__(self, allocator: Allocator) -> None:
        self._allocator = allocator
        self.where = f"GPU ({allocator.name} allocator)"
        self.base = allocator.read()[0]
        self._resettable = True

    def unavailable(self) -> str | None:
        return None

    def reset(self) -> None:
        # JAX keeps one peak per process: rising probes still read their own (a new high)
        self._resettable = self._allocator.reset_peak()

    def read(self) -> int:
        return self._allocator.read()[1] - self.base

    def peak_after(self, copy: Any, x: Any, y: Any, batch: int) -> int:
        return self.read()


class TorchReservedPeaks(AllocatorPeaks):
    """torch on a GPU: the memory its caching allocator reserved at its peak, from an emptied
    cache, as each ``%%kerasrun`` starts. A cap (``--gpu-limit``: torch's per-process fraction)
    bounds what is reserved, not what tensors use, and a batch's blocks are rounded up and
    fragment: on an H200 a convnet advised from tensor peaks hit its 1024 MiB cap with 907 MiB
    in tensors and 115 MiB reserved beside them."""

    def __init__(self, allocator: Allocator) -> None:
        self._torch = sys.modules["torch"]
        self._torch.cuda.empty_cache()
        super().__init__(allocator)
        self.where = "GPU (torch's reserved memory)"
        self.base = self._reserved("current")

    def _reserved(self, which: str) -> int:
        cuda = self._torch.cuda
        return sum(
            int(cuda.memory_stats(i).get(f"reserved_bytes.all.{which}", 0))
            for i in range(cuda.device_count())
        )

    def reset(self) -> None:
        self._torch.cuda.empty_cache()
        super().reset()

    def read(self) -> int:
        return self._reserved("peak") - self.base


class XlaPlanPeaks(AllocatorPeaks):
    """JAX on a GPU: XLA's own plan of Keras' train step compiled at the probe's batch (its
    arguments, outputs and temporaries: ``memory_analysis``), plus one batch in flight. JAX's
    allocator keeps one peak per process and a GPU compile's autotuning takes scratch from the
    same pool, so that peak says little of a step (on an H200: 763 MiB at the convnet's batch 8,
    the most its pool could give)."""

    def __init__(self, allocator: Allocator) -> None:
        super().__init__(allocator)
        self.where = "GPU (XLA's plan of the JAX train step)"

    def peak_after(self, copy: Any, x: Any, y: Any, batch: int) -> int:
        # imported already: Keras computes with it (by name: mypy needs no JAX to check this)
        jax = importlib.import_module("jax")

        def one_batch(array: Any) -> Any:
            shape = (batch, *array.shape[1:])
            return jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(array.dtype))

        data = jax.tree_util.tree_map(one_batch, (x,) if y is None else (x, y))
        state = tuple(
            [v.value for v in variables]
            for variables in (
                copy.trainable_variables,
                copy.non_trainable_variables,
                copy.optimizer.variables,
                copy.metrics_variables,
            )
        )
        # as Keras' JAX trainer compiles it (make_train_function): the state donated
        step = jax.jit(copy.train_step, donate_argnums=0).lower(state, data).compile()
        plan = step.memory_analysis()
        if plan is None:  # a backend that makes no plan: nothing to read
            raise RuntimeError("XLA gave no memory plan for the train step")
        in_flight = sum(
            math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(data)
        )
        return int(
            plan.argument_size_in_bytes
            + plan.output_size_in_bytes
            - plan.alias_size_in_bytes
            + plan.temp_size_in_bytes
            + in_flight
        )


PeakSource = HostPeaks | AllocatorPeaks


def peak_source() -> PeakSource:
    """Where the backend in use has a GPU, what its allocator can tell of one step (torch: its
    reserved peak; JAX: XLA's plan; TensorFlow: its allocator's peak); else the host."""
    backend = backends.current_backend()
    allocator = allocator_for(backend, TfGpu.if_imported)
    try:
        if allocator.unavailable() is None:
            if backend == "torch":
                return TorchReservedPeaks(allocator)
            if backend == "jax":
                return XlaPlanPeaks(allocator)
            return AllocatorPeaks(allocator)
    except Exception:  # a GPU that can't be read: the host is still measured
        pass
    return HostPeaks()


def default_limit(
    source: PeakSource, options: RunOptions | None = None
) -> tuple[float | None, str]:
    """The memory a fit may add, in MiB, and where that figure comes from (``options``: a run's
    own, else the kernel's)."""
    from keras_nbguard.session.core import get_session

    options = options or get_session().options
    if isinstance(source, HostPeaks):
        if options.host_limit_mb is not None:
            return float(options.host_limit_mb), "--host-limit"
        import psutil

        return psutil.virtual_memory().available / MIB, "available host memory"
    if options.gpu_limit_mb is not None:
        return options.gpu_limit_mb - source.base / MIB, "--gpu-limit, less what is in use"
    used, total, process, why = NvmlReader().read()
    if used is None or total is None:
        return None, f"free GPU memory unknown ({why})"
    # what the allocator holds in its pool but does not use is free to it as well
    slack = max(0, process - source.base) if process is not None else 0
    return (total - used + slack) / MIB, "free GPU memory (NVML, with the allocator's unused pool)"


def keras_of(model: Any) -> Any:
    """The Keras the model is from: ``keras`` (3) or ``tf_keras`` (2)."""
    for cls in type(model).__mro__:
        top = cls.__module__.split(".")[0]
        if top in ("keras", "tf_keras"):
            return importlib.import_module(top)
    return importlib.import_module("keras")


def copy_of(model: Any) -> Any:
    """A compiled copy: same layers and weights, a fresh optimizer of the same config."""
    if not getattr(model, "optimizer", None):
        raise ValueError(
            "batch_advice needs a compiled model (model.compile(...)): it trains "
            "a copy with the same optimizer and loss"
        )
    keras = keras_of(model)
    with _tensorflow_left_alone():
        try:
            copy = keras.models.clone_model(model)
        except Exception:  # a subclassed model: clone_model can't walk it
            copy = type(model).from_config(model.get_config())
            copy.build(getattr(model, "input_shape", None))
        copy.set_weights(model.get_weights())
        try:
            copy.compile_from_config(model.get_compile_config())
        except Exception:  # a loss or metric that doesn't serialize: the objects, optimizer anew
            optimizer = type(model.optimizer).from_config(model.optimizer.get_config())
            copy.compile(optimizer=optimizer, loss=model.loss)
    return copy


@contextlib.contextmanager
def _tensorflow_left_alone() -> Iterator[None]:
    """Keras' serializer asks whether TensorFlow is installed by importing it (a ``TensorShape``
    check in ``serialize_keras_object``): on JAX or torch, cloning the model loaded all of
    TensorFlow (~400 MiB and seconds), and the first probe measured it. While TensorFlow is not
    imported no object can be one of its shapes, so Keras is told, meanwhile, that it is absent."""
    lazy: Any = getattr(sys.modules.get("keras.src.utils.module_utils"), "tensorflow", None)
    if "tensorflow" in sys.modules or getattr(lazy, "_available", True) is not None:
        yield  # TensorFlow is there, or Keras already knows (or this Keras works otherwise)
        return
    lazy._available = False
    try:
        yield
    finally:
        if lazy._available is False:
            lazy._available = None  # undecided again: Keras imports it when it really needs it


def rows(data: Any) -> int | None:
    """How many samples ``x`` holds (an array, or a list/tuple/dict of them)."""
    if isinstance(data, dict):
        data = next(iter(data.values()), None)
    elif isinstance(data, (list, tuple)):
        data = data[0] if data else None
    shape = getattr(data, "shape", None)
    return int(shape[0]) if shape else None


def measure(copy: Any, x: Any, y: Any, batch: int, steps: int, source: PeakSource) -> Probe:
    """``steps`` training steps at ``batch``: their peak over the base."""
    started = time.perf_counter()
    available = rows(x)
    if available:  # a short dataset: as many whole batches as it holds (at least one)
        steps = max(1, min(steps, available // batch))
    source.reset()
    # shuffled, as fit is by default: its index gather is part of what a fit takes
    copy.fit(x, y, batch_size=batch, steps_per_epoch=steps, epochs=1, verbose=0)
    peak = source.peak_after(copy, x, y, batch)
    return Probe(batch, peak / MIB, time.perf_counter() - started)


def activations_guess(model: Any) -> float | None:
    """A rough upper guess of training memory per sample, in MiB, from the layers' outputs
    (kept for the backward pass, their gradients and a temporary: x3; a recurrent layer keeps
    its gates at every time step), at 4 bytes an element. It sizes the second probe, and on the
    host it is the slope's floor (batch_advisor.advise); None where shapes are unknown.
    """
    elements = 0
    try:
        for layer in model.layers:
            out = layer.output.shape
            elements += math.prod(int(d) for d in out[1:] if d is not None)
            cell = getattr(layer, "cell", None)
            units = getattr(cell, "units", None)
            if units and len(layer.input.shape) == 3 and layer.input.shape[1]:
                elements += int(layer.input.shape[1]) * int(units) * 6
    except Exception:  # a subclassed model: no symbolic outputs
        return None
    return OUTPUTS_IN_GUESS * elements * 4 / MIB if elements else None


def schedule(
    measure_at: Any,
    first: int,
    limit_mib: float,
    most: int | None,
    batch_sizes: list[int] | None = None,
    max_probes: int = 6,
    guess_mib: float | None = None,
) -> list[Probe]:
    """Probes at rising batch sizes, each predicted (from what the last ones measured, at its
    worst) to stay under half of ``limit_mib``, until three of them span a clear rise over
    most of that range.
    ``batch_sizes`` (the caller's) are probed as given, each still under that guard."""
    half = limit_mib / 2
    noise = max(4.0, 0.02 * limit_mib)  # what a peak may be off by: allocator and page rounding
    signal = max(8.0, 0.05 * limit_mib)  # a rise that says more than the noise
    planned = sorted(set(batch_sizes)) if batch_sizes else None
    batch = planned.pop(0) if planned else first
    probes: list[Probe] = []
    while len(probes) < max_probes:
        probes.append(measure_at(batch))
        last = probes[-1]
        span = last.peak_mib - probes[0].peak_mib
        if last.peak_mib > half:
            break
        # enough: three probes whose rise is clear and that reach well into the half limit
        # (the wider they spread, the truer the slope)
        if (
            planned is None
            and len(probes) >= 3
            and span >= signal
            and last.peak_mib >= REACH * half
        ):
            break
        if len(probes) == 1:  # the layers' guess, twice over; without one, half as many again
            room = (
                min(3.0 * batch, (0.9 * half - last.peak_mib) / (2 * guess_mib))
                if guess_mib
                else batch / 2
            )
        else:  # the steepest slope the rise so far allows, noise included
            # (the last step too: memory an earlier probe left can flatten the first ones)
            rise = last.peak_mib - probes[-2].peak_mib
            slope = max(
                (max(span, 0.0) + noise) / (batch - probes[0].batch),
                (max(rise, 0.0) + noise) / (batch - probes[-2].batch),
            )
            room = (0.9 * half - last.peak_mib) / slope
        if planned is not None:
            if not planned or planned[0] - batch > room:
                break
            batch = planned.pop(0)
            continue
        nxt = min(batch * 16, batch + int(room), most or batch * 16)
        if nxt < math.ceil(batch * 1.25):
            break
        batch = nxt
    return probes


def params_of(model: Any) -> int | None:
    """The model's weight count (None: not built, or not a Keras model)."""
    try:
        return int(model.count_params())
    except Exception:
        return None
