"""What ``%nbguard status`` and ``%nbguard config`` show: the configuration, GPU setup, the runs
so far, RSS now and where the history is kept, as (name, value) rows."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from . import __version__, gpu_setup
from .collectors.gpu import TfGpu
from .formatting import fmt_bytes
from .prepare import RunOptions

if TYPE_CHECKING:
    from .session import Session
    from .store import Store


def history_db_row(store: Store | None) -> tuple[str, str]:
    if store is None:
        return ("history db", "off")
    return ("history db", "in memory (not kept)" if store.in_memory else store.path)


def status_rows(session: Session) -> list[tuple[str, str]]:
    import psutil

    tf = TfGpu.if_imported()
    if tf is None:
        gpu = (
            f"TensorFlow not imported yet; {gpu_setup.GROWTH_ENV}="
            f"{os.environ.get(gpu_setup.GROWTH_ENV, 'unset')}"
        )
    else:
        try:
            gpus = tf.gpus()
            gpu = (
                f"{len(gpus)} GPU(s); initialized: {tf.runtime_initialized()}"
                if gpus
                else "TensorFlow sees no GPU"
            )
        except Exception as exc:
            gpu = f"n/a ({exc})"
    return [
        ("version", __version__),
        ("runs", str(len(session.history))),
        ("running", session.current.label if session.current else "nothing"),
        ("rss now", fmt_bytes(psutil.Process().memory_info().rss)),
        ("keras imported", str("keras" in sys.modules)),
        ("gpu", gpu),
        *option_rows(session.options),
        history_db_row(session.store),
    ]


def option_rows(options: RunOptions) -> list[tuple[str, str]]:
    return [
        ("clear", "on" if options.clear else "off (--no-clear)"),
        ("deep clean", "on" if options.deep_clean else "off (--no-deep-clean)"),
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
