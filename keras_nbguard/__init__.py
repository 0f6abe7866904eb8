"""keras_nbguard: why your fifth Keras run is slower and fatter than the first, in numbers.

``%load_ext keras_nbguard`` registers ``%%kerasrun`` and ``%nbguard``; everything they do is also
a plain Python call (``track``, ``runs``, ``configure``). Importing this package costs only the
stdlib and psutil: TensorFlow, Keras and NVML are never imported here.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

from .records import FitRecord, GpuReading, RunRecord
from .session import NbguardWarning, Session, get_session

__all__ = [
    "FitRecord",
    "GpuReading",
    "NbguardWarning",
    "RunRecord",
    "Session",
    "__version__",
    "configure",
    "get_session",
    "runs",
    "track",
]


def track(label: str, **options: Any) -> Any:
    """Context manager: prepare and measure a block like ``%%kerasrun`` does a cell.

    ``with keras_nbguard.track("mlp") as run: model.fit(...)`` — afterwards ``run.record`` (and
    ``run.fit_seconds`` etc.) hold the RunRecord. Options: clear, gpu_growth, gpu_limit_mb,
    mixed_precision.
    """
    return get_session().track(label, **options)


def runs(label: str | None = None) -> list[RunRecord]:
    """This kernel's RunRecords, oldest first (only ``label``'s when given)."""
    return get_session().runs(label)


def configure(**options: Any) -> Any:
    """Change the defaults of later runs (clear, gpu_growth, gpu_limit_mb, mixed_precision,
    quiet)."""
    return get_session().configure(**options)


def load_ipython_extension(ipython: Any) -> None:
    from .magic import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magic import unload

    unload(ipython)
