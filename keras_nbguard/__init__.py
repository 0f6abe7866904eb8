"""keras_nbguard: why your fifth Keras run is slower and fatter than the first, in numbers.

``%load_ext keras_nbguard`` registers ``%%kerasrun`` and ``%nbguard``; everything they do is also
a plain Python call (``track``, ``runs``, ``configure``). Importing this package costs only the
stdlib and psutil: TensorFlow, Keras and NVML are never imported here.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from keras_nbguard._version import __version__
from keras_nbguard.advisor.batch_advisor import BatchAdvice, batch_advice
from keras_nbguard.records.calls import FitRecord, InferenceRecord
from keras_nbguard.records.notices import NbguardWarning
from keras_nbguard.records.run import CleanReport, GpuReading, RunRecord
from keras_nbguard.session.core import Session, get_session

if TYPE_CHECKING:  # loaded with the first run or call, to keep %load_ext cheap
    from keras_nbguard.board.widget import Dashboard
    from keras_nbguard.diagnosis.diagnose import Findings
    from keras_nbguard.models import LeakReport
    from keras_nbguard.models.freeing import FreeReport
    from keras_nbguard.records.options import RunOptions
    from keras_nbguard.run.tracking import Run

# No submodule may have one of these names: importing it would replace the function (the
# modules are named for what they do: exporting, freeing, tracking; tests/test_api_faults.py).
__all__ = [
    "BatchAdvice",
    "CleanReport",
    "FitRecord",
    "FreeReport",
    "GpuReading",
    "InferenceRecord",
    "Leak",
    "LeakReport",
    "NbguardWarning",
    "RunRecord",
    "Session",
    "__version__",
    "batch_advice",
    "configure",
    "dashboard",
    "diagnose",
    "export",
    "free",
    "get_session",
    "leaks",
    "runs",
    "runs_frame",
    "track",
]


def track(label: str, **options: Any) -> AbstractContextManager[Run]:
    """Context manager: prepare and measure a block like ``%%kerasrun`` does a cell.

    ``with keras_nbguard.track("mlp") as run: model.fit(...)`` — afterwards ``run.record`` (and
    ``run.fit_seconds`` etc.) hold the RunRecord. Options: those of ``configure``, for this
    block only (checked the same way).
    """
    return get_session().track(label, **options)


def runs(label: str | None = None, this_kernel: bool = False) -> list[RunRecord]:
    """This notebook's RunRecords across kernel restarts, oldest first (``label``'s only when
    given; this kernel's only with ``this_kernel``)."""
    return get_session().runs(label, this_kernel)


def runs_frame(label: str | None = None, this_kernel: bool = False) -> Any:
    """``runs()`` as a pandas DataFrame, one row per run (needs pandas)."""
    from keras_nbguard.store.exporting import runs_frame as frame

    return frame(runs(label, this_kernel))


def export(
    path: str, label: str | None = None, this_kernel: bool = False, *, force: bool = False
) -> int:
    """Write ``runs()`` to the new file ``path``, CSV or JSON by its ending (``.csv``,
    ``.json``); returns the number of runs written.

    An existing file is replaced only with ``force=True``; a notebook or a SQLite database (the
    run history) never. ``ValueError`` says why a file was not written."""
    from keras_nbguard.store.exporting import write_runs

    session = get_session()
    return write_runs(
        session.runs(label, this_kernel), path, force=force, protected=session.protected_paths()
    )


def diagnose(label: str | None = None) -> Findings:
    """Why runs got slower or fatter, in words: findings with the number behind each and one
    thing to do, most important first (this kernel's runs since the last reset)."""
    return get_session().diagnose(label)


def leaks() -> LeakReport:
    """Every live Keras model, with the paths that hold it; stale ones flagged. Garbage is
    collected first: a model a cell rebound is not listed for waiting on the collector."""
    return get_session().leaks(collect=True)


def free(*, include_current: bool = False, containers: bool = False) -> FreeReport:
    """Drop references to stale models (current ones too with ``include_current``), then clear."""
    return get_session().free(include_current=include_current, containers=containers)


def dashboard(session: Session | None = None, *, mode: str | None = None) -> Dashboard:
    """The kernel's live dashboard (made on first call, the same widget after): display it, or
    end a cell with it. ``mode`` "widget" or "static" overrides the frontend detection."""
    from keras_nbguard.board.kernel_board import (
        dashboard as kernel_dashboard,  # ipywidgets and plotly: on first use
    )

    return kernel_dashboard(session, mode=mode)


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("Leak", "LeakReport"):  # the leak finder loads with the first run, not at load
        return getattr(importlib.import_module(f"{__name__}.models"), name)
    if name == "FreeReport":
        from keras_nbguard.models.freeing import FreeReport

        return FreeReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def configure(**options: Any) -> RunOptions:
    """Change the defaults of later runs, checked as ``%nbguard config`` checks them:

    clear, deep_clean, quiet, keep_stale (True/False); gpu_growth (True/False/None);
    gpu_limit_mb, host_limit_mb (a positive whole number of MiB, None: no limit);
    mixed_precision ("mixed_float16", "mixed_bfloat16" — "float16"/"bfloat16" mean those —
    "float32", or None). A wrong value raises ``ValueError`` and changes nothing; an unknown
    name ``TypeError``."""
    return get_session().configure(**options)


def load_ipython_extension(ipython: Any) -> None:
    from keras_nbguard.ipython.magic import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from keras_nbguard.ipython.magic import unload

    unload(ipython)
