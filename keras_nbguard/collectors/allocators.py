"""The GPU memory each Keras backend's own allocator reports: TensorFlow's (tf.config), JAX's
(``device.memory_stats()``) and torch's (``torch.cuda``). Each reads its framework from
``sys.modules`` only (none is ever imported here) and takes the framework's module as a seam, so
tests without a GPU stand in at exactly that boundary.

An allocator says why it has no reading (``unavailable``), reads (current, peak) bytes summed over
its GPUs, and resets its peak where the framework can (JAX keeps one peak per process).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from keras_nbguard.collectors.gpu import TfGpu


class Allocator(Protocol):
    name: str  # as the summary shows it: "TF", "JAX", "torch"

    def unavailable(self) -> str | None: ...

    def read(self) -> tuple[int, int]: ...

    def reset_peak(self) -> bool: ...


class TfAllocator:
    name = "TF"

    def __init__(self, tf: TfGpu | None) -> None:
        self._tf = tf

    def unavailable(self) -> str | None:
        if self._tf is None:
            return "no GPU reading: TensorFlow is not imported"
        if not self._tf.gpus():
            return "no GPU: TensorFlow sees none"
        if not self._tf.runtime_initialized():
            return "TensorFlow has not initialized its GPU yet"
        return None

    def read(self) -> tuple[int, int]:
        assert self._tf is not None
        info = self._tf.memory_info()
        return int(info["current"]), int(info["peak"])

    def reset_peak(self) -> bool:
        assert self._tf is not None
        self._tf.reset_memory_stats()
        return True


class JaxAllocator:
    name = "JAX"

    def __init__(self, jax: Any = None, started: Callable[[], bool] | None = None) -> None:
        self._jax = jax if jax is not None else sys.modules.get("jax")
        self._started = started or jax_started

    def unavailable(self) -> str | None:
        if self._jax is None:
            return "no GPU reading: JAX is not imported"
        if not self._started():  # asking for devices would start it: not our call to make
            return "JAX has not initialized its backend yet"
        if not self._gpus():
            return f"no GPU: JAX computes on {self._jax.default_backend()}"
        return None

    def _gpus(self) -> list[Any]:
        assert self._jax is not None
        return [d for d in self._jax.local_devices() if d.platform in ("gpu", "cuda", "rocm")]

    def read(self) -> tuple[int, int]:
        stats = [d.memory_stats() or {} for d in self._gpus()]
        return (
            sum(int(s.get("bytes_in_use", 0)) for s in stats),
            sum(int(s.get("peak_bytes_in_use", 0)) for s in stats),
        )

    def reset_peak(self) -> bool:
        return False  # JAX has no reset: its peak is the process's


class TorchAllocator:
    name = "torch"

    def __init__(self, torch: Any = None) -> None:
        self._torch = torch if torch is not None else sys.modules.get("torch")

    def unavailable(self) -> str | None:
        if self._torch is None:
            return "no GPU reading: torch is not imported"
        cuda = self._torch.cuda
        if not cuda.is_available():
            return "no GPU: torch sees no CUDA device"
        if not cuda.is_initialized():
            return "torch has not initialized CUDA yet"
        return None

    def read(self) -> tuple[int, int]:
        assert self._torch is not None
        cuda = self._torch.cuda
        devices = range(cuda.device_count())
        return (
            sum(int(cuda.memory_allocated(i)) for i in devices),
            sum(int(cuda.max_memory_allocated(i)) for i in devices),
        )

    def reset_peak(self) -> bool:
        assert self._torch is not None
        cuda = self._torch.cuda
        for i in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(i)
        return True


def jax_started() -> bool:
    """Whether JAX has started its backend (and so read its memory settings)."""
    if "jax" not in sys.modules:
        return False
    try:
        # private; reached only once the user imported JAX (by name: mypy needs no JAX here)
        xla_bridge = importlib.import_module("jax._src.xla_bridge")

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # another layout: assume it has (Keras on JAX starts it at import)
        return True


def allocator_for(backend: str, tf_gpu: Callable[[], TfGpu | None]) -> Allocator:
    """The allocator of the backend the user's Keras computes with."""
    if backend == "jax":
        return JaxAllocator()
    if backend == "torch":
        return TorchAllocator()
    return TfAllocator(tf_gpu())
