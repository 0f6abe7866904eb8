"""Run in a fresh process by tests/test_backends.py, once per Keras (the backend is chosen at
import): a real IPython shell, the extension, two runs of one cell that fits, evaluates and
predicts, then the leak finder. Prints what the test checks, as one JSON line."""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings

FLAVOUR = sys.argv[1]  # "tf_keras", "jax" or "torch"
if FLAVOUR == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # `from tensorflow import keras` is Keras 2
else:
    os.environ["KERAS_BACKEND"] = FLAVOUR

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

shell = InteractiveShell.instance()
IMPORT = "from tensorflow import keras" if FLAVOUR == "tf_keras" else "import keras"
POLICY = (
    "keras.mixed_precision.global_policy().name"
    if FLAVOUR == "tf_keras"
    else "keras.config.dtype_policy().name"
)
# what Keras' clear_session resets, seen from a cell: set after each run, gone in the next
if FLAVOUR == "tf_keras":  # Keras 2's clear makes TensorFlow a new default graph
    MARK = "import tensorflow as tf\nmarked = tf.compat.v1.get_default_graph()"
    CLEARED = "tf.compat.v1.get_default_graph() is not marked"
else:
    MARK = (
        "from keras.src.backend.common import global_state\n"
        "global_state.set_global_attribute('marked_by_the_test', True)"
    )
    CLEARED = "global_state.get_global_attribute('marked_by_the_test') is None"
CELL = """%%kerasrun -l mlp {options}
cleared.append({cleared})
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                      keras.layers.Dense(1)])
m.compile("adam", "mse")
m.fit(x, y, epochs=2, verbose=0, validation_split=0.25)
m.evaluate(x, y, verbose=0)
m.predict(x, verbose=0)
keep.append(m)
names.append(m.layers[0].name)
{mark}
"""
# keras.io's lstm_seq2seq: an inference model joins a kept model's input to new ones; after a
# clear that restarted the name counters, the new inputs took the kept one's name
PAIR = """%%kerasrun -l pair
a, b = keras.Input((4,)), keras.Input((4,))
pair = keras.Model([a, b], keras.layers.Add()([a, b]))
"""
JOINED = """%%kerasrun -l joined
c, d = keras.Input((4,)), keras.Input((4,))
joined = keras.Model([pair.inputs[1], d], keras.layers.Add()([pair.inputs[1], d]))
"""
# a setup cell's encoder (a plain cell) is named "sequential"; the run's new head was too
ENCODER = "encoder = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])"
JOINS_ENCODER = """%%kerasrun -l encoder
head = keras.Sequential([keras.layers.Dense(1)])
inputs = keras.Input((8,))
model = keras.Model(inputs, head(encoder(inputs)))
"""

# a cell that makes its encoder on its first run and reuses it: its re-runs' new head took it
REUSES_ENCODER = """%%kerasrun -l reuses
if "kept" not in globals():
    kept = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
head = keras.Sequential([keras.layers.Dense(1)])
inputs = keras.Input((8,))
model = keras.Model(inputs, head(kept(inputs)))
"""


def main() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert shell.run_cell("%load_ext keras_nbguard").success
        after_load = sorted(k for k in ("tensorflow", "jax", "torch") if k in sys.modules)
        assert shell.run_cell(f"""
import numpy as np
{IMPORT}
x = np.random.default_rng(0).random((512, 8), dtype="float32")
y = np.random.default_rng(1).random((512, 1), dtype="float32")
keep, names, policies, cleared = [], [], [], []
{MARK}
""").success
        for options in ("", "", "--gpu-limit 100"):
            cell = CELL.format(options=options, cleared=CLEARED, mark=MARK)
            assert shell.run_cell(cell).success
        # a dtype policy survives the clear of the next runs
        for options in ("--mixed-precision bfloat16", ""):
            assert shell.run_cell(
                f"%%kerasrun -l policy {options}\npolicies.append({POLICY})\n"
            ).success
    import keras_nbguard

    runs = keras_nbguard.runs("mlp")
    advice = advise(shell.user_ns)
    lookup = lookup_sizes() if FLAVOUR == "tf_keras" else None
    report = keras_nbguard.leaks()
    from keras_nbguard.board.widget import Dashboard

    board_models = Dashboard(keras_nbguard.get_session())._scan_models()
    freed = keras_nbguard.free(containers=True)
    assert shell.run_cell(PAIR).success
    joins = shell.run_cell(JOINED)
    assert shell.run_cell(ENCODER).success
    joins_encoder = [shell.run_cell(JOINS_ENCODER) for _ in range(2)]
    joins_encoder += [shell.run_cell(REUSES_ENCODER) for _ in range(3)]
    distribution = distribution_in_a_run() if FLAVOUR == "jax" else None
    recompiled = step_functions_alive_after_recompiles() if FLAVOUR == "tf_keras" else None
    slow_inputs = keras2_slow_inputs() if FLAVOUR == "tf_keras" else None
    print(
        json.dumps(
            {
                "records": [r.to_dict() for r in runs[-3:]],
                "names": shell.user_ns["names"],
                "cleared": shell.user_ns["cleared"],
                "join_error": repr(joins.error_in_exec) if not joins.success else None,
                "encoder_errors": [repr(r.error_in_exec) for r in joins_encoder if not r.success],
                "distribution": distribution,
                "recompiled": recompiled,
                "slow_inputs": slow_inputs,
                "policies": shell.user_ns["policies"],
                "kept_after_free": [m is not None for m in shell.user_ns["keep"]],
                "stale_after_free": len(keras_nbguard.leaks().stale),
                "freed": repr(freed),
                "leaks": [
                    {"stale": leak.stale, "paths": list(leak.paths)} for leak in report.leaks
                ],
                "board_models": board_models,
                "keras_3_imported": "keras" in sys.modules,
                "modules": sorted(
                    k
                    for k in ("tensorflow", "jax", "torch", "keras", "tf_keras")
                    if k in sys.modules
                ),
                "after_load": after_load,
                "advice": advice,
                "lookup_sizes": lookup,
                "warnings": [str(w.message) for w in caught],
                "status": shell.run_line_magic("nbguard", "status").text(),
            }
        )
    )


def step_functions_alive_after_recompiles() -> list[bool]:
    """keras.io's fine-tuning cell re-run: a model of a plain cell compiled again and fit in each
    of four runs. Whether each run's train function is alive after them (Keras 2 kept them all,
    and their graphs: +44 MiB a run there)."""
    assert shell.run_cell(
        "tuned = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])\n"
        "tuned.compile('adam', 'mse')\ntrained = []"
    ).success
    cell = (
        "%%kerasrun -l tuned\ntuned.compile(keras.optimizers.Adam(1e-4), 'mse')\n"
        "tuned.fit(x, y, epochs=1, verbose=0)\nimport weakref\n"
        "trained.append(weakref.ref(tuned.train_function))\n"
    )
    for _ in range(4):
        assert shell.run_cell(cell).success
    gc.collect()
    return [ref() is not None for ref in shell.user_ns["trained"]]


def keras2_slow_inputs() -> list[dict]:
    """Keras 2's own Python inputs, slow: a ``Sequence`` and ``ImageDataGenerator.flow``'s
    batches (older tutorials' way to augment), each fit under the magic. Per fit: what its
    input was timed as, and the input_pipeline finding's message and advice."""
    assert shell.run_cell(
        """
import time
class SlowSequence(keras.utils.Sequence):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        time.sleep(0.2)  # reading and decoding, say: far longer than a step, even under load
        return x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]
def decode(image):
    time.sleep(0.05)  # an augmentation of one image: four make a batch
    return image
images = np.random.default_rng(2).random((16, 8, 8, 3), dtype="float32")
datagen = keras.preprocessing.image.ImageDataGenerator(preprocessing_function=decode)
def batches():
    while True:
        time.sleep(0.2)
        yield x[:16], y[:16]
"""
    ).success
    # (";": no History in Out[n], which would keep each fit's model for the checks after these)
    fits = {
        "sequence": ("(8,)", "model.fit(SlowSequence(), epochs=3, verbose=0);"),
        "images": (
            "(8, 8, 3)",
            "model.fit(datagen.flow(images, y[:16], batch_size=4), epochs=3, verbose=0);",
        ),
        "generator": ("(8,)", "model.fit(batches(), steps_per_epoch=4, epochs=3, verbose=0);"),
    }
    seen = []
    for label, (shape, fit) in fits.items():
        layers = f"keras.Input({shape}), keras.layers.Flatten(), keras.layers.Dense(1)"
        cell = (
            f"%%kerasrun -l {label} --quiet\nmodel = keras.Sequential([{layers}])\n"
            f"model.compile('adam', 'mse')\n{fit}\n"
        )
        assert shell.run_cell(cell).success
        import keras_nbguard

        record = keras_nbguard.runs(label)[-1].fits[0]
        found = [f for f in keras_nbguard.diagnose(label) if f.kind == "input_pipeline"]
        seen.append(
            {
                "kind": record.input_kind,
                "batches": record.input_batches,
                "seconds": record.input_seconds,
                "message": found[0].message if found else None,
                "advice": found[0].advice if found else None,
            }
        )
    return seen


def distribution_in_a_run() -> str | None:
    """keras.distribution (JAX only): set in a plain cell, what a run's cell finds."""
    assert shell.run_cell(
        "keras.distribution.set_distribution(keras.distribution.DataParallel())"
    ).success
    try:
        found = shell.run_cell(
            "%%kerasrun -l dist\ntype(keras.distribution.distribution()).__name__"
        )
        return found.result if found.success else repr(found.error_in_exec)
    finally:
        shell.run_cell("keras.distribution.set_distribution(None)")


def lookup_sizes() -> list:
    """The leak finder's sizes of a model holding Keras 2's TextVectorization, whose weights
    include a ``VocabWeightHandler`` (no shape): the text example's end-to-end model."""
    from tensorflow import keras

    from keras_nbguard.models.report import sizes

    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=4)
    vectorize.adapt(["a b c", "b c d"])
    inputs = keras.Input((1,), dtype="string")
    model = keras.Model(inputs, keras.layers.Embedding(20, 2)(vectorize(inputs)))
    return list(sizes(model))


def advise(ns: dict) -> dict:
    """batch_advice on this Keras, under a host limit: the probes, the advice, and whether the
    user's model came out unchanged (weights and optimizer steps)."""
    import numpy as np

    import keras_nbguard

    model = ns["keep"][-1]
    weights = [w.copy() for w in model.get_weights()]
    steps = int(np.asarray(model.optimizer.iterations))
    advice = keras_nbguard.batch_advice(model, ns["x"], ns["y"], limit_mib=1024)
    line = shell.run_line_magic("nbguard", "batch m x y --limit 1024 --steps 1")
    return {
        "batch_size": advice.batch_size,
        "reason": advice.reason,
        "probes": [[p.batch, p.peak_mib] for p in advice.probes],
        "where": advice.where,
        "unchanged": all(
            np.array_equal(a, b) for a, b in zip(weights, model.get_weights(), strict=True)
        )
        and int(np.asarray(model.optimizer.iterations)) == steps,
        "text": advice.text(),
        "magic": line.text(),
    }


main()
