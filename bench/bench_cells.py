"""RSS growth per run of four common notebook cell shapes, bare vs under ``%%kerasrun``.

    python bench/bench_cells.py                       # 14 runs, 4 shapes x 3 ways: ~3 minutes
    python bench/bench_cells.py --runs 8 --shapes last_line,appended --ways kerasrun

Each (shape, way) runs in its own fresh process, in a real ``InteractiveShell``: a setup cell once
(data, ``make_model()`` = Dense(512) compiled adam/mse, ``histories = []``), then the shape's cell
re-run with ``store_history=True``, so ``Out[n]`` holds a cell's last value as in a notebook. Ways:
bare (the cell as is, no extension), keep_stale (``%%kerasrun --keep-stale``: clear and deep
clean, but earlier runs' models left where IPython and Keras keep them) and kerasrun (the
default ``%%kerasrun --label cell --quiet``). RSS is read from the child's Python between cells
(never in a cell, so no ``Out`` entry); growth per run is the least-squares slope over runs 5–14.
After the last run: live top-level ``keras.Model`` instances (after ``gc.collect()``), and for
``appended`` whether every kept History still holds its loss. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
WAYS = ("bare", "keep_stale", "kerasrun")
FIRST_RUN = 5  # runs 1-4 hold TensorFlow's one-time warm-up; the slope starts after it
MB = 1e6
GOAL_MB = 1.0
MAGIC = {
    "bare": "",
    "keep_stale": "%%kerasrun --label cell --quiet --keep-stale\n",
    "kerasrun": "%%kerasrun --label cell --quiet\n",
}
SETUP = """\
import numpy as np
import keras
import tensorflow as tf
x = np.random.default_rng(0).random((1024, 32), dtype="float32")
y = np.random.default_rng(1).random((1024, 1), dtype="float32")
def make_model():
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
histories = []
"""
FIT = "model.fit(x, y, epochs=1, batch_size=32, verbose=0)"
SHAPES = {
    "assigned": f"model = make_model()\nhistory = {FIT}",
    "last_line": f"model = make_model()\n{FIT}",
    "appended": f"model = make_model()\nhistories.append({FIT})",
    "custom_loop": """\
model = make_model()
opt = keras.optimizers.Adam()
@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = keras.ops.mean((model(xb, training=True) - yb) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss
for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(32):
    loss = train_step(xb, yb)
""",
}


def slope(ys: list[float]) -> float:
    """Least-squares slope of ys against 0..n-1."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    spread = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / spread


def _run(shell: Any, src: str, what: str) -> None:
    """One cell, as a notebook runs it; a failed cell stops the bench with the cell's error."""
    result = shell.run_cell(src, store_history=True)
    if not result.success:
        error = result.error_before_exec or result.error_in_exec
        raise RuntimeError(f"{what} failed: {type(error).__name__}: {error}") from error


def loop(shape: str, way: str, runs: int) -> dict[str, Any]:
    """The shape's cell re-run in a real shell in this process; RSS (bytes) before each run."""
    import gc

    from IPython.core.interactiveshell import InteractiveShell

    from keras_nbguard.collectors.process import default_rss_reader

    rss = default_rss_reader()
    shell = InteractiveShell.instance()
    shell.run_line_magic("colors", "nocolor")  # a failed cell's traceback, readable in the report
    _run(shell, SETUP, "setup cell")
    if way != "bare":
        shell.run_line_magic("load_ext", "keras_nbguard")
    src = MAGIC[way] + SHAPES[shape]
    seen: dict[str, Any] = {"rss": [], "run_s": []}
    for i in range(runs):
        seen["rss"].append(rss())
        t0 = time.perf_counter()
        _run(shell, src, f"{shape}/{way} run {i + 1}")
        seen["run_s"].append(time.perf_counter() - t0)
    import keras

    gc.collect()
    models = [o for o in gc.get_objects() if isinstance(o, keras.Model)]
    inner = {id(getattr(m, "_functional", None)) for m in models}  # a Sequential's own graph
    seen["models"] = sum(id(m) not in inner for m in models)
    del models
    kept = shell.user_ns["histories"]
    seen["histories"] = [len(kept), sum(bool(h.history.get("loss")) for h in kept)]
    if way != "bare":
        shell.run_line_magic("unload_ext", "keras_nbguard")
    return seen


def measure(shape: str, way: str, runs: int) -> dict[str, Any]:
    """``loop`` in a fresh interpreter, its run history and IPython's own history in a temp dir
    (never the user's); a failure shows the child's own output, then stops."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "KERAS_NBGUARD_DB": os.path.join(tmp, "runs.sqlite"),
            "IPYTHONDIR": tmp,
            "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
        }
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", shape, way, "--runs", str(runs)],
            capture_output=True,
            text=True,
            env=env,
        )
    if done.returncode != 0:
        sys.exit(
            f"\n{shape}/{way}: child exited {done.returncode}\n--- stdout (tail)\n"
            f"{done.stdout[-3000:]}\n--- stderr (tail)\n{done.stderr[-3000:]}"
        )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    seen["notes"] = [
        line
        for line in done.stderr.splitlines()
        if "keras_nbguard" in line or "Traceback" in line or "Error" in line
    ]
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=14)
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help=f"comma-separated, of: {', '.join(SHAPES)}"
    )
    parser.add_argument(
        "--ways", default=",".join(WAYS), help=f"comma-separated, of: {', '.join(WAYS)}"
    )
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, way = args.child
        print(json.dumps(loop(shape, way, args.runs)))
        return
    shapes, ways = args.shapes.split(","), args.ways.split(",")
    for name, picked, known in (("shape", shapes, SHAPES), ("way", ways, WAYS)):
        if unknown := [p for p in picked if p not in known]:
            parser.error(f"unknown {name}(s): {', '.join(unknown)}")
    first = FIRST_RUN if args.runs >= FIRST_RUN + 2 else 1
    print(
        f"{args.runs} runs per (shape, way), each in a fresh process; growth = RSS slope over "
        f"runs {first}-{args.runs}, MB = 1e6 bytes"
    )
    t0 = time.perf_counter()
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for shape in shapes:
        for way in ways:
            seen = measure(shape, way, args.runs)
            seen["mb"] = slope([r / MB for r in seen["rss"][first - 1 :]])
            table.setdefault(shape, {})[way] = seen
            print(
                f"  {shape:>11} {way:>10}: {seen['mb']:+6.2f} MB/run (RSS run 1 "
                f"{seen['rss'][0] / MB:.0f} MB -> run {args.runs} {seen['rss'][-1] / MB:.0f} "
                f"MB; {sum(seen['run_s']) / args.runs:.2f} s/run)",
                flush=True,
            )
    print(
        f"\nMB/run (s/run) {' | '.join(f'{w:>16}' for w in WAYS)} | bare / kerasrun | "
        f"live models at end ({'/'.join(WAYS)})"
    )
    for shape, by_way in table.items():
        cells = [
            f"{by_way[w]['mb']:+6.2f} ({sum(by_way[w]['run_s']) / args.runs:.2f} s)"
            if w in by_way
            else "-"
            for w in WAYS
        ]
        ratio = (
            _ratio(by_way["bare"]["mb"], by_way["kerasrun"]["mb"])
            if {"bare", "kerasrun"} <= set(by_way)
            else "-"
        )
        models = "/".join(str(by_way[w]["models"]) if w in by_way else "-" for w in WAYS)
        print(f"{shape:>14} {' | '.join(f'{c:>16}' for c in cells)} | {ratio:>15} | {models}")
    for shape, by_way in table.items():
        for way, seen in by_way.items():
            if shape == "appended":
                count, with_loss = seen["histories"]
                print(
                    f"  appended/{way}: {with_loss}/{count} kept histories still hold "
                    f"history['loss']"
                )
            for note in dict.fromkeys(seen["notes"]):
                print(f"  note {shape}/{way} (stderr): {note}")
    if "kerasrun" in ways:
        met = all(by_way["kerasrun"]["mb"] <= GOAL_MB for by_way in table.values())
        print(
            f"goal: <= {GOAL_MB} MB/run under %%kerasrun for every shape: "
            f"{'met' if met else 'NOT met'}"
        )
    print(f"wall: {time.perf_counter() - t0:.0f} s")


def _ratio(a: float, b: float) -> str:
    """bare / kerasrun; unbounded when kerasrun does not grow, and says so."""
    return f"x{a / b:.1f}" if b > 0.05 else "flat"


if __name__ == "__main__":
    main()
