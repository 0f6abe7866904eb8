"""Live Keras models, every path that holds them, and the run that made each one.

Holders are found by walking *up* from the models (walk.py) until each chain reaches a root the
user can name (roots.py); the chain then reads as the user would type it (naming.py): ``model``,
``models[3]``, ``results["run2"]["model"]``, ``trainer.best``, ``Out[7].model``, ``_7.model``,
``history.model``. Other forms:

- closures ``cb.__closure__[0].cell_contents`` (``Leak.holder`` names ``make_cb.<locals>.cb`` and
  the variable); default arguments ``f.__defaults__[0]``, ``f.__kwdefaults__["m"]``;
- tracebacks ``sys.last_traceback.tb_next.tb_frame.f_locals["model"]``;
- set members ``s{…}`` (a set can't be indexed); past a link no expression reaches, words;
- a model in another model's attribute ``outer.blocks[0]``; a running frame
  ``<frame train>.f_locals["m"]``. Keras' own nesting (``Sequential._functional``) isn't reported.

Nothing here imports Keras: ``sys.modules`` says whether any model can exist (frameworks.py).
Which run made a model comes from registry.py; the results are records.py's, built by report.py.
"""

from __future__ import annotations

# The names ``keras_nbguard.models`` offered when it was one module, so every import keeps working.
from keras_nbguard.models.frameworks import FRAMEWORKS, current_shell, model_classes
from keras_nbguard.models.naming import Chain, Edge, Root
from keras_nbguard.models.records import UNREACHABLE_HINT, Leak, LeakReport
from keras_nbguard.models.registry import CreationWatch, ModelRegistry, RunRef
from keras_nbguard.models.report import build_report, find_leaks, leaks_of, sizes
from keras_nbguard.models.walk import Probe

__all__ = [
    "FRAMEWORKS",
    "UNREACHABLE_HINT",
    "Chain",
    "CreationWatch",
    "Edge",
    "Leak",
    "LeakReport",
    "ModelRegistry",
    "Probe",
    "Root",
    "RunRef",
    "build_report",
    "current_shell",
    "find_leaks",
    "leaks_of",
    "model_classes",
    "sizes",
]
