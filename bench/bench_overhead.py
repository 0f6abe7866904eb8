"""What ``%%kerasrun`` adds to the time a cell holds the kernel, on Keras' own examples.

    python bench/bench_overhead.py                   # every example in bench/examples, 6 pairs
    python bench/bench_overhead.py --only mnist_convnet,dense512 --pairs 10
    python bench/bench_overhead.py --apart 2        # also each way in kernels of its own
    python bench/bench_overhead.py --jupyter 2      # also in real Jupyter kernels, as in a notebook
    python bench/bench_overhead.py --keras tf_keras # the examples that run on Keras 2

One fresh process per example, in a real ``InteractiveShell``: the setup cell once, one warm-up of
each way, then the train cell bare and under ``%%kerasrun --quiet`` alternately (ABAB, so the
machine's load falls on both alike). A run's time is ``shell.run_cell``'s whole call, start to
return: our preparation, the cell, and everything we do after it before the kernel is free again.
Also printed: our own parts as the run's record has them (``own_time``: clear, gc, leak check,
...) and the gen-2 collections a run saw (ours, and the interpreter's own during the fit).
With ``--apart ROUNDS``, also each way in kernels of its own, as a user re-runs a cell in one
notebook: in the interleaved kernel, a ``%%kerasrun`` run's collection also frees what the bare
run before it left, and the bare run finds the heap the magic cleaned; apart, neither pays for
the other (the bare kernel loads no extension: nothing of ours is frozen there either).
With ``--jupyter ROUNDS``, also in real Jupyter kernels (ipykernel, through jupyter_client), as
in a notebook: request to reply, the summary shown.
Goal (issue 23): the magic adds <= max(50 ms, 5%).
``dense512`` is the issue's own cell: a Dense(512) model built, compiled and fit for one epoch.
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_cells import FIT, SETUP
from bench.examples import KERASES, Example, examples

# the issue's own cell: bench_cells.py's Dense(512) model, built, compiled and fit for one epoch
DENSE512 = Example(
    name="dense512",
    follows="issue 23's Dense(512) cell",
    setup=SETUP,
    train=f"model = make_model()\n{FIT}\n",
    kerases=KERASES,
)

CHILD = """
import gc, json, os, statistics, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["KERAS_NBGUARD_DB"] = ":memory:"
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
setup, train, pairs = json.loads(sys.stdin.read())
shell.run_cell("%load_ext keras_nbguard")
assert shell.run_cell(setup).success
def timed(source):
    start = time.perf_counter()
    result = shell.run_cell(source, store_history=True)
    seconds = time.perf_counter() - start
    if not result.success:
        raise SystemExit(f"the cell failed: {result.error_in_exec!r}")
    return seconds
full = [0]
gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 2
                    and full.__setitem__(0, full[0] + 1))
magic = "%%kerasrun --quiet --label bench\\n" + train
timed(train); timed(magic)  # warm-up: TensorFlow's first traces, the leak finder's import
bare, ours, collections = [], [], []
for _ in range(pairs):
    bare.append(timed(train))
    before = full[0]
    ours.append(timed(magic))
    collections.append(full[0] - before)
import keras_nbguard
parts = {}
for record in keras_nbguard.runs("bench")[1:]:
    for name, seconds in record.own_time:
        parts.setdefault(name, []).append(seconds)
print(json.dumps({"bare": bare, "magic": ours, "collections": collections,
                  "parts": {k: statistics.median(v) for k, v in parts.items()},
                  "frozen": keras_nbguard.session.core.get_session().frozen.describe()}))
"""


# One way only, in a kernel of its own: the cell re-run ``runs`` times after a warm-up, as a user
# re-runs it. Bare is a kernel without the extension (no freeze either).
SEQUENCE = """
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["KERAS_NBGUARD_DB"] = ":memory:"
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
setup, train, runs, magic = json.loads(sys.stdin.read())
if magic:
    shell.run_cell("%load_ext keras_nbguard")
    train = "%%kerasrun --quiet --label bench\\n" + train
assert shell.run_cell(setup).success
times = []
for _ in range(runs + 1):  # the first warms up: TensorFlow's first traces
    start = time.perf_counter()
    result = shell.run_cell(train, store_history=True)
    times.append(time.perf_counter() - start)
    if not result.success:
        raise SystemExit(f"the cell failed: {result.error_in_exec!r}")
print(json.dumps({"times": times[1:]}))
"""


def measure_apart(setup: str, train: str, runs: int, rounds: int) -> dict:
    """Bare and ``%%kerasrun`` each in kernels of their own, ``rounds`` of each, the order
    swapped every round (so the machine's drift falls on both alike)."""
    times: dict[str, list[float]] = {"bare": [], "magic": []}
    for i in range(rounds):
        for way in ("bare", "magic") if i % 2 == 0 else ("magic", "bare"):
            got = _child(SEQUENCE, [setup, train, runs, way == "magic"])
            if "error" in got:
                return got
            _add_kernel(times, way, got["times"])
    return times


def _add_kernel(times: dict, way: str, runs: list[float]) -> None:
    """One kernel's re-runs into ``times``, and its median apart (``kernels``): kernels of one
    way differ by more than the magic costs on some examples, and the verdict should show it."""
    times[way] += runs
    times.setdefault("kernels", {"bare": [], "magic": []})[way].append(statistics.median(runs))


def measure_jupyter(setup: str, train: str, runs: int, rounds: int) -> dict:
    """Each way in real Jupyter kernels, ``rounds`` of each, the order swapped every round: the
    time from the execute request to its reply, the summary shown under the magic."""
    from jupyter_client.manager import start_new_kernel

    times: dict[str, list[float]] = {"bare": [], "magic": []}
    for i in range(rounds):
        for way in ("bare", "magic") if i % 2 == 0 else ("magic", "bare"):
            env = {**os.environ, "KERAS_NBGUARD_DB": ":memory:", "TF_CPP_MIN_LOG_LEVEL": "2"}
            manager, client = start_new_kernel(kernel_name="python3", env=env)
            try:
                if way == "magic":
                    _execute(client, "%load_ext keras_nbguard")
                _execute(client, setup)
                cell = ("%%kerasrun --label bench\n" if way == "magic" else "") + train
                _add_kernel(times, way, [_execute(client, cell) for _ in range(runs + 1)][1:])
            except RuntimeError as exc:
                return {"error": [str(exc)]}
            finally:
                client.stop_channels()
                manager.shutdown_kernel(now=True)
    return times


def _execute(client: Any, code: str) -> float:
    """Seconds from the execute request to its reply (outputs read and dropped)."""
    start = time.perf_counter()
    reply = client.execute_interactive(code, timeout=600, output_hook=lambda message: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(reply["content"].get("evalue", "the cell failed"))
    return time.perf_counter() - start


def measure(setup: str, train: str, pairs: int) -> dict:
    return _child(CHILD, [setup, train, pairs])


def _child(code: str, arguments: list) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(arguments),
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def verdict(name: str, times: dict) -> str:
    """The medians of both ways, what the magic adds, and whether that meets the goal."""
    bare, magic = statistics.median(times["bare"]), statistics.median(times["magic"])
    added = magic - bare
    goal = max(0.050, 0.05 * bare)
    return (
        f"  {name:<20} bare {bare:6.3f} s  %%kerasrun {magic:6.3f} s  added "
        f"{added * 1000:+6.0f} ms ({added / bare:+.1%})  "
        f"{'meets' if added <= goal else 'misses'} the goal"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated names (dense512 and the examples')")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument(
        "--apart",
        type=int,
        metavar="ROUNDS",
        default=0,
        help="also: each way in kernels of its own, ROUNDS of each, --pairs runs a kernel",
    )
    parser.add_argument(
        "--jupyter",
        type=int,
        metavar="ROUNDS",
        default=0,
        help="also: each way in real Jupyter kernels, ROUNDS of each, --pairs runs a kernel",
    )
    parser.add_argument("--keras", choices=KERASES, default="keras3")
    args = parser.parse_args()
    if args.keras == "tf_keras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"  # every child's tf.keras is tf_keras, too
    everything = {"dense512": DENSE512, **examples()}
    cases = {
        name: (e.cell("setup", args.keras), e.cell("train", args.keras))
        for name, e in everything.items()
        if args.keras in e.kerases
    }
    chosen = args.only.split(",") if args.only else list(cases)
    unknown = [name for name in chosen if name not in cases]
    if unknown:
        parser.error(f"not on {args.keras}: {', '.join(unknown)}; these are: {', '.join(cases)}")
    print(
        f"%%kerasrun's cost per run on {args.keras}, {args.pairs} interleaved pairs per example, "
        f"{os.cpu_count()} CPUs; medians; goal: + <= max(50 ms, 5%)"
    )
    for name in chosen:
        got = measure(*cases[name], args.pairs)
        if "error" in got:
            print(f"  {name:<20} failed: {got['error']}")
            continue
        parts = ", ".join(
            f"{k} {v * 1000:.0f}" for k, v in sorted(got["parts"].items(), key=lambda kv: -kv[1])
        )
        print(
            f"{verdict(name, got)}; ours [ms]: {parts}; gen-2 collections a run (ours and "
            f"Python's own): {min(got['collections'])}-{max(got['collections'])}"
        )
    print(f"  gc: {got.get('frozen', 'n/a')}" if chosen else "")
    if args.apart:
        print(
            f"each way in kernels of its own (bare: no extension loaded), {args.apart} kernels "
            f"each, {args.pairs} re-runs a kernel after a warm-up; medians over all re-runs:"
        )
        _each_way(chosen, cases, lambda case: measure_apart(*case, args.pairs, args.apart))
    if args.jupyter:
        print(
            f"in real Jupyter kernels (bare: no extension loaded), {args.jupyter} kernels each, "
            f"{args.pairs} re-runs a kernel after a warm-up, request to reply, the summary shown; "
            "medians over all re-runs:"
        )
        _each_way(chosen, cases, lambda case: measure_jupyter(*case, args.pairs, args.jupyter))


def _each_way(chosen: list[str], cases: dict, measured: Any) -> None:
    """A verdict line per example from ``measured(case)`` (or what failed)."""
    for name in chosen:
        times = measured(cases[name])
        if "error" in times:
            print(f"  {name:<20} failed: {times['error']}")
            continue
        print(verdict(name, times))
        kernels = times.get("kernels")
        if kernels:
            print(f"  {'':<20} {_kernels_line(kernels)}")


def _kernels_line(kernels: dict[str, list[float]]) -> str:
    """Each kernel's median, by way, and how far kernels of one way lie apart."""
    spread = max(max(each) - min(each) for each in kernels.values())
    return (
        f"each kernel's median: bare {', '.join(f'{t:.3f}' for t in kernels['bare'])} s; "
        f"%%kerasrun {', '.join(f'{t:.3f}' for t in kernels['magic'])} s "
        f"(kernels of one way up to {spread * 1000:.0f} ms apart)"
    )


if __name__ == "__main__":
    main()
