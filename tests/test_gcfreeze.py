"""The frameworks' objects frozen out of gc's scans (gcfreeze.py), each case in a fresh
interpreter: what is frozen depends on what was imported before, which a test process can't undo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

PRELUDE = """
import gc, json, os, sys, weakref
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["KERAS_NBGUARD_DB"] = ":memory:"
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
def cell(source):
    result = shell.run_cell(source, store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec
MODEL = '''
def make_model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
x = np.zeros((64, 4), "float32"); y = np.zeros((64, 1), "float32")
'''
"""


def in_fresh_python(body: str) -> dict:
    code = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_NBGUARD_GC_FREEZE", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_frameworks_frozen_at_import_and_models_never():
    out = in_fresh_python("""
        cell("%load_ext keras_nbguard")
        cell("import numpy as np\\nimport keras\\n" + MODEL)  # the import and a setup together
        import keras_nbguard.session.core as s
        session = s.get_session()
        cell("model = make_model()\\nmodel.fit(x, y, verbose=0)\\nold = model")
        ref = weakref.ref(shell.user_ns["model"])
        cell("del model, old")
        gc.collect()  # one collection, as a run makes: the model sits in reference cycles
        cell("%%kerasrun --quiet --label m\\nmodel = make_model()\\nmodel.fit(x, y, verbose=0)")
        print(json.dumps({
            "frozen": [name for name, count, _ in session.frozen.frozen if count],
            "described": session.frozen.describe(),
            "dead_model_freed": ref() is None,
            "leak_paths": [list(leak.paths) for leak in __import__("keras_nbguard").leaks().leaks],
        }))
        """)
    assert "keras" in out["frozen"] or "tensorflow" in out["frozen"], out
    assert "frozen out of gc" in out["described"]
    # one total, as each import ended: per framework, "jax (334,455 objects)" read as jax's own
    # on a TensorFlow kernel (TensorFlow imports jax itself)
    assert "all the kernel held as each framework's import ended (" in out["described"]
    assert out["dead_model_freed"]  # nothing the user built was frozen
    # the namespace and Out (older than the import, so frozen) are still found as holders
    paths = [path for paths in out["leak_paths"] for path in paths]
    assert "model" in paths and any(p.startswith("Out[") for p in paths), paths


def test_a_run_collects_once_and_never_in_clear_session():
    out = in_fresh_python("""
        cell("%load_ext keras_nbguard")
        cell("import numpy as np\\nimport keras\\n" + MODEL)
        run = "%%kerasrun --quiet --label m\\nmodel = make_model()\\nmodel.fit(x, y, verbose=0)"
        for _ in range(3):
            cell(run)
        calls = []
        collect = gc.collect
        def counting(*args, **kwargs):
            calls.append(args)
            return collect(*args, **kwargs)
        gc.collect = counting  # keras' clear_session and ours look it up on the module
        cell(run)
        gc.collect = collect
        record = __import__("keras_nbguard").runs("m")[-1]
        print(json.dumps({"collections": len(calls), "own": [p for p, _ in record.own_time],
                          "released": list(record.released_models.paths)
                          if record.released_models else []}))
        """)
    # one, after the release and the purge (the keras.io cell's History loses its model each
    # run, and its run's entries go with it); Keras' own clear_session collects no more
    assert out["collections"] == 1, out
    assert out["own"], out  # the summary's "ours" has its parts
    # the frozen Out still gives up the last run's History (and its model) before the run
    assert any(path.startswith("Out[") for path in out["released"]), out


def test_not_frozen_when_models_exist_before_the_extension():
    out = in_fresh_python("""
        cell("import numpy as np\\nimport keras\\n" + MODEL + "\\nkept = make_model()")
        cell("%load_ext keras_nbguard")
        import keras_nbguard.session.core as s
        frozen = s.get_session().frozen
        print(json.dumps({"frozen": frozen.frozen, "described": frozen.describe(),
                          "count": gc.get_freeze_count()}))
        """)
    assert out["frozen"] == [] and out["count"] == 0
    assert "Keras objects existed" in out["described"]


def test_off_by_environment():
    out = in_fresh_python("""
        os.environ["KERAS_NBGUARD_GC_FREEZE"] = "0"
        cell("%load_ext keras_nbguard")
        cell("import keras")
        import keras_nbguard.session.core as s
        print(json.dumps({"count": gc.get_freeze_count(),
                          "described": s.get_session().frozen.describe()}))
        """)
    assert out["count"] == 0 and "KERAS_NBGUARD_GC_FREEZE=0" in out["described"]
