"""Keras' own examples and guides (``bench/examples/``), a short version of each, under
``%%kerasrun``: Keras 3 on TensorFlow in this process's shell, Keras 2 (tf_keras) in a process of
its own. What they must do today: run without error under the magic, a RunRecord per cell, fit
timed where the example fits. The flatness goals (RSS per run, time) are bench goals:
``bench/bench_examples.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.examples import KERASES, MODULES, examples
from bench.examples.runner import measure, run_example

pytestmark = pytest.mark.slow
RUNS = 3  # Keras 3: a third run is the first whose label has two earlier runs
# Two runs, the second releasing the first, for the examples whose third run checks nothing the
# others' do not (a run of most of these is 4-10 s on CPU alone, TensorFlow tracing a new model's
# steps; two or three times that beside the other test process). Three for those whose History
# or estimator is the cell's value (each run says the model it lets go of from the run before's
# Out[n]: the third's record counts the second's, and the first's, said by the second, not
# again), whose models a layer or a model of the setup cell holds (text,
# feature space, transfer, the GANs, the regression tutorial's normalizer), and the timeseries
# classification (run n fits what n-1 loaded).
TWO_RUNS = (
    "loop_from_scratch",
    "tf_data_pipeline",
    "training_builtin",
    "text_generation",
    "tuner_search",
    "lstm_seq2seq",
    "fine_tuning",
    "functional_api",
    "weather_forecasting",
    "text_transformer",
    "distributed_training",
    "grad_cam",
    "py_dataset",
    "vit",
    "knowledge_distillation",
    "saving",
    "collaborative_filtering",
    "siamese_contrastive",
    "endpoint_layer",
    "timeseries_transformer",
    "anomaly_detection",
    "bidirectional_lstm",
    "oxford_pets_segmentation",
    "denoising_autoencoder",
    "addition_rnn",
    "nmt_transformer",
)
RUNS_TF_KERAS = 2  # in a process of its own (TensorFlow imported again): kept short
EXAMPLES = examples()
# Where the cell's value is fit's History (``Out[n]`` holds it, and through it the model): the
# next run releases the run before it from there
HISTORY_IS_THE_VALUE = (
    "mnist_convnet",
    "custom_train_step",
    "vae",
    "image_classification",
    "callbacks_guide",
)


def _check_runs(seen: dict, keras_name: str, count: int = RUNS) -> None:
    """Every run ok, recorded as run 1..count of the example's label, cleared, fit timed."""
    assert "setup_error" not in seen, seen["setup_error"]
    runs = seen["runs"]
    assert [r.get("error") for r in runs] == [None] * count
    assert [r["record"] for r in runs] == list(range(1, count + 1))
    assert {r["status"] for r in runs} == {"ok"}
    assert all(r["cleared"] for r in runs)
    assert all(r["keras_seen"].startswith(keras_name) for r in runs), runs[0]["keras_seen"]
    if seen["fits"]:
        for r in runs:
            assert r["fit_s"] is not None and r["fit_s"] > 0, r.get("fit_reason")
            assert r["fit_s"] <= r["wall_s"]


def test_the_corpus_holds_every_example_the_issue_names():
    assert list(EXAMPLES) == list(MODULES)
    three = {*HISTORY_IS_THE_VALUE, "sklearn_wrapper", "text_classification", "feature_space"}
    three |= {"transfer_learning", "gan", "timeseries_classification", "regression_normalizer"}
    three |= {"wgan_gp"}
    assert set(TWO_RUNS) < set(EXAMPLES) and not set(TWO_RUNS) & three
    for example in EXAMPLES.values():
        assert example.follows and example.setup and example.train
        assert "keras3" in example.kerases and set(example.kerases) <= set(KERASES)
        compile(example.setup, example.name, "exec")
        compile(example.train, example.name, "exec")
        example.check_short()
    assert "tf_keras" in EXAMPLES["mnist_convnet"].kerases
    assert EXAMPLES["mnist_convnet"].train.rstrip().splitlines()[-1].startswith("model.fit(")
    assert not EXAMPLES["loop_from_scratch"].fits
    tf_keras = EXAMPLES["mnist_convnet"].cell("setup", "tf_keras")
    assert "import tf_keras as keras" in tf_keras and "from tf_keras import layers" in tf_keras


@pytest.mark.parametrize("name", list(EXAMPLES))
@pytest.mark.usefixtures("unhurried_walk")  # conftest: the release step's walk, under load
def test_example_runs_under_kerasrun_on_keras3(shell, name):
    runs = 2 if name in TWO_RUNS else RUNS
    seen = run_example(shell, name, "kerasrun", runs, "keras3", short=True)
    _check_runs(seen, "Keras 3", runs)
    # no earlier run's model alive after any run: not through the user's names, Out[n], the
    # setup cell's layers (text, feature space) or models (GAN, VAE), nor Keras' own records
    assert [r["earlier_alive"] for r in seen["runs"]] == [0] * runs
    if name in HISTORY_IS_THE_VALUE or name == "sklearn_wrapper":  # or the fitted estimator
        assert seen["runs"][-1]["released"] == 1  # run 2's, from its Out[n] (its History)
    if name == "regression_normalizer":
        # the setup cell's layer sits in every run's Sequential: it keeps the last run's node
        # only, and with it no earlier run's Dense layers (bare: one node and three layers a run)
        assert len(shell.user_ns["normalizer"]._outbound_nodes) == 1
    _check_expected(name, seen)


def _check_expected(name: str, seen: dict) -> None:
    """What the example does wrong is named on every run (text generation: predict per sample)."""
    for expected in EXAMPLES[name].expects:
        for r in seen["runs"]:
            assert any(f.startswith(f"{expected}:") for f in r["findings"]), r["findings"]


def test_convnet_history_is_the_cells_result(shell):
    """The example's last line is ``model.fit(...)``: its History is the cell's ``Out[n]`` under
    the magic too."""
    run_example(shell, "mnist_convnet", "kerasrun", 1, "keras3")
    assert type(shell.user_ns["_"]).__name__ == "History"
    assert len(shell.user_ns["_"].history["loss"]) == 2


def test_examples_run_under_kerasrun_on_tf_keras():
    names = [n for n, e in EXAMPLES.items() if "tf_keras" in e.kerases]
    seen = measure(names, "kerasrun", RUNS_TF_KERAS, "tf_keras", timeout=900, short=True)
    assert list(seen) == names
    for name in names:
        _check_runs(seen[name], "Keras 2", RUNS_TF_KERAS)
        _check_expected(name, seen[name])


def test_runs_record_tensorflows_cpu_pool_where_onednn_keeps_one():
    """oneDNN on (TensorFlow's default on x86, off in the tests' own process): every run records
    the CPU pool's peak, what the summary's ``rss trend`` row names when the pool grew, and what
    the allocators had in use as it started."""
    seen = measure(
        "mnist_convnet", "kerasrun", 2, timeout=600, environ={"TF_ENABLE_ONEDNN_OPTS": "1"}
    )["mnist_convnet"]
    _check_runs(seen, "Keras 3", 2)
    recorded = [r["pool_recorded"] for r in seen["runs"]]
    read_after = [r["pool"] for r in seen["runs"]]  # the runner's own read, after the run
    assert all(isinstance(p, int) and p > 2**20 for p in recorded), recorded
    assert recorded == sorted(recorded)  # a peak since the process began
    assert all(a >= r for a, r in zip(read_after, recorded, strict=True))
    # in use as run 2 started, after its collection: what run 1 left (none of this convnet's
    # tensors is large enough for the pool); run 1 found no runtime up at its start
    in_use = [r["pool_in_use_recorded"] for r in seen["runs"]]
    assert in_use[0] is None and isinstance(in_use[1], int) and in_use[1] <= recorded[0], in_use
    # and what glibc's heap and Python had in use then, read on every run that clears
    for run in seen["runs"]:
        assert run["heap_recorded"] > 2**20 and run["blocks_recorded"] > 10_000, run
