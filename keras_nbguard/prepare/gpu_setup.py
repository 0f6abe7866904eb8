"""GPU configuration that must happen before the framework touches the GPU: growth and a hard
cap, for the backend the user's Keras computes with (TensorFlow, JAX, torch).

Every function returns the problems it met as sentences for the user; none raises.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from keras_nbguard.collectors.allocators import jax_started
from keras_nbguard.collectors.gpu import TfGpu

if TYPE_CHECKING:
    from keras_nbguard.collectors.gpu import NvmlReader
    from keras_nbguard.prepare.before_run import RunOptions

GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
JAX_PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"  # read once, as JAX starts its backend
JAX_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
MB = 2**20
RESTART_HINT = (
    "Restart the kernel and run `%load_ext keras_nbguard` (with the options you want) "
    "before anything imports TensorFlow."
)
JAX_RESTART_HINT = (
    "Restart the kernel and run `%load_ext keras_nbguard` (with the options you "
    "want) before JAX computes anything."
)


def configure_at_load(
    tf: TfGpu | None, environ: MutableMapping[str, str] = os.environ
) -> list[str]:
    """Turn on memory growth as early as we are loaded, without importing any framework: JAX
    would otherwise take 75% of the GPU at its first computation, TensorFlow nearly all of it.
    torch grows on demand by itself. The user's own settings win."""
    environ.setdefault(JAX_PREALLOCATE, "false")  # read by JAX only, whatever the backend
    if tf is None or GROWTH_ENV in environ:  # TF reads the variable over tf.config
        environ.setdefault(GROWTH_ENV, "true")
        return []
    return set_growth(tf, True, environ)


def configure(
    options: RunOptions, backend: str, tf_gpu: TfGpu | None, nvml: NvmlReader | None
) -> list[str]:
    """A run's ``--gpu-growth`` / ``--gpu-limit`` on the backend in use."""
    if options.gpu_limit_mb is None and options.gpu_growth is None:
        return []
    if backend == "jax":
        if options.gpu_limit_mb is not None:
            return jax_memory_limit(
                options.gpu_limit_mb, nvml, preallocate=options.gpu_growth is not True
            )
        return jax_growth(bool(options.gpu_growth))
    if backend == "torch":
        if options.gpu_limit_mb is not None:
            return torch_memory_limit(options.gpu_limit_mb)
        return (
            []
            if options.gpu_growth
            else [
                "--no-gpu-growth has no effect on the torch backend: torch always grows on demand."
            ]
        )
    if options.gpu_limit_mb is not None:
        if tf_gpu is None:
            try:
                import tensorflow  # noqa: F401  a hard cap can only be set through tf.config
            except ImportError as exc:
                return [
                    f"--gpu-limit {options.gpu_limit_mb} ignored: Keras computes with "
                    f"TensorFlow here, which failed to import ({exc})."
                ]
            tf_gpu = TfGpu.if_imported()
        if tf_gpu is None:
            return [f"--gpu-limit {options.gpu_limit_mb} ignored: TensorFlow has no tf.config."]
        return set_memory_limit(tf_gpu, options.gpu_limit_mb)
    return set_growth(tf_gpu, bool(options.gpu_growth))


# -- JAX: environment variables, read once as JAX starts its backend -----------------------------
def jax_growth(
    enabled: bool, environ: MutableMapping[str, str] = os.environ, started: bool | None = None
) -> list[str]:
    wanted = "false" if enabled else "true"
    if started if started is not None else jax_started():
        if environ.get(JAX_PREALLOCATE, "true").lower() == wanted:
            return []
        return [
            f"GPU memory growth can't be turned {'on' if enabled else 'off'}: JAX already "
            f"started its backend. {JAX_RESTART_HINT}"
        ]
    environ[JAX_PREALLOCATE] = wanted
    return []


def jax_memory_limit(
    limit_mb: int,
    nvml: NvmlReader | None,
    environ: MutableMapping[str, str] = os.environ,
    started: bool | None = None,
    preallocate: bool = True,
) -> list[str]:
    """JAX takes its cap as a fraction of the GPU: ``limit_mb`` over the smallest visible GPU's
    size from NVML. The cap is taken at once (``preallocate``; ``--gpu-growth`` grows up to it
    instead): JAX's pool without preallocation fragments, "a JAX program that uses most of the
    available GPU memory may OOM" (JAX's GPU memory page); on an H200 a 512 MiB free region
    stayed in a 1020 MiB pool after small fits, and larger ones ran out of memory."""
    total, why = nvml.smallest_total() if nvml is not None else (None, "NVML not available")
    if total is None:
        return [
            f"--gpu-limit {limit_mb} ignored: the GPU's size is unknown ({why}); set "
            f"{JAX_FRACTION} yourself before JAX starts."
        ]
    # six places: on a 141 GiB H200 three would round 1024 MiB to 1006 (one step is 141 MiB)
    fraction = f"{min(1.0, limit_mb * MB / total):.6f}"
    if started if started is not None else jax_started():
        if _same_number(environ.get(JAX_FRACTION), fraction):  # "0.05" is "0.050000"
            return []
        return [
            f"GPU memory limit of {limit_mb} MiB can't be applied: JAX already started its "
            f"backend ({JAX_FRACTION}={environ.get(JAX_FRACTION, 'unset')}). "
            f"{JAX_RESTART_HINT}"
        ]
    environ[JAX_FRACTION] = fraction
    environ[JAX_PREALLOCATE] = "true" if preallocate else "false"
    return []


def _same_number(text: str | None, fraction: str) -> bool:
    try:
        return text is not None and abs(float(text) - float(fraction)) < 1e-6
    except ValueError:
        return False


# -- torch: a per-process fraction, settable at any time ----------------------------------------
def torch_memory_limit(limit_mb: int, torch: Any = None) -> list[str]:
    if torch is None:
        try:
            # the backend the user's Keras computes with: it imports torch anyway (by name, so
            # that mypy checks this module alike where torch is not installed)
            torch = importlib.import_module("torch")
        except ImportError as exc:
            return [f"--gpu-limit {limit_mb} ignored: torch failed to import ({exc})."]
    cuda = torch.cuda
    if not cuda.is_available():
        return [f"--gpu-limit {limit_mb} ignored: torch sees no CUDA GPU."]
    problems = []
    for i in range(cuda.device_count()):
        try:
            total = cuda.get_device_properties(i).total_memory
            cuda.set_per_process_memory_fraction(min(1.0, limit_mb * MB / total), i)
        except (RuntimeError, ValueError) as exc:
            problems.append(f"GPU memory limit not set on cuda:{i}: {exc}")
    return problems


def empty_torch_cache(torch: Any = None) -> list[str]:
    """Hand torch's cached, unused GPU blocks back to the device (only where CUDA is in use)."""
    torch = torch if torch is not None else sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception as exc:
        return [f"torch.cuda.empty_cache failed: {exc}"]
    return []


# -- TensorFlow: tf.config, before TensorFlow starts its GPU runtime ----------------------------


def set_growth(
    tf: TfGpu | None, enabled: bool, environ: MutableMapping[str, str] = os.environ
) -> list[str]:
    if tf is None:
        environ[GROWTH_ENV] = "true" if enabled else "false"
        return []
    gpus = tf.gpus()
    if not gpus:
        return []
    if tf.runtime_initialized():
        if effective_growth(tf, environ) == enabled:
            return []
        return [
            f"GPU memory growth can't be turned {'on' if enabled else 'off'}: TensorFlow "
            f"already initialized the GPU. {RESTART_HINT}"
        ]
    problems = []
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, enabled)
        except (RuntimeError, ValueError) as exc:
            problems.append(f"GPU memory growth not set on {gpu.name}: {exc}")
    # TF's allocator reads TF_FORCE_GPU_ALLOW_GROWTH over tf.config (ours, set at load, too)
    environ[GROWTH_ENV] = "true" if enabled else "false"
    return problems


def effective_growth(tf: TfGpu, environ: MutableMapping[str, str] = os.environ) -> bool:
    if environ.get(GROWTH_ENV, "").lower() == "true":
        return True
    try:
        return all(tf.config.experimental.get_memory_growth(g) for g in tf.gpus())
    except (RuntimeError, ValueError):
        return False


def set_memory_limit(tf: TfGpu, limit_mb: int) -> list[str]:
    """A hard cap: each GPU becomes one logical device of ``limit_mb`` MiB."""
    gpus = tf.gpus()
    if not gpus:
        return [f"--gpu-limit {limit_mb} ignored: TensorFlow sees no GPU."]
    config = tf.config
    if tf.runtime_initialized():
        current = _current_limits(tf)
        if current and all(limit == limit_mb for limit in current):
            return []
        return [
            f"GPU memory limit of {limit_mb} MiB can't be applied: TensorFlow already "
            f"initialized the GPU (current limit: {_describe(current)}). {RESTART_HINT}"
        ]
    problems = []
    for gpu in gpus:
        try:
            config.set_logical_device_configuration(
                gpu, [config.LogicalDeviceConfiguration(memory_limit=limit_mb)]
            )
        except (RuntimeError, ValueError) as exc:
            problems.append(f"GPU memory limit not set on {gpu.name}: {exc}")
    return problems


def _current_limits(tf: TfGpu) -> list[int | None]:
    limits = []
    for gpu in tf.gpus():
        try:
            logical = tf.config.get_logical_device_configuration(gpu) or []
        except (RuntimeError, ValueError):
            logical = []
        limits.append(logical[0].memory_limit if logical else None)
    return limits


def _describe(limits: list[int | None]) -> str:
    if not limits or all(limit is None for limit in limits):
        return "none"
    return ", ".join("none" if limit is None else f"{limit} MiB" for limit in limits)
