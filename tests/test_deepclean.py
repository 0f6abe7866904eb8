"""Deep clean with real TensorFlow (CPU): what it frees, what it must never touch."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings
import weakref
from typing import Any

import numpy as np
import pytest

from keras_nbguard.prepare.deepclean import CleanReport, DeepClean
from keras_nbguard.records.notices import NbguardWarning

X = np.random.default_rng(0).random((256, 8), dtype="float32")
Y = np.random.default_rng(1).random((256, 1), dtype="float32")
RUNS = 6  # per way; growth is read from run 3 on, after TensorFlow's one-time caches settle


def fit_model(batch_size: int = 32) -> Any:
    import keras  # here, not at import: collecting the tests must not import TensorFlow

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(X, Y, batch_size=batch_size, verbose=0)
    return model


def clear() -> None:
    import keras

    keras.utils.clear_session()
    gc.collect()


def custom_names() -> set[str]:
    from tensorflow.python.framework import ops

    return {n for n in ops._gradient_registry._registry if n.startswith("CustomGradient-")}


def tracked_fit(deep: DeepClean, batch_size: int = 32) -> tuple[Any, set[str]]:
    """One tracked run the way the Session runs it: clear, clean, mark, fit, attribute."""
    clear()
    deep.clean()
    mark = deep.run_started()
    before = custom_names()
    model = fit_model(batch_size)
    deep.run_ended(mark, [weakref.ref(model)])
    return model, custom_names() - before


def objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def per_run(counts: list[int]) -> float:
    return (counts[-1] - counts[2]) / (len(counts) - 3)


@pytest.fixture(scope="module")
def seed_loops() -> dict[str, Any]:
    """The seed loop twice: plain clear_session + gc, then with deep clean (one DeepClean)."""
    plain: list[int] = []
    for _ in range(RUNS):
        clear()
        plain.append(objects())
        fit_model()
    before_deep = custom_names()
    deep = DeepClean()
    counts: list[int] = []
    reports: list[CleanReport] = []
    for _ in range(RUNS):
        clear()
        reports.append(deep.clean())
        counts.append(objects())
        mark = deep.run_started()
        model = fit_model()
        deep.run_ended(mark, [weakref.ref(model)])
        del model
    clear()
    reports.append(deep.clean())
    return {
        "plain": plain,
        "deep": counts,
        "reports": reports,
        "before_deep": before_deep,
        "after_deep": custom_names(),
        "held": deep.held,
    }


@pytest.mark.slow
def test_deep_clean_stops_the_object_growth_that_plain_clear_leaves(seed_loops):
    plain, deep = per_run(seed_loops["plain"]), per_run(seed_loops["deep"])
    assert plain > 2000, seed_loops["plain"]  # dead train graphs, pinned by the registry
    assert abs(deep) < 50, seed_loops["deep"]
    assert abs(deep) * 40 < plain


def test_each_clean_reports_what_it_reclaimed(seed_loops):
    first, *later = seed_loops["reports"]
    assert first.available and first.entries == 0 and first.runs == 0
    for report in later:  # every later clean purges the one dead run before it
        assert report.available and report.reason is None
        assert report.runs == 1 and report.entries >= 1 and report.kept == 0
        assert report.functions is not None and report.functions > 0  # its graphs' functions
        assert report.rss_before and report.rss_after and report.seconds >= 0
    assert sum(report.rss_freed or 0 for report in later) > 0  # the dead graphs' heap, trimmed
    assert seed_loops["held"] == 0


def test_entries_from_before_deep_clean_existed_are_never_touched(seed_loops):
    assert seed_loops["before_deep"]  # the plain loop's dead runs left entries behind ...
    assert seed_loops["before_deep"] <= seed_loops["after_deep"]  # ... and they are all still there


@pytest.mark.slow
def test_a_kept_model_keeps_its_entries_and_still_trains():
    deep = DeepClean()
    kept, kept_entries = tracked_fit(deep)
    assert kept_entries
    dropped_entries = tracked_fit(deep)[1]  # the model is dropped at once
    tracked_fit(deep)  # its clean purges the run before
    clear()
    report = deep.clean()
    assert report.runs == 1 and report.kept == len(kept_entries)
    names = custom_names()
    assert kept_entries <= names and not dropped_entries & names

    # the same batch size, a new one (a retrace), and after re-compiling
    for batch_size in (32, 16):
        loss = kept.fit(X, Y, batch_size=batch_size, verbose=0).history["loss"][-1]
        assert np.isfinite(loss)
    kept.compile("adam", "mse")
    assert np.isfinite(kept.fit(X, Y, verbose=0).history["loss"][-1])

    del kept  # once the user lets it go, its run is purged like any other
    clear()
    report = deep.clean()
    assert report.runs == 1 and report.entries == len(kept_entries)
    assert not kept_entries & custom_names()


def tracked_refit(deep: DeepClean, model: Any, compile_again: bool) -> set[str]:
    """A tracked run of a model built before it (a setup cell's): compiled again or not, fit."""
    clear()
    deep.clean()
    mark = deep.run_started()
    before = custom_names()
    if compile_again:
        model.compile("adam", "mse")
    model.fit(X, Y, verbose=0)
    deep.run_ended(mark, [weakref.ref(model)])
    return custom_names() - before


@pytest.mark.slow
def test_a_kept_model_compiled_again_lets_the_earlier_compiles_entries_go(monkeypatch):
    """keras.io's fine-tuning cell, re-run: ``unfreeze_model(model)`` compiles the model the
    setup cell built, then fits. Each compile drops the step functions the last fit traced,
    but their gradient entries stayed while the model lived, holding their graphs: +33 MiB and
    40 eager functions a run on that example. Not while the model keeps those functions."""
    from tensorflow.python.eager import context

    from keras_nbguard.prepare import deepclean

    emptied: list[bool] = []  # the kernel cache emptied by a purge (its dropped kernels)
    real = deepclean.clear_kernel_cache
    monkeypatch.setattr(
        deepclean,
        "clear_kernel_cache",
        lambda **how: emptied.append(how.get("even_inside_a_clear", False)) or real(**how),
    )
    deep = DeepClean()
    model = fit_model()
    kept = tracked_refit(deep, model, compile_again=False)  # its functions from before
    assert not kept  # nothing traced anew: no entries of its own
    first = tracked_refit(deep, model, compile_again=True)
    again = tracked_refit(deep, model, compile_again=False)  # the same functions: kept
    assert first and not again and first <= custom_names()
    assert not emptied  # nothing compiled again yet: the cache stays (a kept model's kernels)
    functions = []
    for _ in range(3):
        entries = tracked_refit(deep, model, compile_again=True)
        assert entries <= custom_names()  # the live functions' own: kept
        functions.append(len(context.context().list_function_names()))
    assert not first & custom_names()  # the earlier compiles' entries went
    assert emptied and all(emptied)  # and the kernels their functions made (+0.7 MiB a run)
    assert functions[2] <= functions[0], functions  # the eager functions stopped piling up
    assert np.isfinite(model.fit(X, Y, batch_size=16, verbose=0).history["loss"][-1])


@pytest.mark.slow
def test_a_model_expected_to_go_that_survives_still_trains():
    """A run purges the entries of models its collection is expected to free (a History's link
    cut, tentative.py). One that survives it (held where the short walk did not look) has lost
    them: it must still train, on the functions it traced and on new traces."""
    deep = DeepClean()
    survivor, entries = tracked_fit(deep)
    assert entries
    clear()
    purge = deep.purge(frozenset({id(survivor)}))
    gc.collect()
    deep.report(purge)
    assert purge.entries == len(entries) and not entries & custom_names()
    for batch_size in (32, 16):  # its traced train function, then a retrace
        loss = survivor.fit(X, Y, batch_size=batch_size, verbose=0).history["loss"][-1]
        assert np.isfinite(loss)
    survivor.compile("adam", "mse")
    assert np.isfinite(survivor.fit(X, Y, verbose=0).history["loss"][-1])


def test_entries_made_outside_tracked_runs_or_without_a_model_are_kept():
    deep = DeepClean()
    before = custom_names()
    fit_model()  # between runs: not ours
    outside = custom_names() - before
    mark = deep.run_started()
    fit_model()
    deep.run_ended(mark, [])  # a run that fit no model we know of: no owner to watch
    unowned = custom_names() - before - outside
    clear()
    report = deep.clean()
    assert report.entries == 0 and report.kept == len(unowned)
    assert outside and unowned and (outside | unowned) <= custom_names()


@pytest.mark.slow
def test_a_users_own_custom_gradient_is_never_purged():
    """Deleting it would break a kept tf.function the first time it is differentiated."""
    import tensorflow as tf

    @tf.custom_gradient
    def clip(v: Any) -> Any:
        return tf.identity(v), lambda dy: tf.clip_by_value(dy, -0.5, 0.5)

    @tf.function
    def scaled(v: Any) -> Any:
        return clip(v) * 3.0

    deep = DeepClean()
    clear()
    mark = deep.run_started()
    before = custom_names()
    model = fit_model()
    scaled(tf.constant(2.0))  # traced in the run, kept by the user; the run's model then dies
    deep.run_ended(mark, [weakref.ref(model)])
    added = custom_names() - before
    del model
    clear()
    report = deep.clean()
    assert report.entries == len(added) - 1 and deep.protected == 1
    assert len(added & custom_names()) == 1
    v = tf.constant(2.0)  # the traced signature: no retrace, the gradient is built from the trace
    with tf.GradientTape() as tape:
        tape.watch(v)
        out = scaled(v)
    assert float(tape.gradient(out, v)) == 0.5  # dy = 3, clipped by its own gradient function


def test_an_entry_of_unknown_shape_disables_deep_clean(monkeypatch):
    from tensorflow.python.framework import ops

    messages: list[str] = []
    deep = DeepClean(warn=messages.append)
    mark = deep.run_started()
    monkeypatch.setitem(
        ops._gradient_registry._registry,
        "CustomGradient-999999999",
        {"type": lambda op, *grads: grads, "location": None},
    )
    deep.run_ended(mark, [])
    assert not deep.available and "tape_grad_fn" in (deep.reason or "")
    assert len(messages) == 1 and not deep.clean().available


def test_an_unknown_layout_disables_deep_clean_with_one_warning(monkeypatch):
    from tensorflow.python.framework import ops

    monkeypatch.delattr(ops, "_gradient_registry")
    with pytest.warns(NbguardWarning, match="deep clean unavailable: .*_gradient_registry"):
        deep = DeepClean()
    assert not deep.available and "_gradient_registry" in (deep.reason or "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning, and no exception
        deep.run_ended(deep.run_started(), [])
        report = deep.clean()
    assert not report.available and report.reason == deep.reason and report.entries == 0


def test_a_layout_that_changes_later_is_caught_by_clean(monkeypatch):
    from tensorflow.python.framework import ops

    messages: list[str] = []
    deep = DeepClean(warn=messages.append)
    assert deep.available
    monkeypatch.setattr(ops._gradient_registry, "_registry", [])
    first, second = deep.clean(), deep.clean()
    assert not first.available and not second.available and "list" in (first.reason or "")
    assert len(messages) == 1 and messages[0].startswith("deep clean unavailable")


def test_without_tensorflow_there_is_nothing_to_clean_and_nothing_is_imported():
    code = textwrap.dedent("""
        import sys
        from keras_nbguard.prepare.deepclean import DeepClean
        deep = DeepClean()
        deep.run_ended(deep.run_started(), [])
        report = deep.clean()
        assert not report.available and report.functions is None, report  # reads "n/a (...)"
        assert report.reason == "TensorFlow is not imported", report
        assert "tensorflow" not in sys.modules and "keras" not in sys.modules
    """)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_a_runs_clear_keeps_tensorflows_kernel_cache_and_every_other_clear_empties_it(
    keras_shell, monkeypatch
):
    # A model kept across runs (keras.io's text generation) instantiated its functions anew at
    # each run's fit once the cache was emptied: +200-270 ms a fit. The run's clear keeps it;
    # the user's own clear_session, the button and free() still empty it.
    from helpers import run
    from tensorflow.python.eager import context

    from keras_nbguard import free
    from keras_nbguard.prepare.actions import clear_keras_session

    emptied: list[str] = []
    real = context.Context.clear_kernel_cache
    monkeypatch.setattr(
        context.Context, "clear_kernel_cache", lambda self: emptied.append("x") or real(self)
    )
    cell = "%%kerasrun --quiet --label kc\nmodel = make_model()\nmodel.fit(x, y, verbose=0)\n"
    assert run(keras_shell, cell).success  # (one whose clear starts TensorFlow may empty it)
    emptied.clear()
    assert run(keras_shell, cell).success and run(keras_shell, cell).success
    assert emptied == []  # both runs cleared the session, neither emptied the cache
    assert "clear_kernel_cache" not in vars(context.context())  # nothing of ours left on it
    user = "%%kerasrun --quiet --label kc\nkeras.utils.clear_session()\n"
    assert run(keras_shell, user).success and emptied == ["x"]  # the user's own, in a run
    clear_keras_session()
    free()
    assert len(emptied) >= 3
