"""GPU configuration that must happen before TensorFlow touches the GPU: growth and a hard cap.

Every function returns the problems it met as sentences for the user; none raises.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from .collectors.gpu import TfGpu

GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
RESTART_HINT = ("Restart the kernel and run `%load_ext keras_nbguard` (with the options you want) "
                "before anything imports TensorFlow.")


def configure_at_load(tf: TfGpu | None,
                      environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Turn on memory growth as early as we are loaded, without importing TensorFlow."""
    if tf is None:
        environ.setdefault(GROWTH_ENV, "true")  # the user's own setting wins
        return []
    return set_growth(tf, True, environ)


def set_growth(tf: TfGpu | None, enabled: bool,
               environ: MutableMapping[str, str] = os.environ) -> list[str]:
    if tf is None:
        environ[GROWTH_ENV] = "true" if enabled else "false"
        return []
    gpus = tf.gpus()
    if not gpus:
        return []
    if tf.runtime_initialized():
        if effective_growth(tf, environ) == enabled:
            return []
        return [f"GPU memory growth can't be turned {'on' if enabled else 'off'}: TensorFlow "
                f"already initialized the GPU. {RESTART_HINT}"]
    problems = []
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, enabled)
        except (RuntimeError, ValueError) as exc:
            problems.append(f"GPU memory growth not set on {gpu.name}: {exc}")
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
        return [f"GPU memory limit of {limit_mb} MiB can't be applied: TensorFlow already "
                f"initialized the GPU (current limit: {_describe(current)}). {RESTART_HINT}"]
    problems = []
    for gpu in gpus:
        try:
            config.set_logical_device_configuration(
                gpu, [config.LogicalDeviceConfiguration(memory_limit=limit_mb)])
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
