"""Every Keras a user has, each in its own process with the real framework (the backend is
chosen at import): Keras 2 (tf_keras), Keras 3 on JAX and on torch. Keras 3 on TensorFlow is what
every other test module runs.

Each process runs the same cell three times (fit with validation, evaluate, predict, a model kept
in a list), the third with ``--gpu-limit 100`` on a machine without a GPU, then the leak finder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_nbguard.records.run import RunRecord

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module", params=["tf_keras", "jax", "torch"])
def flavour(request, tmp_path_factory):
    name = request.param
    if not _installed(name):
        pytest.skip(f"{name} is not installed (the README's test set-up installs it)")
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE.parent),
        "KERAS_NBGUARD_DB": str(tmp_path_factory.mktemp(name) / "history.db"),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    for key in ("KERAS_BACKEND", "TF_USE_LEGACY_KERAS"):
        env.pop(key, None)
    done = subprocess.run(
        [sys.executable, str(HERE / "backend_run.py"), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return name, json.loads(done.stdout.strip().splitlines()[-1])


def test_every_run_is_cleared_and_new_inputs_never_take_kept_inputs_names(flavour):
    name, seen = flavour
    assert seen["cleared"] == [True, True, True]  # what the clear resets was reset each run
    assert all(r["cleared"] for r in seen["records"])
    # each run's layers named afresh, skipping only the names of the models the cell keeps in
    # `keep` (a plain cell's: dense_2, dense_4 too), the inputs' names kept counting: a new
    # Input joins a kept model's own Inputs without a clash of names
    assert seen["names"] == ["dense", "dense_2", "dense_4"]
    assert seen["join_error"] is None
    # a new layer never took the name of a setup cell's layer, nor of one the cell reuses
    assert seen["encoder_errors"] == []
    if name == "jax":  # the user's distribution survives the clear too
        assert seen["distribution"] == "DataParallel"


def test_fit_evaluate_and_predict_are_timed(flavour):
    name, seen = flavour
    for record in seen["records"]:
        (fit,) = record["fits"]  # fit's own validation is part of the fit, not an evaluate
        assert fit["epochs"] == 2 and fit["steps"] == 12 and fit["batch_size"] == 32
        assert 0 < record["fit_seconds"] < record["wall_seconds"]
        assert [i["kind"] for i in record["inference"]] == ["evaluate", "predict"]
        for call in record["inference"]:
            assert 0 < call["seconds"] < record["wall_seconds"]
            assert call["batch_size"] == 32 and call["steps"] == 16  # 512 rows
            assert call["rss_peak"] > 0 and call["completed"]
        assert fit["rss_peak"] > 0
    assert seen["records"][0]["keras"].startswith("Keras ")
    assert ("tf_keras" if name == "tf_keras" else f"({name})") in seen["records"][0]["keras"]


def test_traces_are_a_count_or_na_with_the_reason(flavour):
    name, seen = flavour
    steady = seen["records"][1]
    if name == "torch":
        assert steady["traces"] is None
        assert "eagerly" in steady["trace_reason"]
    elif name == "jax":
        assert steady["trace_kind"] == "XLA compilations"
        # a new model compiles its train, test and predict steps again, once each
        assert steady["traces"] >= 3
        assert {"jit(train_step)", "jit(test_step)", "jit(predict_step)"} <= {
            n for n, _ in steady["traced"]
        }
    else:
        assert steady["trace_kind"] == "tf.function" and steady["traces"] >= 3
        assert steady["dataset_traces"] == 0  # tf_keras' own adapters are not the user's
        # Keras 2's optimizer makes its slots in the first step: TensorFlow traces that call
        # twice for one input, which read "several functions, one input each"
        assert dict(map(tuple, steady["traced_twice"])) == {"train_function": 1}
        row = RunRecord.from_dict(steady).summary_text()
        assert "train_function 2× (one input; TensorFlow traces a first call" in row, row
        assert "several functions" not in row


def test_the_deep_clean_says_na_off_tensorflow(flavour):
    name, seen = flavour
    clean = seen["records"][1]["deep_clean"]
    if name == "tf_keras":
        assert clean["available"]
    else:
        backend = {"jax": "JAX", "torch": "torch"}[name]
        assert not clean["available"] and clean["reason"] == f"{backend} backend"  # "n/a (...)"
        # and %nbguard status says so, not a bare "on" (a walkthrough on JAX and torch)
        assert f"on, n/a ({backend} backend: it purges TensorFlow's)" in seen["status"]


def test_models_kept_in_a_list_are_found(flavour):
    name, seen = flavour
    stale = [leak for leak in seen["leaks"] if leak["stale"]]
    # the dashboard lists them too: on Keras 2 (no `keras` imported) it read "none" beside two
    assert len(seen["board_models"]) == len(seen["leaks"]), seen["board_models"]
    if name == "tf_keras":
        assert not seen["keras_3_imported"]  # the case: only tf_keras there
    # two earlier runs' models in ``keep``; the Sequential's inner Functional is not listed
    assert sorted(leak["paths"][0] for leak in stale) == ["keep[0]", "keep[1]"], seen["leaks"]
    assert len(seen["leaks"]) == 3


def test_no_framework_the_user_does_not_use_is_imported(flavour):
    name, seen = flavour
    assert seen["after_load"] == []  # %load_ext imports no framework at all
    if name in ("jax", "torch"):
        assert "tensorflow" not in seen["modules"]  # --gpu-limit included
    if name == "jax":
        assert "torch" not in seen["modules"]
    if name == "tf_keras":
        assert "keras" not in seen["modules"]  # Keras 3 stays out of a Keras 2 notebook


def test_gpu_limit_without_a_gpu_warns_and_the_run_is_still_cleared(flavour):
    name, seen = flavour
    limited = seen["records"][2]
    assert limited["cleared"] and limited["status"] == "ok"
    words = {
        "tf_keras": "TensorFlow sees no GPU",
        "jax": "the GPU's size is unknown",
        "torch": "torch sees no CUDA GPU",
    }[name]
    assert any(words in w and "--gpu-limit 100 ignored" in w for w in limited["warnings"]), limited[
        "warnings"
    ]
    assert (
        limited["gpu"]["reason"]
        and limited["gpu"]["allocator"] == {"tf_keras": "TF", "jax": "JAX", "torch": "torch"}[name]
    )


def test_status_names_the_keras_and_its_gpu(flavour):
    name, seen = flavour
    keras_row = next(line for line in seen["status"].splitlines() if line.split()[:1] == ["keras"])
    assert ("(tf_keras)" if name == "tf_keras" else f"({name})") in keras_row
    gpu_row = next(line for line in seen["status"].splitlines() if line.split()[:1] == ["gpu"])
    assert {
        "tf_keras": "TensorFlow sees no GPU",
        "jax": "no GPU: JAX computes on cpu",
        "torch": "no GPU: torch sees no CUDA device",
    }[name] in gpu_row


def test_a_dtype_policy_survives_the_clear_and_free_lets_go(flavour):
    _, seen = flavour
    assert seen["policies"] == ["mixed_bfloat16", "mixed_bfloat16"]
    # free --containers lets go of the stale models in ``keep`` (keep[i] = None), not the current
    assert seen["kept_after_free"] == [False, False, True], seen["freed"]
    assert seen["stale_after_free"] == 0


def test_batch_advice_probes_a_copy_on_every_keras(flavour):
    """batch_advice and ``%nbguard batch`` on Keras 2 and on Keras 3 over JAX and torch, on the
    host (VmHWM) under a given limit: probes at two batch sizes or more, an advice or its
    reason, and the user's model unchanged."""
    _, out = flavour
    advice = out["advice"]
    assert advice["where"] == "host (VmHWM)", advice
    assert len(advice["probes"]) >= 2, advice
    assert all(batch > 0 and peak >= 0 for batch, peak in advice["probes"]), advice
    assert advice["batch_size"] or advice["reason"], advice
    assert advice["unchanged"], advice  # weights and optimizer steps as they were
    assert advice["text"].startswith("batch advice: ") and "MiB" in advice["text"], advice
    assert advice["magic"].startswith("batch advice: "), advice  # %nbguard batch m x y


def test_the_leak_finder_sizes_a_keras_2_model_with_a_vocabulary(flavour):
    """Keras 2's TextVectorization lists a ``VocabWeightHandler`` among its weights: ``%nbguard
    leaks`` raised on the text example's end-to-end model (an AttributeError on ``.shape``)."""
    name, seen = flavour
    if name != "tf_keras":
        pytest.skip("Keras 2 only")
    assert seen["lookup_sizes"] == [40, 160, 0]  # the Embedding's 20 x 2 float32; no optimizer


def test_a_keras_2_model_compiled_again_lets_go_of_its_old_step_functions(flavour):
    """Keras 2's compile resets train_function with attribute tracking off, so the model kept
    every earlier fit's step functions and graphs: the fine-tuning cell grew +44 MiB a run, bare
    and under the magic. A run's deep clean drops those no attribute holds (recompiled.py)."""
    name, seen = flavour
    if name != "tf_keras":
        pytest.skip("Keras 2 only")
    # runs 1 and 2's functions gone; run 3's goes as the next run starts; run 4's is current
    assert seen["recompiled"] == [False, False, True, True]


def test_keras_2s_sequence_and_image_data_generator_are_timed_with_advice_for_keras_2(flavour):
    """Keras 2's own Python inputs as older tutorials feed them: a slow ``Sequence`` and
    ``ImageDataGenerator.flow`` reached fit untimed, so a fit that waited on them raised
    nothing. Their advice is Keras 2's: ``fit(workers=4)``, not Keras 3's PyDataset or
    ``batches.workers``."""
    name, seen = flavour
    if name != "tf_keras":
        pytest.skip("Keras 2 only")
    sequence, images, generator = seen["slow_inputs"]
    assert (sequence["kind"], images["kind"]) == ("Sequence", "ImageDataGenerator")
    assert sequence["batches"] == images["batches"] == 12  # 4 an epoch, 3 epochs
    assert sequence["seconds"] >= 0.2 * 12 and images["seconds"] >= 0.05 * 4 * 12
    assert sequence["message"].startswith("your Sequence took ")
    assert images["message"].startswith("your ImageDataGenerator took ")
    for each in (sequence, images, generator):
        assert "model.fit(..., workers=4)" in each["advice"], each["advice"]
        assert "PyDataset" not in each["advice"] and "batches.workers" not in each["advice"]
    # a plain generator was timed already; on Keras 2 its batches by index go in a Sequence
    assert generator["kind"] == "generator" and generator["message"].startswith("your generator")
    assert "in a keras.utils.Sequence (batch i in __getitem__)" in generator["advice"]


JAX_DEFERRED_OOM = """
import json, os
os.environ["KERAS_BACKEND"] = "jax"
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("%load_ext keras_nbguard")
shell.run_cell('''
import jax, keras, numpy as np
x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
def fails_on_the_device(arrays):  # as a GPU step that ran out of memory fails: when awaited
    raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1.46GiB")
jax.block_until_ready = fails_on_the_device
''')
shell.run_cell("%%kerasrun --quiet --label deferred\\nmodel.fit(x, y, batch_size=16, verbose=0)")
import keras_nbguard
record = keras_nbguard.runs("deferred")[-1]
print(json.dumps({"status": record.status, "completed": [f.completed for f in record.fits]}))
"""


def test_on_jax_a_fit_whose_steps_fail_on_the_device_is_out_of_memory_not_ok():
    """JAX dispatches a fit's steps and returns: on an H200, fits that ran out of GPU memory
    came back as ``ok``, the error left in the weights' arrays. The fit now waits for them."""
    done = subprocess.run(
        [sys.executable, "-c", JAX_DEFERRED_OOM], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"status": "oom", "completed": [False]}
