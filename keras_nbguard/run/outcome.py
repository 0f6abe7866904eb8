"""How a run ended, and advice in words taken from the run when it ran out of memory."""

from __future__ import annotations

import sys

from keras_nbguard.records.calls import FitRecord
from keras_nbguard.records.formatting import fmt_bytes
from keras_nbguard.records.run import error_names_a_gpu


def status_of(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, MemoryError) or _is_tf_oom(exc) or _is_torch_or_jax_oom(exc):
        return "oom"
    return "error"


def _is_torch_or_jax_oom(exc: BaseException) -> bool:
    """torch's CUDA out-of-memory, or XLA's (JAX): a runtime error that names its status."""
    return _is_torch_cuda_oom(exc) or (
        type(exc).__name__ in ("JaxRuntimeError", "XlaRuntimeError")
        and str(exc).startswith("RESOURCE_EXHAUSTED")
    )


def names_a_gpu(exc: BaseException | None) -> bool:
    """Whether an out-of-memory error says it was a GPU's: the advice then speaks of GPU
    memory even where no GPU reading was made."""
    return exc is not None and (_is_torch_cuda_oom(exc) or error_names_a_gpu(str(exc)))


def _is_torch_cuda_oom(exc: BaseException) -> bool:
    torch_oom = getattr(getattr(sys.modules.get("torch"), "cuda", None), "OutOfMemoryError", None)
    return isinstance(torch_oom, type) and isinstance(exc, torch_oom)


def _is_tf_oom(exc: BaseException) -> bool:
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None)
    oom = getattr(errors, "ResourceExhaustedError", None)
    return isinstance(oom, type) and isinstance(exc, oom)


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def oom_advice(
    fits: list[FitRecord],
    mixed_precision: str | None,
    gpu_limit_mb: int | None,
    rss_peak: int | None,
    on_gpu: bool,
) -> list[str]:
    """Advice for an out-of-memory run, in terms of what this run actually did."""
    where = "GPU" if on_gpu else "host"
    advice = []
    failing = fits[-1] if fits else None
    if failing is not None and failing.batch_size:
        smaller = max(1, failing.batch_size // 2)
        advice.append(
            f"fit ran out of {where} memory at batch_size={failing.batch_size}: try "
            f"batch_size={smaller} (activation memory scales with the batch)."
        )
    else:
        advice.append(
            f"The run ran out of {where} memory: a smaller batch size lowers the activation memory."
        )
    if not mixed_precision:
        advice.append(
            "Mixed precision (`%%kerasrun --mixed-precision`) about halves activation "
            "memory on GPUs with float16 support."
        )
    if failing is not None:
        advice.append(
            "Training keeps activations for the backward pass, gradients and optimizer "
            "state (Adam: two more copies of the weights) that inference does not need."
        )
    if on_gpu and gpu_limit_mb is None:
        advice.append(
            "On a shared GPU, cap this kernel with `--gpu-limit MiB` so it fails early "
            "and predictably instead of taking memory others need."
        )
    if not on_gpu and rss_peak is not None:
        advice.append(
            f"Process memory peaked at {fmt_bytes(rss_peak)}: stream data with "
            f"tf.data instead of holding whole arrays, and free models you no longer "
            f"use."
        )
    return advice
