"""What happens before a tracked run: gc, Keras session clearing, dtype policy and GPU setup."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import backends, gpu_setup
from .backends import DEFAULT_POLICY

if TYPE_CHECKING:
    from .collectors.gpu import NvmlReader, TfGpu


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


def prepare(
    options: RunOptions, tf_gpu: TfGpu | None = None, nvml: NvmlReader | None = None
) -> Prepared:
    """Everything before a run, for the Keras the user has (and the backend it computes with).
    Nothing here raises: what could not be done comes back as sentences in ``warnings``."""
    result = Prepared()
    try:
        result.warnings += gpu_setup.configure(options, backends.current_backend(), tf_gpu, nvml)
    except Exception as exc:  # the GPU set-up never keeps the session from being cleared
        result.warnings.append(f"GPU set-up failed ({type(exc).__name__}: {exc})")
    kerases = backends.loaded()
    if options.mixed_precision and not kerases:
        kerases = _import_for_policy(result)  # the user asked for a Keras policy: the price
    if options.clear and kerases:
        for keras in kerases:
            result.warnings += clear_keeping_policy(keras, options.mixed_precision)
        result.cleared = True
    elif options.clear:
        gc.collect()  # no Keras yet: gc is all the cleaning there is
    elif options.mixed_precision:
        for keras in kerases:
            _set_policy(keras, options.mixed_precision, result)
    result.warnings += backends.unsupported_loaded()
    return result


def _import_for_policy(result: Prepared) -> list[backends.Keras]:
    """Keras 2 when ``TF_USE_LEGACY_KERAS`` asks for it (as TensorFlow reads it), else Keras 3."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")
    try:
        importlib.import_module("tf_keras" if legacy else "keras")
    except ImportError as exc:
        result.warnings.append(f"--mixed-precision needs Keras, which failed to import: {exc}")
    return backends.loaded()


def clear_keeping_policy(keras: backends.Keras, policy: str | None = None) -> list[str]:
    """``clear_session()``, then the dtype policy it reset put back (``policy`` instead, when
    given); on torch, the CUDA cache emptied. Every clear of ours goes through here: runs, free,
    the button. Returns what could not be done, in words.

    Keras 3's ``clear_session`` silently resets the global dtype policy to float32: a user's own
    mixed precision would be lost between runs.
    """
    policy_before = keras.policy_name()
    keras.clear_session()
    wanted = policy or policy_before
    problems: list[str] = []
    if wanted and wanted != DEFAULT_POLICY and keras.policy_name() != wanted:
        try:
            keras.set_policy(wanted)
        except Exception as exc:
            problems.append(f"dtype policy {wanted!r} not applied: {exc}")
    if keras.backend == "torch":
        problems += gpu_setup.empty_torch_cache()
    return problems


def clear_every_keras() -> tuple[bool, list[str]]:
    """Clear each Keras the user imported; (whether any was, what could not be done)."""
    problems: list[str] = []
    kerases = backends.loaded()
    for keras in kerases:
        problems += clear_keeping_policy(keras)
    return bool(kerases), problems


def _set_policy(keras: backends.Keras, name: str, result: Prepared) -> None:
    try:
        keras.set_policy(name)
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
