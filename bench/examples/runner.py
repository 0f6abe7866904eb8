"""Run an example's cells in a real IPython shell, ``n`` times, one way, and record each run.

    python -m bench.examples.runner mnist_convnet kerasrun --runs 3          # prints JSON
    python -m bench.examples.runner mnist_convnet,gan bare --keras tf_keras --out seen.json

Ways (``MODES``): ``bare`` (the extension not loaded, the train cell as is), ``kerasrun``
(``%%kerasrun --label NAME`` prepended), ``isolate`` (``%%kerasrun --isolate --label NAME``). The
setup cell runs once, as a plain cell, as a notebook runs it. ``measure()`` runs one way in a
FRESH Python process (its run history and IPython dir in a temp dir), so ways and Kerases never
contaminate each other; several examples named at once run one after the other in that process
(each with its own label), which the tests use to pay TensorFlow's import once.

Recorded per run (after the cell, outside it, so no ``Out`` entry): the cell's wall time as the
user waits for it, and the CPU time of the process (every thread) in it, steadier than the wall
time on a shared machine; RSS after ``gc.collect()`` and ``malloc_trim(0)`` (psutil), every way
alike: what is in use, not the free heap glibc happens to hold at that moment (tens of MiB up and
down from run to run with TensorFlow's threads, which would drown a slope of 1 MiB a run; the
magic trims at the start of each run, so its own readings are these); glibc's heap in use and
TensorFlow's CPU pool's peak (oneDNN on: what the pool keeps for good); the fit time (the
RunRecord's ``fit_seconds``; bare: ``Model.fit`` timed by a wrapper installed after the setup
cell); the record's findings lines and ``keras_nbguard.diagnose(label)``; live top-level Keras
models and how many of them belong to an earlier run: first seen after it, and their weights
unchanged since (models of earlier runs still alive after gc; those of the setup cell are not
counted; a model an earlier run made that this run trained is this run's: keras.io's
timeseries classification trains, each run, the model the run before it loaded). A failed cell is
recorded with its error text (an ``--isolate`` refusal included) and the loop goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("bare", "kerasrun", "isolate")
MAGIC = {
    "bare": "",
    "kerasrun": "%%kerasrun --label {name}\n",
    "isolate": "%%kerasrun --isolate --label {name}\n",
}
REPO = Path(__file__).resolve().parents[2]


def measure(
    names: str | list[str],
    mode: str,
    runs: int,
    keras: str = "keras3",
    timeout: float | None = None,
    environ: dict[str, str] | None = None,
    short: bool = False,
) -> dict[str, Any]:
    """``run_here`` in a fresh interpreter; returns ``{name: seen}`` (see ``run_example``).
    ``environ``: variables to set there (``TF_ENABLE_ONEDNN_OPTS``); ``short``: the examples'
    short versions (the tests'). A child that dies raises RuntimeError with the tail of its
    output."""
    names = names.split(",") if isinstance(names, str) else names
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "seen.json")
        env = {
            **os.environ,
            "KERAS_NBGUARD_DB": os.path.join(tmp, "runs.sqlite"),
            "IPYTHONDIR": os.path.join(tmp, "ipython"),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        for key in ("KERAS_BACKEND", "TF_USE_LEGACY_KERAS"):
            env.pop(key, None)
        if keras == "tf_keras":
            env["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf_keras too, as Keras 2 users have it
        env.update(environ or {})
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.examples.runner",
                ",".join(names),
                mode,
                "--runs",
                str(runs),
                "--keras",
                keras,
                "--out",
                out,
                *(["--short"] if short else []),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(
                f"{','.join(names)}/{mode}/{keras}: child exited "
                f"{done.returncode}\n--- stdout (tail)\n{done.stdout[-3000:]}\n"
                f"--- stderr (tail)\n{done.stderr[-3000:]}"
            )
        with open(out) as f:
            seen: dict[str, Any] = json.load(f)
    for by_name in seen.values():
        by_name["stderr_notes"] = sorted(
            {
                line.strip()
                for line in done.stderr.splitlines()
                if "keras_nbguard" in line or "NbguardWarning" in line
            }
        )[:20]
    return seen


# -- in the child ------------------------------------------------------------------------------
def run_here(
    names: list[str], mode: str, runs: int, keras: str, short: bool = False
) -> dict[str, Any]:
    """Every example of ``names`` in this process's shell, one after the other."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("colors", "nocolor")
    if mode != "bare":
        shell.run_line_magic("load_ext", "keras_nbguard")
    return {name: run_example(shell, name, mode, runs, keras, short) for name in names}


def run_example(
    shell: Any, name: str, mode: str, runs: int, keras: str, short: bool = False
) -> dict[str, Any]:
    """The example's setup cell once, then its train cell ``runs`` times (``short``: the short
    version's cells)."""
    import gc

    import psutil

    from bench.examples import get

    example = get(name)
    process = psutil.Process()
    seen: dict[str, Any] = {
        "name": name,
        "mode": mode,
        "keras": keras,
        "follows": example.follows,
        "fits": example.fits,
        "short": short,
        "runs": [],
    }
    result = shell.run_cell(example.cell("setup", keras, short), store_history=True)
    if not result.success:
        seen["setup_error"] = _error_text(result)
        return seen
    model_class = _model_class(keras)
    fit_timer = _FitTimer(model_class) if mode == "bare" else None
    # id -> (weakref, the last run after which it was first seen or found trained, its weights)
    born: dict[int, tuple[Any, int, Any]] = {}
    gc.collect()
    _note_models(model_class, born, 0)
    seen["rss_after_setup"] = process.memory_info().rss
    source = MAGIC[mode].format(name=name) + example.cell("train", keras, short)
    try:
        for n in range(1, runs + 1):
            if fit_timer:
                fit_timer.seconds = None
            t0, cpu0 = time.perf_counter(), time.process_time()
            result = shell.run_cell(source, store_history=True)
            cell_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
            if mode != "bare":
                _flush_history()
            gc.collect()
            _trim_heap()
            run: dict[str, Any] = {
                "n": n,
                "ok": result.success,
                "cell_s": cell_s,
                "cpu_s": cpu_s,
                "rss": process.memory_info().rss,
                "heap": _heap_in_use(),
                "pool": _tf_pool_peak(),
                **_mapping_rss(),
            }
            if not result.success:
                run["error"] = _error_text(result)
            alive = _note_models(model_class, born, n)
            run["live_models"] = len(alive)
            run["earlier_alive"] = sum(1 <= born[i][1] < n for i in alive)  # runs 1..n-1
            if fit_timer:
                run["fit_s"] = fit_timer.seconds
            else:
                run.update(_record_of(name))
            seen["runs"].append(run)
    finally:
        if fit_timer:
            fit_timer.restore()
    return seen


def _trim_heap() -> None:
    """The free heap given back as the magic gives it back: glibc's ``malloc_trim(0)``, or a
    preloaded jemalloc's purge (``--modes kerasrun+jemalloc``)."""
    from keras_nbguard.collectors.allocated import give_back_free_pages

    give_back_free_pages()


def _heap_in_use() -> int | None:
    """Bytes the C heap has handed out and not had back (glibc's ``mallinfo2``: in-use chunks
    plus mmapped ones; jemalloc's ``stats.allocated``): what is kept, without the free heap that
    makes RSS swing. None off glibc >= 2.33."""
    from keras_nbguard.collectors.allocated import heap_in_use

    return heap_in_use()


def _tf_pool_peak() -> int | None:
    """TensorFlow's CPU allocator's peak in use since the process began (oneDNN's pool, which
    keeps what it reaches); None without TensorFlow's runtime or with oneDNN off."""
    from keras_nbguard.collectors.gpu import TfGpu

    tf = TfGpu.if_imported()
    pool = None if tf is None else tf.host_pool()
    return None if pool is None else pool[1]


LARGE_MAPPING = 64 * 2**20
KINDS = ("pool", "heap", "anon", "file")


def _mapping_rss() -> dict[str, int]:
    """The process's RSS by kind of mapping (``/proc/self/smaps``), to say where a rise sits:
    ``pool``, writable anonymous mappings of ``LARGE_MAPPING`` bytes or more — TensorFlow's CPU
    pool's regions (oneDNN: its allocator asks glibc for 128 MiB and more at a time, which glibc
    maps apart; the pool touches more of them as its chunks land in new places, up to their
    size, and never gives a page back), and ``pool_size``, what they map; ``heap``, glibc's
    main heap; ``anon``, other anonymous memory (threads' arenas and stacks, Python's own
    arenas); ``file``, file-backed (libraries). {} off Linux."""
    rss = dict.fromkeys(KINDS, 0)
    pool_size = 0
    kind = "file"
    try:
        with open("/proc/self/smaps") as maps:
            for line in maps:
                if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                    fields = line.split()
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    path = fields[5] if len(fields) > 5 else ""
                    if path == "[heap]":
                        kind = "heap"
                    elif path and not path.startswith("[anon"):
                        kind = "file"
                    elif "w" in fields[1] and end - start >= LARGE_MAPPING and not path:
                        kind = "pool"
                        pool_size += end - start
                    else:
                        kind = "anon"
                elif line.startswith("Rss:"):
                    rss[kind] += int(line.split()[1]) * 1024
    except OSError:
        return {}
    return {**{f"rss_{k}": v for k, v in rss.items()}, "pool_size": pool_size}


def _flush_history() -> None:
    """Wait until the run history thread has written the run: ``gc.get_objects()`` while it
    builds a tuple from a generator (``dataclasses.asdict``) makes CPython raise SystemError
    there (a tuple being resized must have one reference), and that run's record is lost."""
    import keras_nbguard

    store = getattr(keras_nbguard.get_session(), "store", None)
    if store is not None and hasattr(store, "flush"):
        store.flush()


def _model_class(keras: str) -> Any:
    package = "tf_keras" if keras == "tf_keras" else "keras"
    return sys.modules[package].Model


def _note_models(model_class: Any, born: dict[int, tuple[Any, int, Any]], n: int) -> list[int]:
    """The ids of live top-level models; those not seen before, or whose weights changed since, are
    noted as run n's."""
    import gc
    import weakref

    models = [o for o in gc.get_objects() if isinstance(o, model_class)]
    inner = {id(getattr(m, "_functional", None)) for m in models}  # a Sequential's own graph
    # the setup cell's models are never an earlier run's; their weights, which a run trains,
    # change every model built on them (each earlier run's WGAN on the setup's generator):
    # no sign of being current, so they are left out of the others' fingerprints
    setup = [ref() for ref, at, _ in born.values() if at == 0 and ref() is not None]
    setup_ids = {id(m) for m in setup}
    setup_vars = {id(v) for m in setup for v in _variables(m)}
    alive = []
    for m in models:
        if id(m) in inner:
            continue
        if id(m) in setup_ids:
            alive.append(id(m))
            continue
        known, weights = born.get(id(m)), _weights_mark(m, setup_vars)
        if known is None or known[0]() is not m or known[2] != weights:
            born[id(m)] = (weakref.ref(m), n, weights)
        alive.append(id(m))
    return alive


def _weights_mark(model: Any, setup: set[int]) -> int | None:
    """A fingerprint of the model's own weights (not the setup cell's models', ``setup``: their
    ids): a run that trains it changes them (a fit, or a loop of its own); a model that only
    shares an optimizer or is compiled again keeps them."""
    import numpy as np

    try:
        own = [v for v in _variables(model) if id(v) not in setup]
        return (
            hash(tuple(float(np.sum(np.asarray(v), dtype="float64")) for v in own)) if own else None
        )
    except Exception:  # not built yet, or weights that can't be read: no change seen
        return None


def _variables(model: Any) -> list[Any]:
    try:
        return list(model.weights)
    except Exception:
        return []


def _record_of(label: str) -> dict[str, Any]:
    """What keras_nbguard recorded about the label's last run."""
    import keras_nbguard

    records = keras_nbguard.runs(label, this_kernel=True)
    if not records:
        return {"record": None}
    r = records[-1]
    return {
        "record": r.run_number,
        "status": r.status,
        "wall_s": r.wall_seconds,
        "prepare_s": r.prepare_seconds,
        "fit_s": r.fit_seconds,
        "fit_reason": r.fit_reason,
        "fits": len(r.fits),
        "findings": list(r.findings),
        "rss_trend": r.memory_note,  # the summary's row: whose the RSS the runs leave is
        "pool_recorded": r.host_pool_peak,
        "pool_in_use_recorded": r.host_pool_in_use,
        "heap_recorded": r.heap_in_use,
        "blocks_recorded": r.python_blocks,
        "keras_seen": r.keras,
        "isolated": r.isolated,
        "cleared": r.cleared,
        "released": None if r.released_models is None else r.released_models.count,
        "stale": None if r.stale_models is None else r.stale_models.count,
        "stale_paths": [] if r.stale_models is None else list(r.stale_models.paths)[:5],
        "diagnose": [f"{f.kind}: {f.message}" for f in keras_nbguard.diagnose(label)],
    }


def _error_text(result: Any) -> str:
    error = result.error_before_exec or result.error_in_exec
    return f"{type(error).__name__}: {error}"


class _FitTimer:
    """Bare runs: ``Model.fit`` timed by a plain wrapper (the sum of a run's fits)."""

    def __init__(self, model_class: Any) -> None:
        self.model_class = model_class
        self.own = model_class.__dict__.get("fit")  # None: inherited (Keras 3's Trainer)
        self.original = model_class.fit
        self.seconds: float | None = None
        timer = self

        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return timer.original(model, *args, **kwargs)
            finally:
                timer.seconds = (timer.seconds or 0.0) + time.perf_counter() - t0

        model_class.fit = fit

    def restore(self) -> None:
        if self.own is None:
            del self.model_class.fit
        else:
            self.model_class.fit = self.own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", help="comma-separated example names")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keras", choices=("keras3", "tf_keras"), default="keras3")
    parser.add_argument("--out", help="write the JSON here (default: print it)")
    parser.add_argument("--short", action="store_true", help="the examples' short versions")
    args = parser.parse_args()
    if args.keras == "tf_keras" and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "KERAS_NBGUARD_DB" not in os.environ:  # run by hand: never the user's run history
        os.environ["KERAS_NBGUARD_DB"] = os.path.join(tempfile.mkdtemp(), "runs.sqlite")
    seen = run_here(args.names.split(","), args.mode, args.runs, args.keras, args.short)
    text = json.dumps(seen)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
