"""RSS per run on keras.io's text_classification_from_scratch shape, re-run in one shell: the
adapted ``TextVectorization`` of the setup cell is called on each run's ``keras.Input`` (Keras'
node graph then keeps every run's model alive, unless the release step cuts those nodes).

    .venv/bin/python bench/bench_held_by_layers.py [--runs 8] [--mode kerasrun|keep-stale|bare]

Prints RSS after each run, the slope (MiB/run) over the runs after the third, the models of
earlier runs still alive after a gc, and the node lists' lengths. Synthetic data, the example's
model (Embedding, Conv1D x2, GlobalMaxPooling1D, Dense) at smaller sizes.
"""

from __future__ import annotations

import argparse
import gc
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SETUP = """
import numpy as np, keras, tensorflow as tf
from keras import layers
max_features, sequence_length, embedding_dim = 5000, 100, 64
rng = np.random.default_rng(0)
words = np.array([f"w{i}" for i in range(3000)])
texts = np.array([" ".join(rng.choice(words, 60)) for _ in range(1024)])
labels = rng.integers(0, 2, 1024).astype("float32")
vectorize_layer = layers.TextVectorization(max_tokens=max_features, output_mode="int",
                                           output_sequence_length=sequence_length)
vectorize_layer.adapt(texts)
raw_train_ds = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32)
train_ds = raw_train_ds.map(lambda t, y: (vectorize_layer(t), y)).cache().prefetch(2)
raw_test_ds = tf.data.Dataset.from_tensor_slices((texts[:256, None], labels[:256])).batch(32)
"""
RUN = """
inputs = keras.Input(shape=(None,), dtype="int64")
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)
x = layers.Conv1D(64, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(64, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)
x = layers.Dense(64, activation="relu")(x)
x = layers.Dropout(0.5)(x)
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
model = keras.Model(inputs, predictions)
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(train_ds, epochs=1, verbose=0)
inputs = keras.Input(shape=(1,), dtype="string")
indices = vectorize_layer(inputs)
outputs = model(indices)
end_to_end_model = keras.Model(inputs, outputs)
end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
end_to_end_model.evaluate(raw_test_ds, verbose=0)
"""


def rss() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--mode", choices=("kerasrun", "keep-stale", "bare"), default="kerasrun")
    args = parser.parse_args()
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "keras_nbguard")
    assert shell.run_cell(SETUP).success
    head = {
        "bare": "",
        "kerasrun": "%%kerasrun --label text --quiet\n",
        "keep-stale": "%%kerasrun --label text --quiet --keep-stale\n",
    }[args.mode]
    figures, refs = [], []
    for n in range(1, args.runs + 1):
        result = shell.run_cell(head + RUN, store_history=True)
        assert result.success, result.error_in_exec
        refs.append(weakref.ref(shell.user_ns["model"]))
        figures.append(rss())
        print(f"run {n}: RSS {figures[-1]:.1f} MiB", flush=True)
    gc.collect()
    tail = figures[3:]
    slope = (tail[-1] - tail[0]) / (len(tail) - 1) if len(tail) > 1 else float("nan")
    layer = shell.user_ns["vectorize_layer"]
    print(
        f"mode {args.mode}: slope {slope:.2f} MiB/run over runs 4-{args.runs}; "
        f"models of earlier runs alive after gc: {sum(r() is not None for r in refs[:-1])}; "
        f"vectorize_layer nodes in/out: {len(layer._inbound_nodes)}/"
        f"{len(layer._outbound_nodes)}"
    )


if __name__ == "__main__":
    main()
