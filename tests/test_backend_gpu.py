"""The GPU paths of JAX and torch, with fakes at exactly each framework's boundary (no GPU on
these machines): the allocators' figures, peaks per fit/evaluate/predict that keep the run's,
growth and caps set the way each framework reads them. The real frameworks' CPU paths run in
tests/test_backends.py."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pynvml
import pytest
from test_gpu import FakeNvml

from keras_nbguard.collectors.allocators import JaxAllocator, TorchAllocator
from keras_nbguard.collectors.gpu import GpuCollector, NvmlReader
from keras_nbguard.prepare import gpu_setup
from keras_nbguard.records.formatting import fmt_gpu

MB = 2**20


class FakeCuda:
    """The slice of ``torch.cuda`` we call."""

    def __init__(self, devices=1, available=True, initialized=True):
        self.devices, self.available, self.initialized = devices, available, initialized
        self.allocated = [0] * devices
        self.peak = [0] * devices
        self.fractions: dict[int, float] = {}
        self.emptied = 0

    def is_available(self):
        return self.available

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return self.devices

    def memory_allocated(self, i):
        return self.allocated[i]

    def max_memory_allocated(self, i):
        return self.peak[i]

    def reset_peak_memory_stats(self, i):
        self.peak[i] = self.allocated[i]

    def use(self, i, n):  # what a step of the model would do
        self.allocated[i] = n
        self.peak[i] = max(self.peak[i], n)

    def get_device_properties(self, i):
        return SimpleNamespace(total_memory=8000 * MB)

    def set_per_process_memory_fraction(self, fraction, i):
        self.fractions[i] = fraction

    def empty_cache(self):
        self.emptied += 1


class FakeJaxDevice:
    platform = "gpu"

    def __init__(self):
        self.stats = {"bytes_in_use": 0, "peak_bytes_in_use": 0}

    def memory_stats(self):
        return dict(self.stats)

    def use(self, n):
        self.stats["bytes_in_use"] = n
        self.stats["peak_bytes_in_use"] = max(self.stats["peak_bytes_in_use"], n)


def fake_jax(devices):
    return SimpleNamespace(local_devices=lambda: devices, default_backend=lambda: "gpu")


def started():
    return True


def collector(allocator):
    return GpuCollector(nvml=NvmlReader(FakeNvml(), environ={}), allocator=lambda: allocator)


def test_torch_figures_are_summed_and_each_call_has_its_own_peak():
    cuda = FakeCuda(devices=2)
    gpu = collector(TorchAllocator(SimpleNamespace(cuda=cuda)))
    cuda.use(0, 900 * MB)  # an earlier run's peak: not this run's
    cuda.use(0, 100 * MB)
    gpu.begin()
    gpu.call_began()  # fit
    cuda.use(0, 700 * MB)
    cuda.use(1, 200 * MB)
    assert gpu.call_ended() == 900 * MB  # 700 + 200 over both GPUs
    cuda.use(0, 100 * MB)
    cuda.use(1, 0)
    gpu.call_began()  # predict: less than training
    cuda.use(0, 300 * MB)
    assert gpu.call_ended() == 300 * MB
    reading = gpu.end()
    assert reading.allocator == "torch" and reading.tf_current == 300 * MB
    assert reading.tf_peak == 900 * MB  # the fit's peak survived the predict's reset
    assert fmt_gpu(reading).startswith("torch current 300.0 MiB, peak 900.0 MiB")


@pytest.mark.parametrize(
    ("cuda", "words"),
    [
        (FakeCuda(available=False), "no GPU: torch sees no CUDA device"),
        (FakeCuda(initialized=False), "torch has not initialized CUDA yet"),
    ],
)
def test_torch_without_cuda_in_use_is_na_with_the_reason(cuda, words):
    reading = collector(TorchAllocator(SimpleNamespace(cuda=cuda))).end()
    assert not reading.known and reading.reason == words
    assert fmt_gpu(reading) == f"n/a ({words})"


def test_jax_peak_is_the_runs_only_when_the_run_set_a_new_high():
    device = FakeJaxDevice()
    jax = fake_jax([device])
    device.use(800 * MB)  # an earlier run
    device.use(50 * MB)
    first = collector(JaxAllocator(jax, started))
    first.begin()
    device.use(300 * MB)
    reading = first.end()
    # JAX can't reset its peak: 800 MiB is not this run's, so the peak is n/a, not 800
    assert reading.tf_current == 300 * MB and reading.tf_peak is None
    assert "JAX keeps one peak per process" in reading.reason
    second = collector(JaxAllocator(jax, started))
    second.begin()
    second.call_began()
    device.use(1200 * MB)
    assert second.call_ended() is None  # per call: no reset, so no figure rather than a wrong one
    assert second.end().tf_peak == 1200 * MB  # a new high: this run's


def test_jax_on_the_cpu_says_so():
    cpu = SimpleNamespace(platform="cpu", memory_stats=lambda: None)
    jax = SimpleNamespace(local_devices=lambda: [cpu], default_backend=lambda: "cpu")
    assert collector(JaxAllocator(jax, started)).end().reason == "no GPU: JAX computes on cpu"


def test_jax_growth_and_cap_are_environment_variables_set_before_jax_starts():
    environ: dict[str, str] = {}
    assert gpu_setup.configure_at_load(None, environ) == []
    assert environ[gpu_setup.JAX_PREALLOCATE] == "false"  # no 75% grab at JAX's first op
    environ = {gpu_setup.JAX_PREALLOCATE: "true"}
    gpu_setup.configure_at_load(None, environ)
    assert environ[gpu_setup.JAX_PREALLOCATE] == "true"  # the user's own setting wins
    nvml = NvmlReader(FakeNvml(devices=2), environ={})  # 80000 MiB each
    assert gpu_setup.jax_memory_limit(20000, nvml, environ, started=False) == []
    assert environ[gpu_setup.JAX_FRACTION] == "0.250000"
    # a cap is taken at once: a growing pool fragments and runs out below it
    assert environ[gpu_setup.JAX_PREALLOCATE] == "true"
    assert gpu_setup.jax_memory_limit(20000, nvml, environ, started=False, preallocate=False) == []
    assert environ[gpu_setup.JAX_PREALLOCATE] == "false"  # --gpu-growth: grow up to the cap
    # a small cap on a large GPU is kept to the MiB, not rounded to a step of 80 MiB
    environ = {}
    assert gpu_setup.jax_memory_limit(1024, nvml, environ, started=False) == []
    assert abs(float(environ[gpu_setup.JAX_FRACTION]) * 80000 - 1024) < 1


def test_jax_too_late_is_one_clear_warning():
    environ = {gpu_setup.JAX_PREALLOCATE: "true"}
    problems = gpu_setup.jax_growth(True, environ, started=True)
    assert len(problems) == 1 and "JAX already started its backend" in problems[0]
    assert "Restart the kernel" in problems[0]
    nvml = NvmlReader(FakeNvml(), environ={})
    (problem,) = gpu_setup.jax_memory_limit(4000, nvml, environ, started=True)
    assert "can't be applied" in problem and gpu_setup.JAX_FRACTION not in environ
    # the same cap as the one JAX started with: nothing to say
    environ[gpu_setup.JAX_FRACTION] = "0.05"  # as a user writes it
    assert gpu_setup.jax_memory_limit(4000, nvml, environ, started=True) == []


def test_jax_cap_without_the_gpus_size_says_what_to_set():
    nvml = NvmlReader(FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), environ={})
    (problem,) = gpu_setup.jax_memory_limit(4000, nvml, {}, started=False)
    assert "NVIDIA driver not loaded" in problem and gpu_setup.JAX_FRACTION in problem


def test_torch_cap_is_a_fraction_of_each_gpu_at_any_time():
    cuda = FakeCuda(devices=2)
    assert gpu_setup.torch_memory_limit(2000, SimpleNamespace(cuda=cuda)) == []
    assert cuda.fractions == {0: 0.25, 1: 0.25}
    (problem,) = gpu_setup.torch_memory_limit(2000, SimpleNamespace(cuda=FakeCuda(available=False)))
    assert problem == "--gpu-limit 2000 ignored: torch sees no CUDA GPU."


def test_torch_cache_is_emptied_only_where_cuda_is_in_use():
    used, unused = FakeCuda(), FakeCuda(initialized=False)
    assert gpu_setup.empty_torch_cache(SimpleNamespace(cuda=used)) == []
    assert gpu_setup.empty_torch_cache(SimpleNamespace(cuda=unused)) == []
    assert (used.emptied, unused.emptied) == (1, 0)  # never starts CUDA to empty it


def test_a_jax_cap_from_the_magic_is_taken_at_once_unless_growth_is_asked(monkeypatch):
    """``--gpu-limit`` on JAX preallocates the cap (a growing pool fragmented below it on an
    H200); ``--gpu-growth`` with it grows up to the cap instead."""
    from keras_nbguard.records.options import RunOptions

    monkeypatch.setattr(gpu_setup, "jax_started", lambda: False)
    monkeypatch.delenv(gpu_setup.JAX_FRACTION, raising=False)
    monkeypatch.setenv(gpu_setup.JAX_PREALLOCATE, "false")  # as %load_ext leaves it
    nvml = NvmlReader(FakeNvml(), environ={})
    assert gpu_setup.configure(RunOptions(gpu_limit_mb=1024), "jax", None, nvml) == []
    assert os.environ[gpu_setup.JAX_PREALLOCATE] == "true"
    grow = RunOptions(gpu_limit_mb=1024, gpu_growth=True)
    assert gpu_setup.configure(grow, "jax", None, nvml) == []
    assert os.environ[gpu_setup.JAX_PREALLOCATE] == "false"
