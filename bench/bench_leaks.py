"""How long ``find_leaks`` takes on a kernel holding about a million reachable objects.

Builds, in a real IPython shell, a namespace of ~1M plain objects (lists, dicts, instances) next
to TensorFlow/Keras' own heap, plus a few tiny models held the ways notebooks hold them (a name,
a list, a nested dict, an attribute, a closure, the output cache); then times ``find_leaks``
(median of several runs), with the models known to a registry and without.
Goal: <= 200 ms. Run: ``python bench/bench_leaks.py [--objects N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SETUP = """
import numpy as np
import keras

class Rec:
    def __init__(self, i):
        self.i = i
        self.tags = [i, i + 1]
        self.meta = {{"i": i}}

records = [Rec(i) for i in range({n_records})]            # 3 objects each
table = {{i: [i, str(i)] for i in range({n_table})}}      # 1 list each
def tiny(name):
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Dense(1)],
                         name=name)
    m.compile("adam", "mse")
    return m
model = tiny("named")
models = [tiny("in_list_%d" % i) for i in range(3)]
results = {{"run%d" % i: {{"model": None, "loss": 0.1}} for i in range(1000)}}
results["run2"]["model"] = tiny("nested")
class Trainer:
    def __init__(self, m):
        self.best = m
trainer = Trainer(tiny("attribute"))
def make_cb(m):
    def cb():
        return m
    return cb
cb = make_cb(tiny("closure"))
x = np.zeros((32, 4), "float32"); y = np.zeros((32, 1), "float32")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--objects",
        type=int,
        default=1_000_000,
        help="reachable objects to build in the namespace (default 1,000,000)",
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell

    from keras_nbguard.models import ModelRegistry, find_leaks

    shell = InteractiveShell.instance()
    n_records = args.objects * 3 // 4 // 3
    n_table = args.objects - 3 * n_records
    t0 = time.perf_counter()
    result = shell.run_cell(SETUP.format(n_records=n_records, n_table=n_table))
    assert result.success, result.error_in_exec
    result = shell.run_cell("tiny('fitted').fit(x, y, epochs=1, verbose=0)", store_history=True)
    assert result.success, result.error_in_exec
    build = time.perf_counter() - t0
    registry = ModelRegistry()  # as tracked runs fill it: every model from run 1 but `model`
    registry.note_run("bench", 1, [m for m in all_models() if m is not shell.user_ns["model"]])
    registry.note_run("bench", 2, [shell.user_ns["model"]])
    gc.collect()
    heap = len(gc.get_objects())
    print(
        f"namespace: {args.objects:,} reachable objects built in {build:.1f} s; "
        f"gc-tracked heap {heap:,} objects (TF/Keras included)"
    )
    for title, known in (("models known to the registry", registry), ("no registry", None)):
        times, report = [], None
        for _ in range(args.repeat):
            t = time.perf_counter()
            report = find_leaks(shell.user_ns, known, shell=shell)
            times.append(time.perf_counter() - t)
        assert report is not None
        median = statistics.median(times)
        print(
            f"find_leaks, {title}: median {median * 1000:.0f} ms (min {min(times) * 1000:.0f}, "
            f"max {max(times) * 1000:.0f}) over {args.repeat} runs; {report.scans} heap "
            f"scan(s), complete={report.complete}; goal <= 200 ms "
            f"{'met' if median <= 0.2 else 'NOT met'}"
        )
    print(f"models: {len(report.leaks)} reachable, {len(report.unreachable)} unreachable")
    report = find_leaks(shell.user_ns, registry, shell=shell)
    for leak in report.leaks:
        state = "stale" if leak.stale else "ok"
        print(f"  {state:<5} {leak.model_name:<10} {', '.join(leak.paths)}")


def all_models() -> list:
    """Every live model, as the runs that built them would have handed them over."""
    from keras_nbguard.models.frameworks import model_classes

    bases = model_classes()
    return [o for o in gc.get_objects() if isinstance(o, bases)]


if __name__ == "__main__":
    main()
