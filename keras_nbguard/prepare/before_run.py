"""What happens before a tracked run: gc, Keras session clearing, dtype policy and GPU setup."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from keras_nbguard import backends
from keras_nbguard.backends import DEFAULT_POLICY
from keras_nbguard.prepare import deepclean, gpu_setup, kept_state, tracing_warnings
from keras_nbguard.records.options import (
    RunOptions,  # checked in options.py; here, what a run is prepared with
)

if TYPE_CHECKING:
    from keras_nbguard.collectors.gpu import NvmlReader, TfGpu


@dataclass
class Prepared:
    cleared: bool = False
    warnings: list[str] = field(default_factory=list)


def prepare(
    options: RunOptions,
    tf_gpu: TfGpu | None = None,
    nvml: NvmlReader | None = None,
    label: str | None = None,
) -> Prepared:
    """Everything before a run (of ``label``), for the Keras the user has (and the backend it
    computes with). Nothing here raises: what could not be done comes back as sentences in
    ``warnings``."""
    result = Prepared()
    try:
        result.warnings += gpu_setup.configure(options, backends.current_backend(), tf_gpu, nvml)
    except Exception as exc:  # the GPU set-up never keeps the session from being cleared
        result.warnings.append(f"GPU set-up failed ({type(exc).__name__}: {exc})")
    kerases = backends.loaded()
    if options.mixed_precision and not kerases:
        kerases = _import_for_policy(result)  # the user asked for a Keras policy: the price
    if options.clear and kerases:
        # no gc here: the run collects once, after it let go of all; TensorFlow's kernel cache
        # stays (a kept model would instantiate its functions anew: deepclean.kernel_cache_kept)
        with deepclean.kernel_cache_kept():
            for keras in kerases:
                result.warnings += clear_keeping_policy(
                    keras, options.mixed_precision, collect=False, label=label
                )
        result.cleared = True
    elif options.mixed_precision and not options.clear:
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


def clear_keeping_policy(
    keras: backends.Keras,
    policy: str | None = None,
    collect: bool = True,
    label: str | None = None,
) -> list[str]:
    """``clear_session()``, then the dtype policy it reset put back (``policy`` instead, when
    given); on torch, the CUDA cache emptied. Every clear of ours goes through here: runs, free,
    the button. Returns what could not be done, in words. ``collect=False``: the caller collects.

    Keras 3's ``clear_session`` silently resets the global dtype policy to float32: a user's own
    mixed precision would be lost between runs. On TensorFlow, its count of recent traces goes
    too: the new models' first traces, run after run, are no retracing (``tracing_warnings``).
    Its inputs' name counters and ``keras.config``'s switches are kept (``kept_state``), and
    the other counters skip the names layers that outlive the clear have (``layer_names``;
    ``label``: the run the clear starts): names stay unique beside them.
    """
    policy_before = keras.policy_name()
    with kept_state.kept(keras, label):
        keras.clear_session(collect=collect)
    if keras.backend == "tensorflow":
        tracing_warnings.forget_recent_traces()
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
