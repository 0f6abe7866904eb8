"""``%%kerasrun --isolate`` against in-process runs, side by side in one run. Prints figures;
asserts nothing.

    python bench/bench_isolate.py            # about 4 minutes on 2 cores
    python bench/bench_isolate.py --runs 5   # a smoke run

The seed cell (build, compile and fit a small model) runs N times in each of three ways, each in
a fresh "kernel" process (a real IPython shell with keras_nbguard loaded):

- isolated: each run in a fresh child process; the kernel never imports TensorFlow;
- isolated --prestart: the next run's process is started (TensorFlow imported) as a run ends;
- in-process: %%kerasrun as usual (clear_session, deep clean).

For each: the kernel's RSS slope over the runs (least squares, after the first), and the median
time a run costs the user (from the cell's start to its end, in the kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SEED = """
import numpy as np
import keras
rng = np.random.default_rng(0)
x = rng.random((2048, 32), dtype="float32")
y = rng.random((2048, 1), dtype="float32")
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1)])
model.compile("adam", "mse")
loss = float(model.fit(x, y, epochs=2, batch_size=64, verbose=0).history["loss"][-1])
del model
"""

KERNEL = """
import json, sys, time, psutil
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "keras_nbguard")
line, runs, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rss, seconds = [], []
for _ in range(runs):
    t = time.perf_counter()
    assert shell.run_cell(f"%%kerasrun --quiet {line}\\n{seed}").success
    seconds.append(time.perf_counter() - t)
    rss.append(psutil.Process().memory_info().rss)
    if "--prestart" in line:
        time.sleep(6)  # the user reads the result: the next process gets ready meanwhile
print(json.dumps({"rss": rss, "seconds": seconds, "tf": "tensorflow" in sys.modules}))
"""


def kernel(line: str, runs: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["KERAS_NBGUARD_DB"] = os.path.join(tempfile.mkdtemp(), "history.db")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KERNEL), line, str(runs), SEED],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def slope(ys: list[float]) -> float:
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    ways = {
        "isolated": "--isolate --label seed",
        "isolated --prestart": "--isolate --prestart --label seed",
        "in-process": "--label seed",
    }
    seen = {name: kernel(line, runs) for name, line in ways.items()}
    base = statistics.median(seen["in-process"]["seconds"][1:])
    print(f"{runs} runs of the seed cell each; kernel RSS slope over runs 2..{runs}")
    print(
        f"{'':22} {'RSS MiB/run':>12} {'median s/run':>13} {'vs in-process':>14} "
        f"{'TF in kernel':>13}"
    )
    for name, got in seen.items():
        mib = slope([r / 2**20 for r in got["rss"][1:]])
        per_run = statistics.median(got["seconds"][1:])
        print(f"{name:22} {mib:12.2f} {per_run:13.2f} {per_run - base:+13.2f}s {got['tf']!s:>13}")


if __name__ == "__main__":
    main()
