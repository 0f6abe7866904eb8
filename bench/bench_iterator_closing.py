"""What deleting tf.data's iterators costs a cell, bare and in a run. Prints; asserts nothing.

    python bench/bench_iterator_closing.py              # about 6 minutes on 2 cores
    python bench/bench_iterator_closing.py --quick      # a smoke run
    python bench/bench_iterator_closing.py --ages 10,30,60   # also: one iterator's wait by age

Deleting an iterator can wait for TensorFlow's autotuning thread behind it
(``keras_nbguard/collectors/iterator_closing.py``); how long depends on how long it was used and on
the moment, so the same fits run each way in turn, in one process:

- a Keras ``fit`` of two epochs on an autotuned pipeline (``map`` and ``prefetch`` with
  ``AUTOTUNE``), bare and inside ``keras_nbguard.track`` (``clear=False``: only what a run changes
  around the fit), alternating: each fit's seconds, its epochs', and the time outside them (Keras
  drops the first epoch's iterator as the second starts, inside the second epoch's time; the last
  as fit returns, outside them);
- the same with a training loop of one's own (``for batch in dataset`` each epoch, as keras.io's
  guide writes it);
- with ``--ages``: one iterator used for that many seconds, then deleted on the main thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--epoch-seconds", type=float, default=5.0)
    parser.add_argument("--ages", default="", help="seconds, comma-separated")
    args = parser.parse_args()
    pairs, target = (2, 1.5) if args.quick else (args.pairs, args.epoch_seconds)

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_nbguard
    from keras_nbguard.collectors import iterator_closing

    rng = np.random.default_rng(0)
    width = 256

    def pipeline(samples: int) -> tf.data.Dataset:
        x = rng.random((samples, width), dtype="float32")
        y = rng.random((samples, 1), dtype="float32")
        return (
            tf.data.Dataset.from_tensor_slices((x, y))
            .map(lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(64)
            .prefetch(tf.data.AUTOTUNE)
        )

    model = keras.Sequential(
        [keras.Input((width,))]
        + [keras.layers.Dense(1024, activation="relu") for _ in range(3)]
        + [keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    probe = 64 * 40
    model.fit(pipeline(probe), epochs=1, verbose=0)  # traced once: the timing below is steps only
    started = time.perf_counter()
    model.fit(pipeline(probe), epochs=1, verbose=0)
    samples = max(probe, int(probe * target / (time.perf_counter() - started)))
    data = pipeline(samples)
    print(f"{samples:,} samples a epoch, batch 64, {pairs} pairs, one process")

    class Epochs(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    def fit() -> tuple[float, list[float]]:
        epochs = Epochs()
        started = time.perf_counter()
        model.fit(data, epochs=2, verbose=0, callbacks=[epochs])
        return time.perf_counter() - started, epochs.seconds

    for name, one in (("fit", fit), ("own loop", lambda: _own_loop(model, data))):
        results: dict[str, list[tuple[float, list[float]]]] = {"bare": [], "run": []}
        for i in range(pairs):
            order = ("bare", "run") if i % 2 == 0 else ("run", "bare")
            for way in order:
                if way == "bare":
                    results[way].append(one())
                else:
                    with keras_nbguard.track(f"closing {name}", clear=False):
                        results[way].append(one())
        _report(name, results)
        closer = iterator_closing.closer()
        closer.wait(120)
        print(
            f"  the closer's thread: {closer.closed} iterators deleted so far, the longest "
            f"{closer.longest:.2f} s (what a cell would have waited for it)"
        )

    for age in [float(a) for a in args.ages.split(",") if a]:
        iterator = iter(data.repeat())
        started = time.time()
        while time.time() - started < age:
            next(iterator)
        started = time.perf_counter()
        del iterator
        took = time.perf_counter() - started
        print(f"an iterator used for {age:.0f} s: deleting it took {took:.3f} s")


def _own_loop(model, data) -> tuple[float, list[float]]:
    """keras.io's "training loop from scratch", its epochs as it writes them."""
    seconds = []
    started = time.perf_counter()
    for _ in range(2):
        epoch = time.perf_counter()
        for x, y in data:
            model.train_on_batch(x, y)
        seconds.append(time.perf_counter() - epoch)
    return time.perf_counter() - started, seconds


def _report(name: str, results: dict[str, list[tuple[float, list[float]]]]) -> None:
    print(f"{name}: seconds per call, each way (epochs, and outside them)")
    for way, calls in results.items():
        totals = [total for total, _ in calls]
        outside = [total - sum(epochs) for total, epochs in calls]
        second = [epochs[1] - epochs[0] for _, epochs in calls]
        print(
            f"  {way:<5} median {statistics.median(totals):6.2f} s, max {max(totals):6.2f}; "
            f"outside the epochs median {statistics.median(outside):.2f} s, max "
            f"{max(outside):.2f}; second epoch minus first: max {max(second):+.2f} s"
        )
        print("        each: " + ", ".join(f"{t:.2f}" for t in totals))


if __name__ == "__main__":
    main()
