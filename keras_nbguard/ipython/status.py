"""What ``%nbguard status`` and ``%nbguard config`` show: the configuration, GPU setup, the runs
so far, RSS now and where the history is kept, as (name, value) rows."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from keras_nbguard import backends
from keras_nbguard._version import __version__
from keras_nbguard.collectors.allocators import JaxAllocator, TorchAllocator, jax_started
from keras_nbguard.collectors.gpu import TfGpu
from keras_nbguard.prepare import gpu_setup
from keras_nbguard.records.formatting import fmt_bytes
from keras_nbguard.records.options import RunOptions

if TYPE_CHECKING:
    from keras_nbguard.session.core import Session
    from keras_nbguard.store.history_db import Store


def history_db_row(store: Store | None) -> tuple[str, str]:
    if store is None:
        return ("history db", "off")
    return ("history db", "in memory (not kept)" if store.in_memory else store.path)


def status_rows(session: Session) -> list[tuple[str, str]]:
    import psutil

    kerases = backends.loaded()
    keras = ", ".join(k.name for k in kerases) or (
        f"not imported yet (backend: {backends.planned_backend()})"
    )
    return [
        ("version", __version__),
        ("runs", str(len(session.history))),
        ("running", session.current.label if session.current else "nothing"),
        ("rss now", fmt_bytes(psutil.Process().memory_info().rss)),
        ("keras", keras),
        *(("keras unsupported", why) for why in backends.unsupported_loaded()),
        ("gpu", gpu_status(backends.current_backend())),
        ("gc", session.frozen.describe()),
        ("malloc", malloc_status(pool_read=_pool_read(session))),
        *option_rows(session.options),
        history_db_row(session.store),
    ]


def _pool_read(session: Session) -> bool:
    """Whether a run of this kernel read TensorFlow's CPU pool (oneDNN on); read off the records,
    since asking TensorFlow could start its devices."""
    return any(r.host_pool_peak is not None for r in session.history if r.pid == os.getpid())


def malloc_status(pool_read: bool = False) -> str:
    """Whose malloc the kernel runs on, and where glibc's, the kernel that keeps its slack out:
    not with oneDNN on (``pool_read``), where jemalloc keeps the regions of TensorFlow's CPU
    pool that glibc gives back (``findings.glibc_slack``)."""
    from keras_nbguard.collectors.allocated import (
        DEBIAN_PACKAGES,
        GLIBC,
        JEMALLOC,
        installed,
        malloc_name,
        preload_missed,
    )
    from keras_nbguard.diagnosis.causes_across import JEMALLOC_KERNEL

    name = malloc_name()
    if name is None:
        return "n/a (neither glibc's nor a preloaded one: no heap figures)"
    if name != GLIBC:
        return f"{name} (LD_PRELOAD)"
    missed = preload_missed()
    if missed:
        return (
            f"glibc: LD_PRELOAD asks for {missed}, which the loader did not find "
            f"(`apt-get install {DEBIAN_PACKAGES[missed]}`)"
        )
    if pool_read:
        return (
            "glibc: stay on it here (oneDNN is on: TensorFlow's CPU pool takes its regions with "
            f'malloc and glibc gives them back; on jemalloc, the kernel "{JEMALLOC_KERNEL}", '
            "3 of 12 of Keras' examples grew more)"
        )
    if not installed(JEMALLOC):
        return (
            f'glibc (the kernel "{JEMALLOC_KERNEL}" keeps its slack out once jemalloc is '
            f"installed: `apt-get install {DEBIAN_PACKAGES[JEMALLOC]}`)"
        )
    return f'glibc (the kernel "{JEMALLOC_KERNEL}" runs on jemalloc, which keeps its slack out)'


def gpu_status(backend: str) -> str:
    """The GPU as the backend in use sees it, asking nothing that would start its GPU."""
    if backend == "jax":
        if not jax_started():
            return (
                f"JAX not started yet; {gpu_setup.JAX_PREALLOCATE}="
                f"{os.environ.get(gpu_setup.JAX_PREALLOCATE, 'unset')}, "
                f"{gpu_setup.JAX_FRACTION}={os.environ.get(gpu_setup.JAX_FRACTION, 'unset')}"
            )
        return JaxAllocator().unavailable() or "JAX computes on its GPU(s)"
    if backend == "torch":
        return TorchAllocator().unavailable() or "torch uses CUDA"
    tf = TfGpu.if_imported()
    if tf is None:
        return (
            f"TensorFlow not imported yet; {gpu_setup.GROWTH_ENV}="
            f"{os.environ.get(gpu_setup.GROWTH_ENV, 'unset')}"
        )
    try:
        gpus = tf.gpus()
        return (
            f"{len(gpus)} GPU(s); initialized: {tf.runtime_initialized()}"
            if gpus
            else "TensorFlow sees no GPU"
        )
    except Exception as exc:
        return f"n/a ({exc})"


def _deep_clean(options: RunOptions) -> str:
    """``on``, or why it does nothing here: what it purges is TensorFlow's alone (a JAX kernel
    read ``on`` where ``%nbguard free`` said ``deep clean: n/a (JAX backend)``)."""
    if not options.deep_clean:
        return "off (--no-deep-clean)"
    backend = backends.in_use()  # none imported yet: it is on, for whatever comes
    if backend is None or backend == "tensorflow":
        return "on"
    return (
        f"on, n/a ({backends.BACKEND_NAMES.get(backend, backend)} backend: it purges TensorFlow's)"
    )


def option_rows(options: RunOptions) -> list[tuple[str, str]]:
    return [
        ("clear", "on" if options.clear else "off (--no-clear)"),
        ("deep clean", _deep_clean(options)),
        ("gpu growth", {None: "as set at load", True: "on", False: "off"}[options.gpu_growth]),
        ("gpu limit", "none" if options.gpu_limit_mb is None else f"{options.gpu_limit_mb} MiB"),
        ("host limit", "none" if options.host_limit_mb is None else f"{options.host_limit_mb} MiB"),
        ("mixed precision", options.mixed_precision or "off"),
        (
            "stale models",
            "kept (--keep-stale)"
            if options.keep_stale
            else "released when only Out[n] / a History holds them",
        ),
        ("quiet", "on" if options.quiet else "off"),
    ]
