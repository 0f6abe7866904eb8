"""Deep clean against the seed loop, three ways side by side, each in its own fresh process.

    python bench/bench_deepclean.py             # 20 runs a way: about 2 minutes on 2 cores
    python bench/bench_deepclean.py --runs 8    # a quicker look

The seed loop: ``clear_session(); gc.collect()``, build a Dense(512) model, compile adam, fit on
small random data, ``del model``. Ways: bare (no clear at all), plain clear_session + gc, and deep
clean (clear_session + gc + ``DeepClean.clean()``, each run bracketed by ``run_started`` /
``run_ended``). RSS and the Python object count are read at the start of every run, after that
way's clearing; growth per run is the least-squares slope over runs 5–20. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
WAYS = ("bare", "plain", "deep")
FIRST_RUN = 5  # runs 1-4 hold TensorFlow's one-time warm-up; the slope starts after it
MB = 1e6


def slope(ys: list[float]) -> float:
    """Least-squares slope of ys against 0..n-1."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    spread = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / spread


def loop(way: str, runs: int) -> dict[str, list[float]]:
    """The seed loop in this process; RSS (bytes) and object counts at the start of each run."""
    import gc
    import weakref

    import keras
    import numpy as np

    from keras_nbguard.collectors.process import default_rss_reader
    from keras_nbguard.prepare.deepclean import DeepClean

    rss = default_rss_reader()
    x = np.random.default_rng(0).random((1024, 32), dtype="float32")
    y = np.random.default_rng(1).random((1024, 1), dtype="float32")
    deep = DeepClean() if way == "deep" else None
    seen: dict[str, list[float]] = {"rss": [], "objects": [], "clean_s": [], "run_s": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        if way != "bare":
            keras.utils.clear_session()
            gc.collect()
        if deep is not None:
            report = deep.clean()
            seen["clean_s"].append(report.seconds)
            mark = deep.run_started()
        seen["rss"].append(rss())
        seen["objects"].append(len(gc.get_objects()))
        model = keras.Sequential(
            [keras.Input((32,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile("adam", "mse")
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
        if deep is not None:
            deep.run_ended(mark, [weakref.ref(model)])
        del model
        seen["run_s"].append(time.perf_counter() - t0)
    return seen


def measure(way: str, runs: int) -> dict[str, list[float]]:
    """``loop`` in a fresh interpreter, so no way inherits another's leftovers."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", way, "--runs", str(runs)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(loop(args.child, args.runs)))
        return
    first = FIRST_RUN if args.runs >= FIRST_RUN + 2 else 1
    print(
        f"seed loop, {args.runs} runs a way; growth per run = slope over runs {first}-{args.runs}"
    )
    growth: dict[str, tuple[float, float]] = {}
    for way in WAYS:
        seen = measure(way, args.runs)
        mb = slope([r / MB for r in seen["rss"][first - 1 :]])
        objects = slope(seen["objects"][first - 1 :])
        growth[way] = (mb, objects)
        clean = (
            f", clean {sum(seen['clean_s']) / len(seen['clean_s']) * 1000:.0f} ms/run"
            if seen["clean_s"]
            else ""
        )
        print(
            f"  {way:>5}: RSS {mb:+6.2f} MB/run, Python objects {objects:+8.0f}/run "
            f"(RSS run 1 {seen['rss'][0] / MB:.0f} MB -> run {args.runs} "
            f"{seen['rss'][-1] / MB:.0f} MB; {sum(seen['run_s']) / args.runs:.2f} s/run{clean})"
        )
    deep_mb, deep_objects = growth["deep"]
    for way in ("bare", "plain"):
        mb, objects = growth[way]
        print(
            f"  {way} / deep: RSS growth {_ratio(mb, deep_mb)}, "
            f"object growth {_ratio(objects, deep_objects)}"
        )
    print(f"  goal: <= 0.5 MB/run with deep clean: {'met' if deep_mb <= 0.5 else 'NOT met'}")


def _ratio(a: float, b: float) -> str:
    """a / b; when deep clean does not grow at all the ratio is unbounded, and says so."""
    return f"x{a / b:.0f}" if b > 1e-9 else f"{a:+.2f} vs {b:+.2f} (deep does not grow)"


if __name__ == "__main__":
    main()
