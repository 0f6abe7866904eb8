"""Earlier runs' models released from IPython's caches and Keras' History, never from the user's
own holders; the rest flagged under the cell. A real shell, real Keras, the cells users write."""

from __future__ import annotations

import gc
import weakref

import pytest
from helpers import run

import keras_nbguard
from keras_nbguard.records.run import RunRecord

pytestmark = pytest.mark.usefixtures("unhurried_walk")  # conftest: under load

FIT = "model.fit(x, y, epochs=1, verbose=0)"
KERAS_IO = f"%%kerasrun --label io --quiet\nmodel = make_model()\n{FIT}\n"


def rerun(shell, cell: str, times: int) -> list[weakref.ref]:
    """Run ``cell`` ``times`` times; a weak reference to each run's ``model``."""
    refs = []
    for _ in range(times):
        result = run(shell, cell)
        assert result.success, result.error_in_exec
        refs.append(weakref.ref(shell.user_ns["model"]))
    return refs


def alive(refs: list[weakref.ref]) -> list[bool]:
    gc.collect()
    return [ref() is not None for ref in refs]


def last(label: str) -> RunRecord:
    return keras_nbguard.runs(label)[-1]


@pytest.mark.slow
def test_a_cell_ending_in_fit_keeps_only_the_latest_model(keras_shell):
    refs = rerun(keras_shell, KERAS_IO, 4)
    out = keras_shell.user_ns["Out"]
    histories = [out[n] for n in sorted(out)][-4:]
    assert alive(refs) == [False, False, False, True]
    # each History keeps its metrics; only the latest one (the current run's) keeps its model
    assert all(len(h.history["loss"]) == 1 and h.epoch == [0] and h.params for h in histories)
    assert [h.model is None for h in histories] == [True, True, True, False]
    assert histories[-1].model is keras_shell.user_ns["model"]
    # after a run, the links to the run before's model are cut, and the run says so: run 4
    # released run 3's model (the next run's one collection frees it), as a run whose release
    # took the heap walk says it; run 2's, said by run 3, is not said again
    released = last("io").released_models
    assert released.count == 1 and released.runs == (3,)
    assert released.paths == (f"Out[{sorted(out)[-2]}] (its History)",)
    assert released.weight_bytes > 0 and last("io").stale_models is None
    # its Adam's state went with it (two slots a weight): said beside the weights (a GAN's
    # released row read "0 B weights" where its two Adams held 10.8 MiB)
    assert released.optimizer_bytes >= 2 * released.weight_bytes


@pytest.mark.slow
def test_histories_kept_in_a_list_keep_their_metrics_and_lose_only_the_model(keras_shell):
    run(keras_shell, "histories = []")
    cell = "%%kerasrun --label kept --quiet\nmodel = make_model()\nhistories.append(" + FIT + ")"
    refs = rerun(keras_shell, cell, 3)
    histories = keras_shell.user_ns["histories"]
    assert alive(refs) == [False, False, True]
    assert [len(h.history["loss"]) for h in histories] == [1, 1, 1]
    assert [h.model is None for h in histories] == [True, True, False]
    # run 3 released run 2's model (run 1's was said by run 2)
    assert last("kept").released_models.paths == ("histories[1] (its History)",)


HOLDERS = {
    "name": ("pass", "if 'first' not in globals(): first = model", "first"),
    "list": ("keep = []", "keep.append(model)", "keep[0]"),
    "dict": ("keep = {}", "keep[len(keep)] = model", "keep[0]"),
    "attribute": (
        "class Box: pass\nbox = Box()",
        "setattr(box, f'm{len(vars(box))}', model)",
        "box.m0",
    ),
    "closure": (
        "keep = []",
        "keep.append((lambda m: lambda: m)(model))",
        "keep[0].__closure__[0].cell_contents",
    ),
    "default": ("keep = []", "keep.append(lambda m=model: m)", "keep[0].__defaults__[0]"),
}


@pytest.mark.slow
@pytest.mark.parametrize("holder", HOLDERS)
def test_a_model_the_user_holds_is_never_released_but_flagged(keras_shell, holder):
    setup, hold, path = HOLDERS[holder]
    run(keras_shell, setup)
    cell = f"%%kerasrun --label {holder} --quiet\nmodel = make_model()\n{hold}\n{FIT}\n"
    refs = rerun(keras_shell, cell, 3)
    out = keras_shell.user_ns["Out"]
    first_history = out[sorted(out)[-3]]
    assert alive(refs)[0] and first_history.model is refs[0]()  # also in Out: untouched
    stale = last(holder).stale_models
    assert stale is not None and 1 in stale.runs and path in stale.paths
    want = "%nbguard free" if holder == "name" else "%nbguard free --containers"
    assert stale.command == want
    assert refs[0]().predict(keras_shell.user_ns["x"][:2], verbose=0).shape == (2, 1)


@pytest.mark.slow
def test_a_model_held_beyond_the_short_walk_gets_its_link_back_and_is_named(keras_shell):
    """The short walk meets run 1's model only through its History in ``Out[n]``, but the user
    holds it too, deeper than that walk looks (tentative.py): run 2 cuts the link and says so;
    run 3's collection does not free it, so the link comes back and the full walk names the
    holder on run 3's `stale` line. The model still works."""
    run(keras_shell, "deep = []")
    nest = "[" * 8 + "model" + "]" * 8  # eight lists down: past the short walk's depth
    cell = (
        f"%%kerasrun --label deep --quiet\nmodel = make_model()\n"
        f"if not deep: deep.append({nest})\n{FIT}\n"
    )
    refs = rerun(keras_shell, cell, 3)
    out = keras_shell.user_ns["Out"]
    first_history = out[sorted(out)[-3]]
    records = keras_nbguard.runs("deep")
    assert records[1].released_models.runs == (1,)  # run 2 let it go: said as the cut was made
    assert alive(refs) == [True, False, True]
    assert first_history.model is refs[0]()  # its link back
    stale = records[2].stale_models
    assert stale is not None and stale.runs == (1,)
    assert stale.paths[0].startswith("deep[0][0]"), stale.paths
    assert records[2].released_models.runs == (2,)  # the run before's, as usual
    assert refs[0]().predict(keras_shell.user_ns["x"][:2], verbose=0).shape == (2, 1)


@pytest.mark.slow
def test_keep_stale_keeps_everything_and_config_sets_it(keras_shell):
    refs = rerun(keras_shell, KERAS_IO.replace("--quiet", "--quiet --keep-stale"), 3)
    assert alive(refs) == [True, True, True] and last("io").released_models is None
    assert len(last("io").stale_models.paths) >= 2  # both earlier ones, flagged with paths
    keras_shell.run_line_magic("nbguard", "config --keep-stale")
    refs += rerun(keras_shell, KERAS_IO, 1)
    assert all(alive(refs))
    keras_shell.run_line_magic("nbguard", "config --release-stale")
    refs += rerun(keras_shell, KERAS_IO, 1)
    assert alive(refs) == [False, False, False, False, True]
    # three went with the run's collection; the fourth, the model your name bound as it began,
    # lost its History's link after the run, and the run says so too (alive() collected it; so
    # would the next run)
    assert last("io").released_models.count == 4


@pytest.mark.slow
def test_a_model_still_training_in_another_thread_is_never_touched(keras_shell):
    rerun(keras_shell, KERAS_IO, 1)
    run(
        keras_shell,
        """
import threading
started, stop = threading.Event(), threading.Event()
class Hold(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        started.set()
        stop.wait(60)
trainer = threading.Thread(target=lambda m: m.fit(x, y, epochs=2, verbose=0, callbacks=[Hold()]),
                           args=(model,))
trainer.start()
started.wait(60)
del model
""",
    )
    training = keras_shell.user_ns["trainer"]
    ref = weakref.ref(keras_shell.user_ns["Out"][max(keras_shell.user_ns["Out"])].model)
    try:
        rerun(keras_shell, KERAS_IO, 1)  # before and after it: the model is in a running fit
        assert alive([ref]) == [True] and training.is_alive()
        assert last("io").released_models is None
        assert last("io").stale_models.count == 1, last("io").stale_models
    finally:
        keras_shell.user_ns["stop"].set()
        training.join(60)
    assert not training.is_alive()


@pytest.mark.slow
def test_the_summary_says_what_was_released_and_what_is_still_alive(keras_shell):
    run(keras_shell, "keep = []")
    cell = KERAS_IO.replace("--quiet\n", "\n").replace(FIT, f"keep.append(model)\n{FIT}")
    rerun(keras_shell, cell, 2)
    rerun(keras_shell, KERAS_IO, 2)
    rows = dict(last("io").summary_rows())
    assert rows["stale"].startswith("2 models from #1, #2 still alive (1.3 KiB weights + ")
    assert (  # their Adams' state goes with them too: said, as the dashboard says it
        " optimizer, graphs not counted): keep[0], keep[1] — %nbguard free --containers"
        in (rows["stale"])
    )
    assert rows["released"].startswith("1 model from #3 held by Out[")
    assert "(its History): " in rows["released"] and "644 B weights" in rows["released"]
    bundle = last("io").summary_bundle()
    assert "keep[0], keep[1] — %nbguard free --containers" in bundle["text/html"]
    assert "released     1 model from #3" in bundle["text/plain"]


@pytest.mark.slow
def test_a_stale_models_size_says_what_freeing_it_frees(keras_shell):
    """JupyterLab, keras.io's knowledge distillation with `kept = distiller`: the summary said
    `stale 1 model from #5 still alive (5.5 MiB weights, …)` where those were the setup's
    teacher, which the current Distiller holds too, and left out the 11.1 MiB of optimizer state
    that freeing it does free (the dashboard said both)."""
    run(keras_shell, "teacher = keras.Sequential([keras.Input((8,)), keras.layers.Dense(256)])")
    cell = (
        "%%kerasrun --label kd --quiet\n"
        "model = keras.Sequential([teacher, keras.layers.Dense(1)])\n"
        "model.compile('adam', 'mse')\n"
        f"{FIT}\n"
    )
    rerun(keras_shell, cell, 1)
    run(keras_shell, "kept = model")
    rerun(keras_shell, cell, 1)
    stale = last("kd").stale_models
    teacher_bytes = (8 * 256 + 256) * 4
    assert stale.weight_bytes == teacher_bytes + (256 + 1) * 4
    assert stale.weights_shared == teacher_bytes  # the current model's too
    assert stale.optimizer_bytes > 2 * stale.weight_bytes  # Adam's two moments, kept's own
    row = dict(last("kd").summary_rows())["stale"]
    assert row.startswith(
        "1 model from #1 still alive (10.0 KiB weights (9.0 KiB of them in other live models "
        "too) + "
    ), row
    # what the command does to your name is said before you run it
    assert " optimizer, graphs not counted): kept — %nbguard free (it deletes kept)" in row
    # the dashboard's findings say it as the summary does (they said "10.0 KiB weights, graphs
    # not counted" beside it)
    (finding,) = [f for f in keras_nbguard.diagnose("kd") if f.kind == "stale_models"]
    assert row.split(" still alive ")[1].split(": kept")[0] in finding.message


STOP_AT_BATCH_3 = """
import signal
class StopAt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 3:
            signal.raise_signal(signal.SIGINT)  # the stop button, mid-fit
"""


@pytest.mark.slow
def test_a_fit_stopped_midway_is_released_as_the_last_traceback_not_its_callbacks(keras_shell):
    """Trained on in a plain cell and stopped there, a run's model is held by that cell's
    traceback, whose frames hold the fit's callbacks, each with the model: the released line
    named each callback's link (``sys.last_traceback.tb_next…f_locals["kwargs"]["callbacks"][0]
    (its StopAt)``) instead of the one thing that let go, the traceback."""
    run(keras_shell, STOP_AT_BATCH_3)
    first = rerun(keras_shell, KERAS_IO, 1)
    stopped = run(keras_shell, "model.fit(x, y, epochs=3, verbose=0, callbacks=[StopAt()])")
    assert isinstance(stopped.error_in_exec, KeyboardInterrupt)
    later = rerun(keras_shell, KERAS_IO, 1)
    assert alive([*first, *later]) == [False, True]
    released = last("io").released_models
    assert released.runs == (1,) and "the last traceback" in released.paths
    assert not any("tb_next" in path for path in released.paths)


@pytest.mark.slow
def test_a_stopped_runs_model_that_your_name_still_binds_is_not_said_released(keras_shell):
    """A run stopped mid-fit, then run again: as the re-run began, ``model`` still named the
    stopped run's model (the cell rebinds it only as it runs). The walk's chain cap filled with
    the traceback's frames first, ``model`` went unseen, and the run said ``released 1 model
    from #2 held by the last traceback: 0 B weights`` of a model your name held."""
    run(keras_shell, STOP_AT_BATCH_3)
    cell = KERAS_IO.replace("--label io", "--label stop").replace(FIT, "{fit}")
    rerun(keras_shell, cell.format(fit=FIT), 1)
    stopped = run(keras_shell, cell.format(fit=FIT.replace(")", ", callbacks=[StopAt()])")))
    assert isinstance(stopped.error_in_exec, KeyboardInterrupt)
    held = weakref.ref(keras_shell.user_ns["model"])
    later = rerun(keras_shell, cell.format(fit=FIT), 1)
    assert last("stop").released_models is None, last("stop").released_models
    assert alive([held, *later]) == [False, True]  # the re-run's name let it go, and the clear


@pytest.mark.slow
def test_a_reset_and_a_new_kernel_never_make_the_latest_model_stale(keras_shell, tmp_path):
    session = keras_nbguard.get_session()
    rerun(keras_shell, KERAS_IO, 3)
    session.perform("reset_history")
    rerun(keras_shell, KERAS_IO, 1)
    keras_shell.run_line_magic("reload_ext", "keras_nbguard")  # a new session: earlier runs
    rerun(keras_shell, KERAS_IO, 1)  # from the database, the hidden ones among them
    assert last("io").run_number == 5  # numbers never repeat (recency: test_probes)
    report = keras_shell.run_line_magic("nbguard", "leaks")
    current = [leak for leak in report.leaks if "model" in leak.paths]
    assert len(current) == 1 and not current[0].stale
    freed = keras_shell.run_line_magic("nbguard", "free")
    assert "model" in keras_shell.user_ns  # the current model is kept
    assert not [leak for leak in freed.freed if "model" in leak.paths]


@pytest.mark.slow
def test_free_deep_cleans_at_once_and_shows_the_rss_drop(keras_shell):
    run(keras_shell, "keep = []")
    cell = (
        "%%kerasrun --label big --quiet\nmodel = keras.Sequential([keras.Input((8,)), "
        "keras.layers.Dense(3000), keras.layers.Dense(3000), keras.layers.Dense(1)])\n"
        "model.compile('adam', 'mse')\nkeep.append(model)\n" + FIT
    )
    rerun(keras_shell, cell, 2)
    report = keras_shell.run_line_magic("nbguard", "free --containers")
    assert len(report.freed) == 1 and report.deep_clean is not None
    assert report.deep_clean.entries > 0  # the freed run's graphs went now, not at the next run
    # 9M weights + 18M adam slots, float32: ~100 MiB
    assert report.rss_freed > 50 * 2**20, report.lines()
    assert "deep clean: " in "\n".join(report.lines())


@pytest.mark.slow
def test_a_custom_training_loop_is_deep_cleaned_once_its_models_are_gone(keras_shell):
    from tensorflow.python.framework import ops

    from keras_nbguard.prepare.deepclean import _gradient_origin, _library_dirs

    run(
        keras_shell,
        """
import tensorflow as tf
@tf.custom_gradient
def halve_grad(v):
    return tf.identity(v), lambda dy: dy * 0.5
""",
    )
    loop = """%%kerasrun --label loop --quiet
model = make_model()
opt = keras.optimizers.Adam()
@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = keras.ops.mean((halve_grad(model(xb, training=True)) - yb) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss
for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):
    train_step(xb, yb)
"""
    registry = ops._gradient_registry._registry

    def entries() -> tuple[int, int]:
        """(TensorFlow's and Keras' own, the user's halve_grad's) CustomGradient entries."""
        names = [n for n in registry if n.startswith("CustomGradient-")]
        libraries = _library_dirs()
        users = [n for n in names if not _gradient_origin(registry[n]).startswith(libraries)]
        return len(names) - len(users), len(users)

    counts = []
    for _ in range(5):
        rerun(keras_shell, loop, 1)
        counts.append(entries())
    cleans = [r.deep_clean for r in keras_nbguard.runs("loop")[1:]]
    assert sum(c.entries for c in cleans) > 0  # the dead runs' entries went: no fit needed
    library = [lib for lib, _ in counts]
    assert library[2] == library[3] == library[4], counts  # no pile-up from run to run
    users = [user for _, user in counts]  # the user's own gradient, traced anew each run:
    assert users[0] > 0 and users == [users[0] * n for n in range(1, 6)]  # never purged
    assert last("loop").deep_clean.kept > 0  # the user's own entries, never purged


@pytest.mark.slow
def test_no_heap_walk_when_the_last_model_was_only_rebound(keras_shell, monkeypatch):
    """``history = model.fit(...)``: the earlier model is garbage once rebound, and the heap walk
    (~0.1 s on a TensorFlow kernel) is spared, before and after each run; and for a model held
    by its History in ``Out[n]`` alone (tentative.py)."""
    from keras_nbguard.models import walk

    cell = "%%kerasrun --label assigned --quiet\nmodel = make_model()\nhistory = " + FIT
    rerun(keras_shell, cell, 2)
    walks = []
    real_run = walk.Probe.run
    monkeypatch.setattr(walk.Probe, "run", lambda self: walks.append(1) or real_run(self))
    refs = rerun(keras_shell, cell, 3)
    assert walks == [] and alive(refs) == [False, False, True]
    # a model held by Out[n]'s History alone: its link cut, no walk; the next run's collection
    # frees it and says so
    refs = rerun(keras_shell, KERAS_IO.replace("--label io", "--label assigned"), 3)
    assert walks == [] and alive(refs) == [False, False, True]
    assert last("assigned").released_models.count == 1


# keras.io's scikit-learn wrapper, as its docs use it: the cell ends in ``est.fit(X, y)``, so
# IPython keeps each run's fitted estimator, and its model, in Out[n]
ESTIMATORS = """
from keras.wrappers import SKLearnRegressor
def build(X, y):
    return make_model()
"""
FIT_ESTIMATOR = (
    "%%kerasrun --label est --quiet\n"
    "est = SKLearnRegressor(model=build, fit_kwargs=dict(epochs=1, verbose=0))\n"
    "{hold}est.fit(x, y.ravel())\n"
)


def fit_estimators(shell, times: int, hold: str = "") -> list[weakref.ref]:
    run(shell, ESTIMATORS)
    refs = []
    for _ in range(times):
        result = run(shell, FIT_ESTIMATOR.format(hold=hold))
        assert result.success, result.error_in_exec
        refs.append(weakref.ref(shell.user_ns["est"].model_))
    return refs


@pytest.mark.slow
def test_a_cell_ending_in_an_estimators_fit_keeps_only_the_latest_model(keras_shell):
    refs = fit_estimators(keras_shell, 3)
    out = keras_shell.user_ns["Out"]
    estimators = [n for n, v in out.items() if type(v).__name__ == "SKLearnRegressor"]
    assert alive(refs) == [False, False, True]
    # the earlier runs' estimators left IPython's caches with their models: said with the entry
    # that held them; run 3 released run 2's (its own stays in Out, and in your name)
    assert len(estimators) == 1 and out[estimators[0]] is keras_shell.user_ns["est"]
    released = last("est").released_models
    assert released.runs == (2,) and released.paths == (
        f"Out[{estimators[0] - 1}] (its SKLearnRegressor)",
    )
    assert last("est").stale_models is None
    assert keras_shell.user_ns["est"].predict(keras_shell.user_ns["x"][:2]).shape == (2,)


@pytest.mark.slow
def test_an_estimator_the_user_keeps_keeps_its_model_and_says_where(keras_shell):
    run(keras_shell, "ests = []")
    refs = fit_estimators(keras_shell, 2, hold="ests.append(est)\n")
    assert alive(refs) == [True, True]
    stale = last("est").stale_models
    assert stale is not None and stale.runs == (1,) and "ests[0].model_" in stale.paths
    assert keras_shell.user_ns["ests"][0].predict(keras_shell.user_ns["x"][:2]).shape == (2,)


@pytest.mark.slow
def test_a_model_made_outside_a_run_and_fit_by_runs_is_not_the_first_runs(keras_shell):
    """keras.io's knowledge distillation: `student_scratch` is made in the setup cell, then
    compiled and fit by each run; the dashboard and %nbguard leaks said `'distiller = …' #1,
    used by #5`, as if run #1 had made it."""
    run(keras_shell, "scratch = make_model()")
    cell = (
        f"%%kerasrun --label kd --quiet\nmodel = make_model()\n{FIT}\n"
        "scratch.fit(x, y, verbose=0)\n"
    )
    rerun(keras_shell, cell, 2)
    words = {leak.model_name: leak.run_words() for leak in keras_nbguard.leaks()}
    scratch, model = keras_shell.user_ns["scratch"].name, keras_shell.user_ns["model"].name
    assert words[scratch] == "made outside %%kerasrun, used by 'kd' #2"
    assert words[model] == "'kd' #2"  # one the run built is the run's


def test_a_setup_model_is_not_stale_after_a_run_that_failed_before_using_it(keras_shell):
    """JupyterLab, keras.io's knowledge distillation: a run that failed on a typo before fitting
    `student_scratch` (made in the setup cell, fit by each run) left it "STALE … from #1", and
    `%nbguard free`, as the summary advised, deleted it: the next run failed on a NameError."""
    run(keras_shell, "scratch = make_model()")
    cell = f"%%kerasrun --label kd --quiet\nmodel = make_model()\n{FIT}\n"
    cell += "scratch.fit(x, y, verbose=0)\n"
    rerun(keras_shell, cell, 1)
    failed = run(keras_shell, cell.replace("scratch.fit", "scrath.fit"))
    assert not failed.success
    name = keras_shell.user_ns["scratch"].name
    (leak,) = [leak for leak in keras_nbguard.leaks() if leak.model_name == name]
    assert not leak.stale and leak.reason == "bound to your names (made outside a tracked run)"
    assert last("kd").stale_models is None or not last("kd").stale_models.count
    keras_nbguard.free()
    assert "scratch" in keras_shell.user_ns
    assert run(keras_shell, cell).success
