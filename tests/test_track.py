"""The plain Python API: everything the magic does, without IPython."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import keras_nbguard
from keras_nbguard.collectors.imports import when_imported
from keras_nbguard.ipython.labels import CellLabels, label_from_source
from keras_nbguard.session.core import Session, using


@pytest.fixture
def session():
    with using(Session()) as s:
        yield s


def tiny_model():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_track_measures_a_block_like_the_magic(session):
    import numpy as np

    x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
    names = []
    for _ in range(2):
        with keras_nbguard.track("script") as run:
            model = tiny_model()
            model.fit(x, y, epochs=2, batch_size=8, verbose=0)
            assert run.record is None and len(run.fits) == 1  # live while running
            names.append(model.layers[0].name)
    assert names[0] == names[1]  # cleared: each run names its layers as the last one did
    assert run.status == "ok" and run.fits[0].steps == 8 and run.run_number == 2
    assert [r.run_number for r in keras_nbguard.runs("script")] == [1, 2]
    assert keras_nbguard.runs("script")[1].cleared  # Keras imported by then
    assert keras_nbguard.runs("script")[1].previous_run == 1


def test_exceptions_are_recorded_and_re_raised(session):
    with pytest.raises(ValueError), keras_nbguard.track("bad"):
        raise ValueError("nope")
    with pytest.raises(KeyboardInterrupt), keras_nbguard.track("bad"):
        raise KeyboardInterrupt
    assert [r.status for r in keras_nbguard.runs("bad")] == ["error", "interrupted"]
    assert keras_nbguard.runs("bad")[0].error == "ValueError: nope"


def test_runs_cannot_be_nested(session):
    nested = pytest.raises(RuntimeError, match="can't be nested")
    with keras_nbguard.track("outer"), nested, keras_nbguard.track("inner"):
        pass
    assert [r.label for r in keras_nbguard.runs()] == ["outer"]


def test_configure_changes_later_runs_and_rejects_unknown_options(session):
    keras_nbguard.configure(clear=False)
    with keras_nbguard.track("noclear") as run:
        pass
    assert run.cleared is False
    with pytest.raises(TypeError, match="unknown option"):
        keras_nbguard.configure(colour="red")


def test_a_broken_collector_warns_once_and_the_block_still_runs(session, monkeypatch):
    from keras_nbguard.collectors import gpu

    def broken(self):
        raise OSError("device on fire")

    monkeypatch.setattr(gpu.GpuCollector, "end", broken)
    ran = []
    warns = pytest.warns(keras_nbguard.NbguardWarning, match="device on fire")
    with warns, keras_nbguard.track("broken") as run:
        ran.append(1)
    assert ran == [1] and run.status == "ok"
    assert run.gpu.reason == "GPU reading failed"
    assert any("reading GPU memory failed" in w for w in run.warnings)


def test_import_watch_patches_a_module_imported_inside_the_run(tmp_path, monkeypatch):
    (tmp_path / "late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    watch = when_imported("late_module", lambda m: seen.append(m.VALUE))
    try:
        import late_module
    finally:
        watch.close()
        sys.modules.pop("late_module", None)
    assert seen == [1] and watch not in sys.meta_path
    assert type(late_module.__loader__).__name__ != "_CallbackLoader"


def test_labels_are_the_first_code_line_and_stick_to_their_cell():
    body = textwrap.dedent("""
        # build
        %time pass
        model = make_model(units=1024, activation="relu", dropout=0.5)
    """)
    assert label_from_source(body) == "model = make_model(units=1024, activat…)"  # 39 + ")"
    # a statement that goes on below reads as elided, not cut at its bracket (keras.io's cells)
    assert label_from_source("model = keras.Sequential(\n    [layers.Dense(1)]\n)") == (
        "model = keras.Sequential(…)"
    )
    assert label_from_source('history = model.fit(x, {"a": [y,\n z]})') == (
        'history = model.fit(x, {"a": [y,…]})'
    )
    assert label_from_source("print('(')") == "print('(')"  # a bracket in a string is text
    labels = CellLabels()
    first = labels.label_for("a = 1\n", "cell-1")
    assert labels.label_for("a = 2  # edited\n", "cell-1") == first
    assert labels.label_for("a = 1\n", "cell-2") == "a = 1 (2)"


def test_two_watches_on_one_module_both_fire(tmp_path, monkeypatch):
    (tmp_path / "late_two.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    watches = [when_imported("late_two", lambda m, i=i: seen.append((i, m.VALUE))) for i in (1, 2)]
    try:
        import late_two  # noqa: F401
    finally:
        for watch in watches:
            watch.close()
        sys.modules.pop("late_two", None)
    assert sorted(seen) == [(1, 2), (2, 2)]


@pytest.mark.slow
def test_a_run_that_imports_keras_names_its_layers_as_the_runs_after_it():
    """Keras first imported inside a run (a notebook's first cell, all in one): its names are
    the run's, so the next run takes them again, not ``dense_2``. In a fresh interpreter: in
    this one Keras is already imported by an earlier test."""
    script = textwrap.dedent(
        """
        import os, tempfile
        os.environ["KERAS_NBGUARD_DB"] = os.path.join(tempfile.mkdtemp(), "runs.sqlite")
        import numpy as np
        import keras_nbguard
        names = []
        for _ in range(3):
            with keras_nbguard.track("first"):
                import keras
                model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
                model.compile("sgd", "mse")
                model.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0)
                names.append(model.layers[0].name)
        print("fit" in vars(keras.Model), names)  # our patch of fit gone after the runs
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False ['dense', 'dense', 'dense']"
