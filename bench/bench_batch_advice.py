"""batch_advice against the truth: on four models under a host limit on CPU, the advised batch
fits, 1.25x it does not, and the true largest batch is found by bisection with real runs, each in
a fresh process whose peak RSS over its start (VmHWM, as --host-limit counts it) is measured; a
batch is never larger than the dataset (Keras fits the whole of it then). TensorFlow runs as
installed, oneDNN on as a user's is by default (``TF_ENABLE_ONEDNN_OPTS=0`` in the environment
turns it off for both sides: the peaks then move by ~25 MiB between fresh runs).
Beside it, the trials PyTorch Lightning's BatchSizeFinder (doubling from 2, then bisecting) would
need to find the same batch, and the time they would take at this machine's measured trial cost.

    .venv/bin/python bench/bench_batch_advice.py            # the four models (~10 min here)
    .venv/bin/python bench/bench_batch_advice.py mlp lstm   # some of them
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {
    **os.environ,
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONPATH": ROOT,
}
STEPS = 3  # a trial: three training steps at one batch size (Lightning's steps per trial)

# name: (host limit MiB, the code that makes x, y and model)
MODELS = {
    "convnet": (
        512,
        """
x = rng.random((1024, 64, 64, 3), dtype="float32"); y = rng.integers(0, 10, 1024)
model = keras.Sequential([keras.Input((64, 64, 3)),
    keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
""",
    ),
    "mlp": (
        512,
        """
x = rng.random((16384, 784), dtype="float32"); y = rng.integers(0, 10, 16384)
model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(1024, activation="relu"),
    keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
""",
    ),
    "lstm": (
        384,
        """
x = rng.random((4096, 64, 16), dtype="float32"); y = rng.random((4096, 1), dtype="float32")
model = keras.Sequential([keras.Input((64, 16)), keras.layers.LSTM(128), keras.layers.Dense(1)])
model.compile("adam", "mse")
""",
    ),
    "textconv": (
        256,
        """
x = rng.integers(0, 10000, (4096, 256)); y = rng.integers(0, 2, (4096, 1))
model = keras.Sequential([keras.Input((256,), dtype="int32"), keras.layers.Embedding(10000, 64),
    keras.layers.Conv1D(128, 5, activation="relu"), keras.layers.GlobalMaxPooling1D(),
    keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy")
""",
    ),
}

CHILD = """
import json, os, sys, time
import numpy as np
import keras
from keras_nbguard.collectors.process import PeakRss, default_rss_reader
rng = np.random.default_rng(0)
{setup}
mode, arg, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if mode == "trial":
    base = default_rss_reader()()
    PeakRss().reset()
    t = time.perf_counter()
    model.fit(x, y, batch_size=arg, steps_per_epoch={steps}, epochs=1, verbose=0)
    out = dict(peak=(PeakRss().read() - base) / 2**20, seconds=time.perf_counter() - t)
else:
    from keras_nbguard import batch_advice
    a = batch_advice(model, x, y, limit_mib=limit, batch_size=arg or None)
    out = dict(batch=a.batch_size, seconds=a.seconds, text=a.text(), rows=len(x),
               probes=[(p.batch, round(p.peak_mib, 1)) for p in a.probes],
               range=a.batch_range)
print("RESULT " + json.dumps(out))
"""


def child(name: str, mode: str, arg: int) -> dict:
    limit, setup = MODELS[name]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(setup=setup, steps=STEPS), mode, str(arg), str(limit)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=900,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{name} {mode} {arg} failed:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][7:])


class Truth:
    """Real runs, each in a fresh process: whether a batch fits under the model's host limit."""

    def __init__(self, name: str) -> None:
        self.name, self.limit = name, MODELS[name][0]
        self.runs: dict[int, dict] = {}

    def fits(self, batch: int) -> bool:
        if batch not in self.runs:
            self.runs[batch] = child(self.name, "trial", batch)
            run = self.runs[batch]
            print(
                f"    trial batch {batch:>6,}: peak {run['peak']:7.1f} MiB "
                f"({'fits' if run['peak'] <= self.limit else 'over'}), "
                f"fit {run['seconds']:.1f} s",
                flush=True,
            )
        return self.runs[batch]["peak"] <= self.limit

    def largest(self, fits: int, over: int) -> int:
        """Bisection between a batch that fits and one that does not, to 5%."""
        while over - fits > max(1, fits // 20):
            mid = (fits + over) // 2
            if self.fits(mid):
                fits = mid
            else:
                over = mid
        return fits

    def seconds_at(self, batch: int) -> float:
        """A trial's fit time at ``batch``: that of the nearest batch measured."""
        nearest = min(self.runs, key=lambda b: abs(b - batch))
        return self.runs[nearest]["seconds"]


def lightning_trials(largest: int, max_trials: int = 25) -> list[int]:
    """The batch sizes Lightning's BatchSizeFinder (mode "binsearch", init_val 2) tries when the
    largest that fits is ``largest``."""
    tried, size, low, high = [], 2, 1, None
    while len(tried) < max_trials:
        tried.append(size)
        if size <= largest:
            low = size
            if high is None:
                size *= 2
                continue
            if high - low <= 1:
                break
            size = (low + high) // 2
        else:
            high = size
            if high - low <= 1:
                break
            size = (low + high) // 2
    return tried


def bench(name: str) -> dict:
    print(f"{name} (host limit {MODELS[name][0]} MiB):", flush=True)
    advice = child(name, "advise", 0)
    print(f"    {advice['text']}", flush=True)
    truth = Truth(name)
    advised, rows = advice["batch"], advice["rows"]
    if not advised:
        return dict(name=name, advised=None, advice=advice)
    advised_fits = truth.fits(advised)
    above = max(advised + 1, int(advised * 1.25))
    above_over = not truth.fits(above)
    if advised_fits and above_over:
        largest = truth.largest(advised, above)
    elif advised_fits and truth.fits(rows):  # the whole dataset as one batch: the largest
        largest = rows
    elif advised_fits:  # find a batch that does not fit, doubling (up to the dataset)
        over = min(above * 2, rows)
        while truth.fits(over):
            over = min(over * 2, rows)
        largest = truth.largest(over // 2, over)
    else:
        low = max(1, advised // 2)
        while not truth.fits(low) and low > 1:
            low //= 2
        largest = truth.largest(low, advised)
    tried = lightning_trials(largest)
    lightning_s = sum(truth.seconds_at(b) for b in tried)
    return dict(
        name=name,
        limit=MODELS[name][0],
        advised=advised,
        fits=advised_fits,
        above=above,
        above_over=above_over,
        largest=largest,
        trials=len(tried),
        lightning_s=lightning_s,
        advice_s=advice["seconds"],
        probes=advice["probes"],
        range=advice["range"],
    )


def main(names: list[str]) -> None:
    started = time.monotonic()
    rows = [bench(name) for name in names or list(MODELS)]
    print()
    print(
        f"{'model':<10}{'limit':>7}{'advised':>9}{'fits':>6}{'1.25x':>8}{'over':>6}"
        f"{'largest':>9}{'adv/lgst':>9}{'advice s':>10}{'LT trials':>10}{'LT s':>8}"
        f"{'ratio':>7}  range"
    )
    for r in rows:
        if not r.get("advised"):
            print(f"{r['name']:<10} no advice: {r['advice']['text']}")
            continue
        print(
            f"{r['name']:<10}{r['limit']:>7}{r['advised']:>9,}{'yes' if r['fits'] else 'NO':>6}"
            f"{r['above']:>8,}{'yes' if r['above_over'] else 'NO':>6}{r['largest']:>9,}"
            f"{r['advised'] / r['largest']:>9.0%}{r['advice_s']:>10.1f}{r['trials']:>10}"
            f"{r['lightning_s']:>8.1f}{r['advice_s'] / r['lightning_s']:>7.0%}  "
            f"{'-'.join(map(str, r['range'])) if r['range'] else 'linear'}"
        )
    print(
        f"\nlimit: MiB a fit may add over its start (VmHWM - RSS before); a trial: {STEPS} "
        f"steps in a fresh process; LT: Lightning's doubling-then-bisecting trials at the "
        f"fit time measured here per batch (no process start counted); ratio: advice time / "
        f"LT time. {time.monotonic() - started:.0f} s in all."
    )


if __name__ == "__main__":
    main(sys.argv[1:])
