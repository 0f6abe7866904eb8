"""The GPU check kit: what keras_nbguard claims about a GPU, measured on one, in one run.

    python bench/gpu_check.py            # the whole kit (about 5 minutes on one GPU, at most 8)
    python bench/gpu_check.py --quick    # 3 repeated runs instead of 10, no second backend
    python bench/gpu_check.py --only jax,torch,advice_jax,advice_torch   # no TensorFlow there
    python bench/gpu_check.py --cpu-dry-run --quick   # the kit's own plumbing, here, no GPU

Every check runs the product the way a user does: a real IPython shell in a fresh process
(growth and caps are set before TensorFlow touches the GPU, so each setting needs its own
process), ``%load_ext keras_nbguard`` first, then ``%%kerasrun`` cells; the figures are read
back from the run records (``keras_nbguard.runs()``: collectors/gpu.py, collectors/allocators.py)
and from NVML through ``NvmlReader``. Each check prints its figures and asserts what the manual
claims. Without a GPU, a driver or NVML it prints ``no GPU: <reason>`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
MIB = 2**20
MARK = "GPU-KIT-RESULT "
CAP_MIB = 1024  # --gpu-limit of the out-of-memory check
SMALL_PART = 0.25  # growth on: a small fit's process use stays under this share of the device
MOST = 0.5  # --no-gpu-growth: TensorFlow reserves more than this share of the device
ADVICE_MIB = 900  # batch_advice's limit inside the --gpu-limit process (the rest: its own use)
DRY_HOST_MIB = 150  # --cpu-dry-run: --host-limit in place of the GPU cap
GIVEN_BACK_MIB = 256  # --isolate: the device's use after a run, over the kit's start, stays under
WITHIN = 1.25  # batch_advice: 1.25x the advised batch runs out of memory (within 20% of it)


# -- whether there is a GPU at all ---------------------------------------------------------------
def no_gpu_reason() -> str | None:
    """Why this machine can't run the kit (no NVML, no driver, no device), or None."""
    from keras_nbguard.collectors.gpu import NvmlReader

    _used, total, _process, why = NvmlReader().read()
    if total is None:
        return why or "NVML reports no device"
    return None


def device_used() -> int | None:
    from keras_nbguard.collectors.gpu import NvmlReader

    return NvmlReader().read()[0]


# -- one fresh process: a real IPython shell running cells ---------------------------------------
CHILD = r"""
import json, os, sys, traceback
sys.path.insert(0, {root!r})
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.user_ns["_kit"] = {{}}
cells, failed = json.loads(sys.stdin.read()), []
for i, cell in enumerate(cells):
    result = shell.run_cell(cell, store_history=True)
    if not result.success and not cell.startswith("%%kerasrun"):
        failed.append(f"cell {{i}}: {{result.error_before_exec or result.error_in_exec!r}}")
import keras_nbguard
records = [r.to_dict() for r in keras_nbguard.runs(this_kernel=True)]
print({mark!r} + json.dumps({{"records": records, "kit": shell.user_ns["_kit"],
                               "failed": failed}}, default=str), flush=True)
"""


def run_cells(
    cells: list[str], env: dict[str, str] | None = None, timeout: float = 300
) -> dict[str, Any]:
    """Run ``cells`` in a fresh process's IPython shell; its run records and ``_kit`` back."""
    with tempfile.TemporaryDirectory() as tmp:
        child_env = {
            **os.environ,
            "KERAS_NBGUARD_DB": os.path.join(tmp, "runs.sqlite"),
            "IPYTHONDIR": os.path.join(tmp, "ipython"),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            # the repo first, then what the caller's path holds (wheels carried to a GPU box)
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        proc = subprocess.run(
            [sys.executable, "-c", CHILD.format(root=ROOT, mark=MARK)],
            input=json.dumps(cells),
            capture_output=True,
            text=True,
            env=child_env,
            timeout=timeout,
            cwd=tmp,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise AssertionError(
            f"the check's process failed (rc {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    result = json.loads(lines[-1][len(MARK) :])
    assert not result["failed"], f"cells failed: {result['failed']}\n{proc.stderr[-3000:]}"
    return result


SETUP = """
import numpy as np
import keras
from keras_nbguard.collectors.gpu import NvmlReader
rng = np.random.default_rng(0)
x = rng.random((2048, 32), dtype="float32"); y = rng.random((2048, 1), dtype="float32")
images = rng.random((BATCH_ROWS, 64, 64, 3), dtype="float32")
labels = rng.integers(0, 10, BATCH_ROWS)
def mlp():
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile("adam", "mse")
    return m
def convnet():
    m = keras.Sequential([keras.Input((64, 64, 3))]
                         + [keras.layers.Conv2D(64, 3, padding="same", activation="relu")
                            for _ in range(3)]
                         + [keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(10, dtype="float32")])
    m.compile("adam", "sparse_categorical_crossentropy")
    return m
_kit["after"] = []
"""
LSTM_SETUP = """
seq = rng.random((len(images), 100, 32), dtype="float32"); seq_y = rng.random((len(images), 1))
def lstm():
    m = keras.Sequential([keras.Input((100, 32)), keras.layers.LSTM(256, return_sequences=True),
                          keras.layers.LSTM(256), keras.layers.Dense(1, dtype="float32")])
    m.compile("adam", "mse")
    return m
"""
# real runs under the cap: the advised batch, 1.25x it, then doubling and bisection; each trial
# a %%kerasrun cell of its own, its record's status the answer
TRIALS = """
trials = _kit['trials'] = []
def trial(b):
    try:
        get_ipython().run_cell_magic('kerasrun', 'FLAG --quiet --label trial', FIT % (b, b, b))
    except Exception:
        pass
    ok = keras_nbguard.runs(this_kernel=True)[-1].status == 'ok'
    trials.append((b, ok))
    return ok
advised = _kit['advised'] or 0
if advised and trial(advised):
    lo, hi, b = advised, None, int(1.25 * advised)
    while b <= ROWS:
        if trial(b):
            lo = b
        else:
            hi = b
        if hi is None:
            b *= 2
        elif hi - lo <= max(2, lo // 32):
            break
        else:
            b = (lo + hi) // 2
    _kit['largest'], _kit['over'] = lo, hi
"""
MLP_RUN = "m = mlp()\nm.fit(x, y, batch_size=64, epochs=1, verbose=0)\ndel m"
NVML_AFTER = "_kit['after'].append(NvmlReader().read())"


def conv_run(batch: int) -> str:
    return (
        f"m = convnet()\nm.fit(images[:{2 * batch}], labels[:{2 * batch}], "
        f"batch_size={batch}, epochs=1, verbose=0)\ndel m"
    )


def setup(rows: int = 256) -> list[str]:
    return ["%load_ext keras_nbguard", SETUP.replace("BATCH_ROWS", str(rows))]


# -- what a run record says about the GPU --------------------------------------------------------
def gpu(record: dict[str, Any]) -> dict[str, Any]:
    return record["gpu"]


def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:,.0f} MiB"


def process_use(record: dict[str, Any], baseline: int | None) -> tuple[int | None, str]:
    """NVML's figure for the kernel's process; where NVML can't see it (containers list host
    pids), the device's use over the kit's start, said so."""
    g = gpu(record)
    if g["nvml_process_used"] is not None:
        return g["nvml_process_used"], "NVML process"
    if g["nvml_used"] is not None and baseline is not None:
        return g["nvml_used"] - baseline, "NVML device - start"
    return None, g["reason"] or "n/a"


@dataclass
class Kit:
    quick: bool = False
    dry: bool = False  # --cpu-dry-run: the plumbing only, GPU assertions off
    baseline: int | None = None  # the device's use before the kit started a process
    lines: list[str] = field(default_factory=list)
    calibration: tuple[float, float] | None = None  # (fixed, per sample) bytes of the convnet
    only: list[str] = field(default_factory=list)  # --only: these checks, in this order

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def check(self, ok: bool, what: str) -> None:
        self.say(f"  {'ok  ' if ok else 'dry ' if self.dry else 'FAIL'} {what}")
        if not self.dry:
            assert ok, what

    @property
    def repeats(self) -> int:
        return 3 if self.quick else 10

    # -- 1 + 2 + 4 + 5a: growth on (the default at load), per-run figures, precision, repeats --
    def growth_on(self) -> dict[str, Any]:
        cells = [*setup(), f"%%kerasrun --quiet --label mlp\n{MLP_RUN}", NVML_AFTER]
        for batch in (16, 32):
            cells += [f"%%kerasrun --quiet --label conv{batch}\n{conv_run(batch)}"]
        cells += [f"%%kerasrun --quiet --mixed-precision --label mixed32\n{conv_run(32)}"]
        for _ in range(self.repeats):
            cells += [f"%%kerasrun --quiet --label repeat\n{MLP_RUN}", NVML_AFTER]
        result = run_cells(cells)
        records = {r["label"]: r for r in result["records"]}
        # first, so that the --gpu-limit check has it even if an assertion below fails
        p16, p32 = gpu(records["conv16"])["tf_peak"], gpu(records["conv32"])["tf_peak"]
        if p16 is not None and p32 is not None and p32 > p16:
            per = (p32 - p16) / 16
            self.calibration = (p16 - 16 * per, per)
        first = records["mlp"]
        g = gpu(first)
        used, how = process_use(first, self.baseline)
        self.say("growth on at load (%load_ext, then a small fit):")
        self.say(f"  process {mib(used)} ({how}) of a {mib(g['nvml_total'])} device")
        self.check(
            used is not None
            and g["nvml_total"] is not None
            and used < SMALL_PART * g["nvml_total"],
            f"a small fit takes under {SMALL_PART:.0%} of the device",
        )
        self.per_run_table(result["records"])
        mixed = gpu(records["mixed32"])["tf_peak"]
        self.say("--mixed-precision, the same convnet at batch 32:")
        self.say(f"  allocator peak float32 {mib(p32)}, mixed_float16 {mib(mixed)}")
        self.check(
            p32 is not None and mixed is not None and mixed < p32,
            "mixed precision peaks lower than float32",
        )
        repeats = [r for r in result["records"] if r["label"] == "repeat"]
        over = self.repeated("in-process", repeats, result["kit"]["after"][1:])
        peak = max((gpu(r)["tf_peak"] or 0) for r in repeats)
        self.check(
            all(v is not None and v >= peak for v in over),
            f"in-process the kernel keeps its pool between runs (each at least the "
            f"runs' allocator peak, {mib(peak)}): only its end gives it back",
        )
        return result

    def per_run_table(self, records: list[dict[str, Any]]) -> None:
        self.say("per run: the allocator's view and the driver's, side by side")
        self.say(
            f"  {'run':<10}{'alloc current':>15}{'alloc peak':>13}{'NVML process':>15}"
            f"{'NVML device':>14}{'process-peak':>15}"
        )
        for r in records:
            g = gpu(r)
            gap = (
                None
                if g["nvml_process_used"] is None or g["tf_peak"] is None
                else g["nvml_process_used"] - g["tf_peak"]
            )
            self.say(
                f"  {r['label']:<10}{mib(g['tf_current']):>15}{mib(g['tf_peak']):>13}"
                f"{mib(g['nvml_process_used']):>15}{mib(g['nvml_used']):>14}{mib(gap):>15}"
            )
            if g["reason"]:
                self.say(f"    ({g['reason']})")
        self.say(
            "  The allocator counts the tensors it handed out (current) and their high mark"
            " since the run began (peak); NVML counts what the process holds on the device:"
            " the allocator's whole pool, grown in chunks and never given back, plus the"
            " CUDA context, cuDNN/cuBLAS workspaces and kernels (a few hundred MiB before"
            " any tensor). So NVML's process figure is the larger, and does not go down."
        )
        known = [
            gpu(r)
            for r in records
            if gpu(r)["nvml_process_used"] is not None and gpu(r)["tf_peak"] is not None
        ]
        self.check(
            bool(known) and all(g["nvml_process_used"] >= g["tf_peak"] for g in known),
            "NVML's process use covers the allocator's peak in every run",
        )
        self.check(all(gpu(r)["tf_peak"] for r in records), "every run has an allocator peak")

    def repeated(
        self, how: str, records: list[dict[str, Any]], after: list[list[Any]]
    ) -> list[int | None]:
        over = [
            None if a[0] is None or self.baseline is None else a[0] - self.baseline for a in after
        ]
        self.say(f"{len(records)} repeated runs {how}: device use after each, over the kit's start")
        self.say("  " + ", ".join(mib(v) for v in over))
        self.check(all(r["status"] == "ok" for r in records), f"every {how} run ended ok")
        return over

    # -- 1b: --no-gpu-growth, set before TensorFlow touches the GPU ------------------------------
    def growth_off(self) -> None:
        cells = [*setup(), f"%%kerasrun --quiet --no-gpu-growth --label mlp\n{MLP_RUN}"]
        record = run_cells(cells)["records"][0]
        used, how = process_use(record, self.baseline)
        total = gpu(record)["nvml_total"]
        self.say("--no-gpu-growth (keras imported in an earlier cell, GPU not yet touched):")
        self.say(
            f"  process {mib(used)} ({how}) of a {mib(total)} device; "
            f"warnings: {record['warnings'] or 'none'}"
        )
        self.check(
            used is not None and total is not None and used > MOST * total,
            f"TensorFlow reserves most of the device (over {MOST:.0%})",
        )

    # -- 3: --gpu-limit: out of memory with advice, then the advised batch fits ------------------
    def limit(self) -> None:
        cap = CAP_MIB * MIB
        # without a GPU (--cpu-dry-run) the same path under a host cap: oom, advice, smaller
        flag = f"--host-limit {DRY_HOST_MIB}" if self.dry else f"--gpu-limit {CAP_MIB}"
        advice_mib = int(0.9 * DRY_HOST_MIB) if self.dry else ADVICE_MIB
        if self.calibration is None:
            big = 96 if self.dry else 512
            self.say(
                f"--gpu-limit {CAP_MIB}: convnet not calibrated (no allocator peaks); batch {big}"
            )
        else:
            fixed, per = self.calibration
            # the advice halves the batch: aim the half at 70% of the cap, the whole well over
            # it (under a cap cuDNN picks algorithms with smaller workspaces: needs drop)
            big = max(2, int(2 * (0.7 * cap - fixed) / per) // 2 * 2)
            self.say(
                f"--gpu-limit {CAP_MIB}: convnet peak = {mib(int(fixed))} + "
                f"{per / MIB:.2f} MiB x batch (batch 16 and 32, uncapped); batch {big} "
                f"needs ~{mib(int(fixed + per * big))}"
            )
        cells = [
            *setup(2 * big),
            "import keras_nbguard",
            f"%%kerasrun {flag} --label big\n{conv_run(big)}",
            "import re\nr = keras_nbguard.runs(this_kernel=True)[-1]\n"
            # the smallest batch the advice names (its wording may change)
            "named = [int(b) for b in re.findall(r'batch_size=(\\d+)', ' '.join(r.advice))]\n"
            f"_kit['smaller'] = min((b for b in named if b < {big}), default=None)",
            # the advised batch, under the same cap (a cell of its own, as a user would)
            "if _kit['smaller']:\n    try:\n        get_ipython().run_cell_magic("
            f"'kerasrun', '{flag} --label smaller', "
            "'m = convnet()\\nm.fit(images[:2 * %d], labels[:2 * %d], batch_size=%d, "
            "epochs=1, verbose=0)\\ndel m' % ((_kit['smaller'],) * 3))\n"
            "    except Exception as exc:\n        _kit['smaller_error'] = repr(exc)",
            # batch_advice on the GPU (its allocator's peaks), then its batch under the cap
            "advice = keras_nbguard.batch_advice(convnet(), images, labels, "
            f"limit_mib={advice_mib})\n"
            "_kit['advice'] = advice.text()\n_kit['advised'] = advice.batch_size\n"
            "if advice.batch_size:\n    get_ipython().run_cell_magic('kerasrun', "
            f"'{flag} --label advised', 'm = convnet()\\nm.fit(images, labels, "
            "batch_size=%d, steps_per_epoch=2, epochs=1, verbose=0)\\ndel m' % "
            "min(advice.batch_size, len(images)))",
        ]
        result = run_cells(cells)
        records = {r["label"]: r for r in result["records"]}
        big_run, smaller = records["big"], result["kit"].get("smaller")
        self.say(
            f"  batch {big}: {big_run['status']}, allocator peak {mib(gpu(big_run)['tf_peak'])}"
        )
        for line in big_run["advice"]:
            self.say(f"    advice: {line}")
        self.check(big_run["status"] == "oom", f"batch {big} ends oom under the cap")
        self.check(
            smaller is not None and f"batch_size={big}" in " ".join(big_run["advice"]),
            f"the advice names batch_size={big} and a smaller one ({smaller})",
        )
        run = records.get("smaller")
        self.say(
            f"  batch {smaller}: {run['status'] if run else 'not run'}, allocator peak "
            f"{mib(gpu(run)['tf_peak']) if run else 'n/a'}"
        )
        self.check(
            run is not None and run["status"] == "ok" and (gpu(run)["tf_peak"] or 0) <= cap,
            "the smaller batch fits under the same cap",
        )
        advised = records.get("advised")
        self.say(f"  {result['kit'].get('advice')}")
        self.say(
            f"  the advised batch under the cap: {advised['status'] if advised else 'not run'}"
            f", allocator peak {mib(gpu(advised)['tf_peak']) if advised else 'n/a'}"
        )
        self.check(
            advised is not None and advised["status"] == "ok",
            f"batch_advice's batch (for {advice_mib} MiB) fits under the same cap",
        )

    # -- 5b: --isolate: each run's GPU memory given back ------------------------------------------
    def isolate(self) -> None:
        cells = [*setup(), "_kit['before'] = NvmlReader().read()"]
        for _ in range(self.repeats):
            cells += [f"%%kerasrun --isolate --quiet --label repeat\n{MLP_RUN}", NVML_AFTER]
        result = run_cells(cells, timeout=(300 if self.dry else 120) + 60 * self.repeats)
        before, after = result["kit"]["before"], result["kit"]["after"]
        self.say(
            f"  the kernel before its first run: device {mib(before[0])}; the kernel's own "
            f"process after the last: {mib(after[-1][2] if after else None)}"
        )
        over = self.repeated("with --isolate", result["records"], after)
        self.check(
            all(v is not None and v < GIVEN_BACK_MIB * MIB for v in over),
            f"each isolated run gives its GPU memory back (under {GIVEN_BACK_MIB} MiB "
            f"left over the start)",
        )

    # -- 6: JAX and torch, where installed with a GPU ---------------------------------------------
    def backend(self, name: str) -> None:
        probe = {
            "jax": "import jax\n_kit['gpu'] = jax.default_backend() == 'gpu'\n"
            "_kit['env'] = os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE')",
            "torch": "import torch\n_kit['gpu'] = torch.cuda.is_available()",
        }[name]
        cells = [
            "%load_ext keras_nbguard",
            "import os, importlib.util\n"
            f"_kit['installed'] = importlib.util.find_spec({name!r}) is not None",
        ]
        cells += [
            "if _kit['installed']:\n" + "\n".join(f"    {line}" for line in probe.splitlines())
        ]
        cells += [
            "if _kit.get('gpu'):\n    exec("
            + repr(SETUP.replace("BATCH_ROWS", "64"))
            + ")\n    get_ipython().run_cell_magic('kerasrun', '--quiet --label mlp', "
            + repr(MLP_RUN)
            + ")"
        ]
        result = run_cells(cells, env={"KERAS_BACKEND": name})
        kit = result["kit"]
        if not kit.get("installed") or not kit.get("gpu"):
            why = "is not installed" if not kit.get("installed") else "sees no GPU"
            self.say(f"Keras on {name}: skipped ({name} {why})")
            return
        record = result["records"][0]
        g = gpu(record)
        used, how = process_use(record, self.baseline)
        self.say(
            f"Keras on {name}: allocator ({g['allocator']}) current {mib(g['tf_current'])}, "
            f"peak {mib(g['tf_peak'])}; process {mib(used)} ({how}) of "
            f"{mib(g['nvml_total'])}"
        )
        if name == "jax":
            self.check(kit.get("env") == "false", "%load_ext turned JAX's preallocation off")
        self.check(
            g["allocator"] == {"jax": "JAX", "torch": "torch"}[name] and bool(g["tf_peak"]),
            f"{name}'s own allocator gives the run's peak",
        )
        self.check(
            used is not None
            and g["nvml_total"] is not None
            and used < SMALL_PART * g["nvml_total"],
            f"on {name} a small fit takes under {SMALL_PART:.0%} of the device",
        )

    # -- 7: batch_advice on JAX's and torch's GPUs, against the truth ----------------------------
    def advice_on(self, name: str, model: str = "convnet") -> None:
        """Under ``--gpu-limit`` (set before the backend starts), the advice for the cap, then
        real runs under the same cap, as a user makes them: the advised batch ends ok, 1.25x it
        runs out of memory (so the advice is within 20% of the largest batch that fits)."""
        flag = "" if self.dry else f"--gpu-limit {CAP_MIB}"  # a host cap would stop the import
        limit = "limit_mib=1000" if self.dry else f"options=RunOptions(gpu_limit_mb={CAP_MIB})"
        data = {"convnet": "images, labels", "lstm": "seq, seq_y"}[model]
        rows = 512 if self.dry else 4096
        fit = (
            f"m = {model}()\nx, y = {data}\n"
            "m.fit(x[:2 * %d], y[:2 * %d], batch_size=%d, epochs=1, verbose=0)\ndel m"
        )
        cells = [
            "%load_ext keras_nbguard",
            # the cap is an environment variable JAX reads as it starts: before keras is imported
            f"%%kerasrun --quiet {flag} --label cap\nimport keras",
            *setup(rows)[1:],
            LSTM_SETUP,
            "import keras_nbguard\nfrom keras_nbguard.records.options import RunOptions\n"
            f"advice = keras_nbguard.batch_advice({model}(), {data}, {limit})\n"
            "_kit['advice'] = advice.text(); _kit['advised'] = advice.batch_size\n"
            "_kit['limit'] = advice.limit_mib\n"
            "_kit['probes'] = [(p.batch, p.peak_mib, p.seconds) for p in advice.probes]\n"
            # JAX's pool as it stands after probing: its size and its largest free block
            "import sys\nif 'jax' in sys.modules:\n    import jax\n"
            "    _kit['pool'] = jax.devices()[0].memory_stats()",
            # the truth, found as the host bench finds it: real runs under the cap,
            # 1.25x the advice first, then doubling and bisection to the largest that fits
            TRIALS.replace("FLAG", flag).replace("FIT", repr(fit)).replace("ROWS", str(rows)),
        ]
        result = run_cells(cells, env={"KERAS_BACKEND": name}, timeout=420)
        kit = result["kit"]
        limit_mib = kit.get("limit") or 0
        self.say(f"batch_advice on {name}, the {model}, under {flag or 'no cap'}:")
        self.say(f"  {kit.get('advice')}")
        probes = kit.get("probes") or []
        self.say(
            "  probes: "
            + ", ".join(f"batch {b} {peak:,.0f} MiB {sec:.1f} s" for b, peak, sec in probes)
        )
        pool = kit.get("pool") or {}
        if pool:
            self.say(
                "  JAX's pool after probing: "
                + ", ".join(
                    f"{key} {mib(pool.get(key))}"
                    for key in ("bytes_limit", "bytes_reserved", "largest_free_block_bytes")
                )
            )
        advised, trials = kit.get("advised") or 0, kit.get("trials") or []
        self.say(
            "  runs under the cap: "
            + ", ".join(f"batch {b} {'ok' if ok else 'oom'}" for b, ok in trials)
        )
        largest = kit.get("largest")
        if largest:
            self.say(
                f"  the largest batch that ran: {largest} (the next tried ran out of memory: "
                f"{kit.get('over') or 'none, the data holds no larger batch'}); the advice "
                f"is {advised / largest:.0%} of it"
            )
        if advised and not (trials and trials[0][1]):
            self.fresh_run(name, cells[:4], flag, fit, advised)
        self.check(
            bool(probes) and all(peak <= limit_mib / 2 for _b, peak, _s in probes),
            f"the probes stay under half the limit ({limit_mib / 2:,.0f} MiB)",
        )
        self.check(
            bool(trials) and trials[0] == [advised, True],
            f"the advised batch ({advised}) runs under the cap",
        )
        self.check(
            len(trials) > 1 and trials[1] == [int(WITHIN * advised), False],
            f"{WITHIN}x the advised batch runs out of memory (within 20% of the largest)",
        )

    def fresh_run(self, name: str, setup_cells: list[str], flag: str, fit: str, batch: int) -> None:
        """The advised batch, out of memory after probing: the same run in a process that never
        probed. On JAX the pool keeps the regions a probe's compile grew (on the H200 a 512 MiB
        free block stayed), so this tells a plan that is short from a pool left fragmented."""
        cell = f"%%kerasrun {flag} --quiet --label fresh\n" + fit % (batch, batch, batch)
        result = run_cells([*setup_cells, cell], env={"KERAS_BACKEND": name}, timeout=300)
        fresh = {r["label"]: r for r in result["records"]}.get("fresh")
        self.say(
            f"  batch {batch} in a process that never probed, under the same cap: "
            f"{fresh['status'] if fresh else 'not run'}"
        )

    def all(self) -> list[str]:
        """Every check, each on its own: one that fails is reported and the next still runs
        (a GPU machine is lent for minutes; one run should say everything). The failures."""
        started = time.monotonic()
        self.baseline = device_used()
        self.say(f"device use at the kit's start: {mib(self.baseline)}")
        named = {
            "growth_on": self.growth_on,
            "growth_off": self.growth_off,
            "limit": self.limit,
            "isolate": self.isolate,
            "jax": lambda: self.backend("jax"),
            "torch": lambda: self.backend("torch"),
            "advice_jax": lambda: self.advice_on("jax"),
            "advice_torch": lambda: self.advice_on("torch"),
            "advice_jax_lstm": lambda: self.advice_on("jax", "lstm"),
            "advice_torch_lstm": lambda: self.advice_on("torch", "lstm"),
        }
        second = ("jax", "torch")  # the backends --quick leaves out
        wanted = self.only or [n for n in named if not (self.quick and any(b in n for b in second))]
        checks = [named[name] for name in wanted]
        failures = []
        for check in checks:
            try:
                check()
            except Exception as exc:  # a failed assertion, a timeout, a record not there
                failures.append(str(exc).splitlines()[0] if str(exc) else repr(exc))
                self.say(f"  FAILED: {exc}")
        self.say(
            f"kit done in {time.monotonic() - started:.0f} s: {len(failures)} check(s) failed"
            if failures
            else f"kit done in {time.monotonic() - started:.0f} s: every check passed"
        )
        return failures


def describe_machine() -> str:
    """GPU model, driver, CUDA and TF versions, the date: the heading of the kit's output."""
    parts = [time.strftime("%Y-%m-%d")]
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        parts.append(name.decode() if isinstance(name, bytes) else name)
        driver = pynvml.nvmlSystemGetDriverVersion()
        parts.append(f"driver {driver.decode() if isinstance(driver, bytes) else driver}")
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        parts.append(f"CUDA {cuda // 1000}.{cuda % 1000 // 10}")
    except Exception as exc:
        parts.append(f"GPU: n/a ({exc})")
    version = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tensorflow as tf; "
            "print(tf.__version__, tf.sysconfig.get_build_info()"
            ".get('cuda_version', 'no CUDA build'))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    parts.append(f"TensorFlow {version.stdout.strip() or 'n/a'}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="3 repeated runs instead of 10; no JAX/torch checks"
    )
    parser.add_argument(
        "--only",
        metavar="A,B",
        default="",
        help="these checks only: growth_on, growth_off, limit, isolate, jax, torch, "
        "advice_jax, advice_torch, advice_jax_lstm, advice_torch_lstm (limit calibrates "
        "itself from growth_on when run after it)",
    )
    parser.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="run every check's cells without a GPU: the kit's plumbing only",
    )
    args = parser.parse_args(argv)
    if not args.cpu_dry_run:
        why = no_gpu_reason()
        if why is not None:
            print(f"no GPU: {why}")
            return 0
    kit = Kit(
        quick=args.quick, dry=args.cpu_dry_run, only=[name for name in args.only.split(",") if name]
    )
    kit.say(f"keras_nbguard GPU check kit: {describe_machine()}")
    return 1 if kit.all() else 0


if __name__ == "__main__":
    sys.exit(main())
