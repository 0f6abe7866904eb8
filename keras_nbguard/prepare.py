"""What happens before a tracked run: gc, Keras session clearing, dtype policy and GPU setup."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import sys
from dataclasses import dataclass, field
from typing import Any

from . import gpu_setup
from .collectors.gpu import TfGpu

DEFAULT_POLICY = "float32"


@dataclass(frozen=True)
class RunOptions:
    """The per-run knobs: ``%%kerasrun`` options, or ``track()`` keyword arguments."""

    clear: bool = True
    deep_clean: bool = True  # also purge what clear_session leaves (see deepclean.py)
    gpu_growth: bool | None = None  # None: leave as configured at load
    gpu_limit_mb: int | None = None
    host_limit_mb: int | None = None  # what a run may add to the kernel's RSS (host_limit.py)
    mixed_precision: str | None = None  # a Keras dtype policy name, e.g. "mixed_float16"
    quiet: bool = False
    # keep earlier runs' models that only IPython's caches and Keras' History hold (autorelease.py)
    keep_stale: bool = False


@dataclass
class Prepared:
    cleared: bool = False
    warnings: list[str] = field(default_factory=list)


def prepare(options: RunOptions, tf_gpu: TfGpu | None = None) -> Prepared:
    result = Prepared()
    _configure_gpu(options, tf_gpu, result)
    keras = sys.modules.get("keras")
    if options.mixed_precision and keras is None:
        # the user asked for a Keras policy: importing Keras is the price
        keras = importlib.import_module("keras")
    if options.clear:
        result.cleared = _clear(keras, options, result)
        if not result.cleared:
            gc.collect()  # no Keras yet: gc is all the cleaning there is
    elif options.mixed_precision:
        _set_policy(keras, options.mixed_precision, result)
    return result


def _configure_gpu(options: RunOptions, tf_gpu: TfGpu | None, result: Prepared) -> None:
    if options.gpu_limit_mb is not None:
        if tf_gpu is None:
            import tensorflow  # noqa: F401  a hard cap can only be set through tf.config

            tf_gpu = TfGpu.if_imported()
        assert tf_gpu is not None
        result.warnings += gpu_setup.set_memory_limit(tf_gpu, options.gpu_limit_mb)
    elif options.gpu_growth is not None:
        result.warnings += gpu_setup.set_growth(tf_gpu, options.gpu_growth)


def _clear(keras: object | None, options: RunOptions, result: Prepared) -> bool:
    """clear_session (which also runs gc) when Keras is imported; keep the dtype policy.

    ``clear_session`` silently resets the global dtype policy to float32: a user's own mixed
    precision would be lost between runs, so it is put back (or ours applied).
    """
    if keras is None:
        return False
    result.warnings += clear_keeping_policy(keras, options.mixed_precision)
    return True


def clear_keeping_policy(keras: object, policy: str | None = None) -> list[str]:
    """``keras.utils.clear_session()``, then the dtype policy it reset put back (``policy``
    instead, when given). Every clear of ours goes through here: runs, free, the button.
    Returns what could not be done, in words."""
    policy_before = _policy_name(keras)
    keras.utils.clear_session()  # type: ignore[attr-defined]
    wanted = policy or policy_before
    problems: list[str] = []
    if wanted and wanted != DEFAULT_POLICY and _policy_name(keras) != wanted:
        try:
            keras.config.set_dtype_policy(wanted)  # type: ignore[attr-defined]
        except Exception as exc:
            problems.append(f"dtype policy {wanted!r} not applied: {exc}")
    return problems


def _policy_name(keras: object) -> str | None:
    try:
        return keras.config.dtype_policy().name  # type: ignore[attr-defined]
    except Exception:
        return None


def _set_policy(keras: object, name: str, result: Prepared) -> None:
    try:
        keras.config.set_dtype_policy(name)  # type: ignore[attr-defined]
    except Exception as exc:
        result.warnings.append(f"dtype policy {name!r} not applied: {exc}")


POLICIES = {"mixed_float16", "mixed_bfloat16", "float16", "bfloat16", "float32", "float64"}
SHORT_POLICIES = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def options_from(args: argparse.Namespace, base: RunOptions) -> RunOptions:
    """``base`` changed by the options given on a ``%%kerasrun`` / ``%nbguard config`` line
    (None: not given); ``ValueError`` says, in the user's terms, what is wrong."""
    changes: dict[str, Any] = {}
    for name in ("clear", "deep_clean", "gpu_growth", "quiet", "keep_stale"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    if args.gpu_limit is not None:
        if args.gpu_limit <= 0:
            raise ValueError(f"--gpu-limit takes a positive number of MiB, not {args.gpu_limit}")
        changes["gpu_limit_mb"] = args.gpu_limit
    if getattr(args, "host_limit", None) is not None:
        if args.host_limit <= 0:
            raise ValueError(f"--host-limit takes a positive number of MiB, not {args.host_limit}")
        changes["host_limit_mb"] = args.host_limit
    if args.mixed_precision is not None:
        policy = SHORT_POLICIES.get(args.mixed_precision, args.mixed_precision)
        if policy not in POLICIES:
            raise ValueError(
                f"--mixed-precision: unknown policy {args.mixed_precision!r}; use "
                f"mixed_float16 (GPUs) or mixed_bfloat16 (TPUs, recent CPUs/GPUs)"
            )
        changes["mixed_precision"] = policy
    return dataclasses.replace(base, **changes)
