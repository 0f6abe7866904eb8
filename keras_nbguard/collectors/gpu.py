"""GPU memory: TensorFlow's allocator (tf.config) and the driver's view (NVML).

Both sit behind small seams (``TfGpu`` and the ``nvml`` module handed to ``NvmlReader``) so that
tests without a GPU can stand in at exactly the pynvml / tf.config boundary.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ..records import GpuReading


class TfGpu:
    """The tf.config calls keras_nbguard makes. Build it with ``TfGpu.if_imported()``."""

    def __init__(self, config: Any, runtime_initialized: Callable[[], bool]) -> None:
        self.config = config
        self._runtime_initialized = runtime_initialized

    @classmethod
    def if_imported(cls) -> TfGpu | None:
        """The real tf.config, or None when TensorFlow is not imported (we never import it here)."""
        tf = sys.modules.get("tensorflow")
        if tf is None or not hasattr(tf, "config"):
            return None
        return cls(tf.config, _real_runtime_initialized)

    def gpus(self) -> list[Any]:
        return list(self.config.list_physical_devices("GPU"))

    def runtime_initialized(self) -> bool:
        return self._runtime_initialized()

    def memory_info(self) -> dict[str, int]:
        return self.config.experimental.get_memory_info("GPU:0")

    def reset_memory_stats(self) -> None:
        self.config.experimental.reset_memory_stats("GPU:0")


def _real_runtime_initialized() -> bool:
    """Whether TF has created its eager context (and with it claimed its GPUs)."""
    context = sys.modules.get("tensorflow.python.eager.context")
    try:
        return bool(context.context()._initialized)  # type: ignore[union-attr]
    except AttributeError:  # another TF layout: assume the worst, so we never claim "too early"
        return True


NVML_REASONS = {
    "NVMLError_LibraryNotFound": "NVML: library not found (no NVIDIA driver installed)",
    "NVMLError_DriverNotLoaded": "NVML: NVIDIA driver not loaded",
    "NVMLError_NoPermission": "NVML: no permission to query the GPU",
    "NVMLError_NotSupported": "NVML: not supported on this GPU",
    "NVMLError_Uninitialized": "NVML: not initialized",
}


def nvml_reason(exc: BaseException) -> str:
    return NVML_REASONS.get(type(exc).__name__, f"NVML: {exc}")


class NvmlReader:
    """Device and per-process memory from NVML, read once per run (a process list takes a driver
    lock)."""

    def __init__(self, nvml: Any = None, environ: dict[str, str] | None = None) -> None:
        self._nvml = nvml
        self._environ = os.environ if environ is None else environ
        self._failed: str | None = None  # a failed nvmlInit is permanent for this process
        self._initialized = False

    def _load(self) -> Any:
        if self._nvml is None:
            import pynvml  # first GPU sample only: loading NVML is never paid at %load_ext

            self._nvml = pynvml
        if not self._initialized:
            self._nvml.nvmlInit()
            self._initialized = True
        return self._nvml

    def _handle(self, nvml: Any) -> Any:
        """The NVML device behind TF's GPU:0, following CUDA_VISIBLE_DEVICES."""
        first = self._environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if first.startswith(("GPU-", "MIG-")):
            return nvml.nvmlDeviceGetHandleByUUID(first)
        return nvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)

    def read(self, pid: int | None = None) -> tuple[int | None, int | None, int | None, str | None]:
        """(device used, device total, this process's used, reason for whatever is None)."""
        if self._failed:
            return None, None, None, self._failed
        try:
            nvml = self._load()
        except ImportError:
            self._failed = "NVML: nvidia-ml-py is not installed"
            return None, None, None, self._failed
        except Exception as exc:
            self._failed = nvml_reason(exc)
            return None, None, None, self._failed
        try:
            handle = self._handle(nvml)
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as exc:
            return None, None, None, nvml_reason(exc)
        used, reason = self._process_used(nvml, handle, os.getpid() if pid is None else pid)
        return int(info.used), int(info.total), used, reason

    @staticmethod
    def _process_used(nvml: Any, handle: Any, pid: int) -> tuple[int | None, str | None]:
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception as exc:
            return None, f"process memory: {nvml_reason(exc)}"
        for proc in processes:
            if proc.pid == pid:
                used = getattr(proc, "usedGpuMemory", None)
                if used is None:
                    return None, "process memory: NVML does not report it on this system"
                return int(used), None
        if processes:
            return None, (f"process memory: pid {pid} not in NVML's list of "
                          f"{len(processes)} process(es); inside a container NVML shows host pids")
        return None, "process memory: NVML lists no process on this GPU (container or permissions)"


class GpuCollector:
    """GPU figures for one run: allocator stats reset before, read after; NVML read after."""

    def __init__(self, tf_gpu: Callable[[], TfGpu | None] = TfGpu.if_imported,
                 nvml: NvmlReader | None = None) -> None:
        self._tf_gpu = tf_gpu
        self._nvml = nvml or NvmlReader()

    def begin(self) -> None:
        tf = self._tf_gpu()
        if tf is not None and tf.runtime_initialized() and tf.gpus():
            # Peak since this reset is the run's peak. A run that initializes the GPU itself needs
            # no reset: the allocator's peak then starts with the run.
            tf.reset_memory_stats()

    def end(self) -> GpuReading:
        tf = self._tf_gpu()
        if tf is None:
            return GpuReading(reason="no GPU reading: TensorFlow is not imported")
        if not tf.gpus():
            return GpuReading(reason="no GPU: TensorFlow sees none")
        if not tf.runtime_initialized():
            return GpuReading(reason="TensorFlow has not initialized its GPU yet")
        reasons = []
        try:
            info = tf.memory_info()
            current, peak = int(info["current"]), int(info["peak"])
        except Exception as exc:
            current = peak = None
            reasons.append(f"TF allocator: {exc}")
        used, total, process_used, nvml_why = self._nvml.read()
        if nvml_why:
            reasons.append(nvml_why)
        return GpuReading(current, peak, used, total, process_used, "; ".join(reasons) or None)
