"""A clear makes TensorFlow forget how often the functions of earlier runs traced.

TensorFlow warns "5 out of the last 5 calls to <function ...multi_step_on_iterator> triggered
tf.function retracing" when most recent calls of one function traced, counted per Python code
object across every tf.function made from it (``_key_for_call_stats``). Each run of a re-run
cell builds a new model whose train and predict steps are made from Keras' same code, and each
traces once, on its first call: from the fifth run on, the warning comes, although nothing
retraces within a run (a small fit cell under the magic: 4 warnings in 8 runs). After a clear
the count starts anew, as the session does: retracing within a run is still warned of by
TensorFlow, and named by the run's ``traces`` row and its ``retracing`` finding.

TensorFlow's private layout is read from ``sys.modules`` (never imported): where it is not what
we expect, nothing is forgotten and nothing else changes.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any

DETECTOR_MODULE = "tensorflow.python.eager.polymorphic_function.polymorphic_function"


def forget_recent_traces() -> bool:
    """Drop TensorFlow's per-function counts of recent traces; whether there were any to drop."""
    manager = getattr(sys.modules.get(DETECTOR_MODULE), "_frequent_tracing_detector_manager", None)
    detectors: Any = getattr(manager, "_detectors", None)
    lock = getattr(manager, "_lock", None)
    if lock is None or not isinstance(detectors, MutableMapping):
        return False
    with lock:  # TensorFlow counts under it, from any thread
        held = bool(len(detectors))
        detectors.clear()
    return held
