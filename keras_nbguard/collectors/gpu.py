"""GPU memory: TensorFlow's allocator (tf.config) and the driver's view (NVML).

Both sit behind small seams (``TfGpu`` and the ``nvml`` module handed to ``NvmlReader``) so that
tests without a GPU can stand in at exactly the pynvml / tf.config boundary.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

from keras_nbguard import backends
from keras_nbguard.collectors.allocators import Allocator, allocator_for
from keras_nbguard.records.run import GpuReading


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

    def _devices(self) -> list[str]:
        """TF's GPUs as it names them ("GPU:0", "GPU:1", ...; logical ones under a memory cap).
        Asked only once the runtime is up, since listing logical devices initializes it."""
        names = [d.name.split("device:")[-1] for d in self.config.list_logical_devices("GPU")]
        return names or ["GPU:0"]

    def memory_info(self) -> dict[str, int]:
        """Allocator bytes summed over every GPU of this process (a strategy spreads a model
        over all of them); ``devices`` says how many were summed."""
        infos = [self.config.experimental.get_memory_info(name) for name in self._devices()]
        return {
            "current": sum(int(i["current"]) for i in infos),
            "peak": sum(int(i["peak"]) for i in infos),
            "devices": len(infos),
        }

    def reset_memory_stats(self) -> None:
        for name in self._devices():
            self.config.experimental.reset_memory_stats(name)

    def host_pool(self) -> tuple[int, int] | None:
        """TensorFlow's CPU allocator: (bytes in use now, the most in use at once since the
        process began). With oneDNN (TF's default on x86 Linux) large tensors live in a pool
        that grows to that peak, keeps the pages it touched and reuses them, so a run that
        reaches a new peak raises the kernel's RSS for good. None before the runtime is up
        (asking would start it, too late for a GPU setup) and where the allocator keeps no
        count (oneDNN off). ~1 µs a read."""
        if not self.runtime_initialized():
            return None
        try:
            info = self.config.experimental.get_memory_info("CPU:0")
            return int(info["current"]), int(info["peak"])
        except Exception:  # "Allocator stats not available" (ValueError), or another build's
            return None  # error: a figure no summary row shows must not warn at every run


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

    def _handles(self, nvml: Any) -> list[Any]:
        """The NVML devices this process can use: CUDA_VISIBLE_DEVICES's (indexes or UUIDs, up
        to the first invalid entry, as CUDA reads it), or every device when it is unset."""
        visible = self._environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        handles = []
        for entry in (e.strip() for e in visible.split(",")):
            if entry.startswith(("GPU-", "MIG-")):
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
            elif entry.isdigit():
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            else:
                break
        return handles

    def read(self, pid: int | None = None) -> tuple[int | None, int | None, int | None, str | None]:
        """(device used, device total, this process's used, reason for whatever is None), each
        summed over the visible devices."""
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
            handles = self._handles(nvml)
            infos = [nvml.nvmlDeviceGetMemoryInfo(handle) for handle in handles]
        except Exception as exc:
            return None, None, None, nvml_reason(exc)
        if not handles:
            return None, None, None, "NVML: CUDA_VISIBLE_DEVICES hides every GPU"
        pid = os.getpid() if pid is None else pid
        per_device = [self._process_used(nvml, handle, pid) for handle in handles]
        found = [used for used, _ in per_device if used is not None]
        if found:
            used, reason = sum(found), None
        else:  # on no device: a list that holds others' pids says the most (containers)
            reasons = [why for _, why in per_device if why]
            used = None
            reason = next((r for r in reasons if "not in NVML's list" in r), reasons[0])
        return (sum(int(i.used) for i in infos), sum(int(i.total) for i in infos), used, reason)

    def smallest_total(self) -> tuple[int | None, str | None]:
        """The size of the smallest visible GPU (a cap as a fraction must fit each), or None and
        why."""
        if self._failed:
            return None, self._failed
        try:
            nvml = self._load()
            handles = self._handles(nvml)
            totals = [int(nvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles]
        except ImportError:
            return None, "NVML: nvidia-ml-py is not installed"
        except Exception as exc:
            return None, nvml_reason(exc)
        return (min(totals), None) if totals else (None, "NVML: no visible GPU")

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
            return None, (
                f"process memory: pid {pid} not in NVML's list of "
                f"{len(processes)} process(es); inside a container NVML shows host pids"
            )
        # seen on an H200 before the kernel's framework touched the GPU: none uses it yet
        return None, (
            "process memory: NVML lists no process on this GPU (none has used it yet, or a "
            "container hides them)"
        )


class GpuCollector:
    """GPU figures for one run: the backend allocator's peak reset before (where it can be), read
    after, and per call of the user's (``call_began`` / ``call_ended``); NVML read after."""

    def __init__(
        self,
        tf_gpu: Callable[[], TfGpu | None] = TfGpu.if_imported,
        nvml: NvmlReader | None = None,
        allocator: Callable[[], Allocator] | None = None,
    ) -> None:
        self._allocator = allocator or (lambda: allocator_for(backends.current_backend(), tf_gpu))
        self._nvml = nvml or NvmlReader()
        self._peak = 0  # the run's peak so far, folded in before each reset
        # what the allocator's peak held before the run: None when it was reset (or not yet up),
        # so all it reports is the run's; JAX can't reset, so only a new high is the run's
        self._peak_before: int | None = None
        self._call_reset = False

    def begin(self) -> None:
        allocator = self._allocator()
        if not allocator.unavailable() and not allocator.reset_peak():
            self._peak_before = allocator.read()[1]

    def call_began(self) -> None:
        """Before a fit, evaluate or predict: fold the run's peak so far, then reset."""
        self._call_reset = False
        with contextlib.suppress(Exception):  # a missing per-call figure, never a failed call
            allocator = self._allocator()
            if not allocator.unavailable():
                self._peak = max(self._peak, allocator.read()[1])
                self._call_reset = allocator.reset_peak()

    def call_ended(self) -> int | None:
        """The allocator's peak during the call (None: unknown, or it can't be reset)."""
        if not self._call_reset:
            return None
        try:
            peak = self._allocator().read()[1]
        except Exception:
            return None
        self._peak = max(self._peak, peak)
        return peak

    def end(self) -> GpuReading:
        allocator = self._allocator()
        why = allocator.unavailable()
        if why:
            return GpuReading(reason=why, allocator=allocator.name)
        reasons: list[str] = []
        current: int | None
        peak: int | None
        try:
            current, peak = allocator.read()
            peak = self._run_peak(peak, reasons, allocator.name)
        except Exception as exc:
            current = peak = None
            reasons.append(f"{allocator.name} allocator: {exc}")
        used, total, process_used, nvml_why = self._nvml.read()
        if nvml_why:
            reasons.append(nvml_why)
        return GpuReading(
            current, peak, used, total, process_used, "; ".join(reasons) or None, allocator.name
        )

    def _run_peak(self, peak: int, reasons: list[str], name: str) -> int | None:
        if self._peak_before is None:  # reset at the start: the peak is this run's
            return max(peak, self._peak)
        if peak > self._peak_before:  # no reset (JAX): a new high is this run's peak
            return peak
        reasons.append(
            f"{name} peak n/a: {name} keeps one peak per process, and this run "
            f"stayed under an earlier one"
        )
        return None
