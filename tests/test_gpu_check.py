"""The GPU check kit (bench/gpu_check.py): its checks under pytest, marked ``gpu`` and skipped with
the reason where there is no GPU; here, the script end to end (it says why it can't run, exits 0)
and its plumbing on the CPU (--cpu-dry-run: every check's cells, no GPU assertion)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu import fake_tf

from keras_nbguard.prepare import gpu_setup

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
assert _spec is not None and _spec.loader is not None
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check  # (its dataclass looks its module up)
_spec.loader.exec_module(gpu_check)

NO_GPU = gpu_check.no_gpu_reason()
on_gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"no GPU: {NO_GPU}")


def run_script(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )


def test_the_script_says_why_it_cannot_run_and_exits_0():
    if NO_GPU is None:
        pytest.skip("a GPU is here: the gpu-marked tests run the kit's checks")
    done = run_script("--quick", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"no GPU: {NO_GPU}\n"


@pytest.mark.slow
def test_dry_run_on_the_cpu_runs_every_check_s_cells():
    """The checks' cells run in real shells with the extension loaded, and their records come
    back: on the GPU, only the figures differ."""
    # two checks (the whole dry run takes ~10 min on 2 busy cores; `--cpu-dry-run --quick`
    # runs them all): a fresh process per setting, an out-of-memory run and its advice
    done = run_script("--cpu-dry-run", "--quick", "--only", "growth_off,limit")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    for heading in ("--no-gpu-growth (keras imported", "--gpu-limit 1024"):
        assert heading in out, heading
    assert "FAILED" not in out, out
    # the out-of-memory path under a host cap: the run is oom and its advice names a batch
    assert "batch 96: oom" in out and "try batch_size=48" in out, out


def test_no_gpu_growth_wins_over_the_growth_variable_set_at_load():
    """TF's allocator reads TF_FORCE_GPU_ALLOW_GROWTH over tf.config: ``%load_ext`` sets it to
    "true", so --no-gpu-growth after `import keras` must set it to "false" as well."""
    tf, config = fake_tf()
    environ = {gpu_setup.GROWTH_ENV: "true"}  # as %load_ext leaves it
    assert gpu_setup.set_growth(tf, False, environ) == []
    assert environ[gpu_setup.GROWTH_ENV] == "false"
    assert config.growth == {"/physical_device:GPU:0": False}
    mine = {gpu_setup.GROWTH_ENV: "false"}  # the user's own, before loading: it wins
    assert gpu_setup.configure_at_load(tf, mine) == []
    assert mine[gpu_setup.GROWTH_ENV] == "false"
    assert config.growth == {"/physical_device:GPU:0": False}


# -- the kit's checks on a real GPU ---------------------------------------------------------------
@pytest.fixture(scope="module")
def kit():
    kit = gpu_check.Kit(quick=True)
    kit.baseline = gpu_check.device_used()
    return kit


@pytest.mark.gpu
@on_gpu
def test_growth_per_run_mixed_precision_and_repeated_runs(kit):
    kit.growth_on()
    assert kit.calibration is not None


@pytest.mark.gpu
@on_gpu
def test_no_gpu_growth_reserves_most_of_the_device(kit):
    kit.growth_off()


@pytest.mark.gpu
@on_gpu
def test_gpu_limit_oom_advice_then_the_smaller_batch_fits(kit):
    if kit.calibration is None:
        kit.growth_on()
    kit.limit()


@pytest.mark.gpu
@on_gpu
def test_isolated_runs_give_their_gpu_memory_back(kit):
    kit.isolate()


@pytest.mark.gpu
@on_gpu
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_jax_and_torch_allocators(kit, backend):
    kit.backend(backend)


@pytest.mark.gpu
@on_gpu
@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("model", ["convnet", "lstm"])
def test_batch_advice_against_runs_under_the_cap(kit, backend, model):
    kit.advice_on(backend, model)
