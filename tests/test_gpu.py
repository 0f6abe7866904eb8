"""GPU paths without a GPU: fakes stand in at exactly the pynvml and tf.config boundaries."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pynvml
import pytest

from keras_nbguard.collectors.gpu import GpuCollector, NvmlReader, TfGpu
from keras_nbguard.prepare import gpu_setup

MB = 2**20


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # returns the specific subclass, as the real library raises


class FakeNvml:
    """The slice of pynvml we call, with the real library's exception classes."""

    def __init__(self, init_error=None, processes=(), process_error=None, devices=1):
        self.init_error = init_error
        self.devices = devices
        self.processes = processes
        self.process_error = process_error
        self.inits = 0
        self.handles = []

    def nvmlInit(self):
        self.inits += 1
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlDeviceGetCount(self):
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, index):
        self.handles.append(index)
        return ("handle", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.handles.append(uuid)
        return ("handle", uuid)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=3000 * MB, total=80000 * MB, free=77000 * MB)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if self.process_error is not None:
            raise nvml_error(self.process_error)
        if isinstance(self.processes, dict):  # per device index
            return list(self.processes.get(handle[1], ()))
        return list(self.processes)


class FakeTfConfig:
    """tf.config as TensorFlow behaves: device changes raise once the runtime is initialized."""

    LogicalDeviceConfiguration = staticmethod(
        lambda memory_limit: SimpleNamespace(memory_limit=memory_limit)
    )

    def __init__(self, gpus=1, initialized=False):
        self.gpu_list = [
            SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU")
            for i in range(gpus)
        ]
        self.initialized = initialized
        self.growth: dict[str, bool] = {}
        self.logical: dict[str, list] = {}
        self.stats_resets: list[str] = []
        self.experimental = SimpleNamespace(
            set_memory_growth=self._set_growth,
            get_memory_growth=self._get_growth,
            reset_memory_stats=self._reset,
            get_memory_info=self._info,
        )

    def list_physical_devices(self, kind):
        return list(self.gpu_list) if kind == "GPU" else []

    def list_logical_devices(self, kind):
        return (
            [
                SimpleNamespace(name=f"/job:localhost/replica:0/task:0/device:GPU:{i}")
                for i in range(len(self.gpu_list))
            ]
            if kind == "GPU"
            else []
        )

    def _set_growth(self, device, enabled):
        if self.initialized:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.growth[device.name] = enabled

    def _get_growth(self, device):
        return self.growth.get(device.name, False)

    def set_logical_device_configuration(self, device, configs):
        if self.initialized:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.logical[device.name] = configs

    def get_logical_device_configuration(self, device):
        return self.logical.get(device.name)

    def _reset(self, device):
        self.stats_resets.append(device)

    def _info(self, device):
        # as TF does: a name it does not know is a ValueError
        if device not in {f"GPU:{i}" for i in range(len(self.gpu_list))}:
            raise ValueError(f"Invalid device: {device}")
        return {"current": 100 * MB, "peak": 700 * MB}


def fake_tf(**kwargs) -> tuple[TfGpu, FakeTfConfig]:
    config = FakeTfConfig(**kwargs)
    return TfGpu(config, lambda: config.initialized), config


# -- NVML --------------------------------------------------------------------------------------
def test_real_nvml_without_a_driver_says_why():
    used, total, process, reason = NvmlReader(environ={}).read()
    if used is not None:
        pytest.skip("this machine has a working NVIDIA driver")
    assert (used, total, process) == (None, None, None)
    assert reason.startswith("NVML: ")


@pytest.mark.parametrize(
    "code, words",
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "library not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    ],
)
def test_nvml_init_failures_give_none_and_a_reason_once(code, words):
    nvml = FakeNvml(init_error=code)
    reader = NvmlReader(nvml, environ={})
    assert reader.read()[:3] == (None, None, None)
    assert words in reader.read()[3]
    assert nvml.inits == 1  # a failed init is not retried on every run


def test_nvml_matches_this_process_by_pid():
    procs = [
        SimpleNamespace(pid=1, usedGpuMemory=5 * MB),
        SimpleNamespace(pid=os.getpid(), usedGpuMemory=900 * MB),
    ]
    assert NvmlReader(FakeNvml(processes=procs), environ={}).read() == (
        3000 * MB,
        80000 * MB,
        900 * MB,
        None,
    )


def test_pid_not_found_says_containers_instead_of_guessing():
    procs = [SimpleNamespace(pid=4242, usedGpuMemory=900 * MB)]
    used, _, process, reason = NvmlReader(FakeNvml(processes=procs), environ={}).read()
    assert used == 3000 * MB and process is None
    assert "not in NVML's list" in reason and "container" in reason


def test_process_list_without_permission_keeps_device_figures():
    nvml = FakeNvml(process_error=pynvml.NVML_ERROR_NO_PERMISSION)
    used, _, process, reason = NvmlReader(nvml, environ={}).read()
    assert (used, process) == (3000 * MB, None) and "no permission" in reason


def test_unreported_process_memory_is_none_not_zero():
    procs = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=None)]
    _, _, process, reason = NvmlReader(FakeNvml(processes=procs), environ={}).read()
    assert process is None and "does not report" in reason


def test_nvml_follows_cuda_visible_devices():
    nvml = FakeNvml()
    NvmlReader(nvml, environ={"CUDA_VISIBLE_DEVICES": "2,3"}).read()
    NvmlReader(nvml, environ={"CUDA_VISIBLE_DEVICES": "GPU-abc"}).read()
    assert nvml.handles == [2, 3, "GPU-abc"]


def test_nvml_sums_every_visible_device_and_this_process_on_each():
    procs = {
        0: [SimpleNamespace(pid=os.getpid(), usedGpuMemory=900 * MB)],
        1: [SimpleNamespace(pid=os.getpid(), usedGpuMemory=600 * MB)],
    }
    nvml = FakeNvml(processes=procs, devices=3)
    assert NvmlReader(nvml, environ={}).read() == (3 * 3000 * MB, 3 * 80000 * MB, 1500 * MB, None)
    # CUDA stops at the first invalid entry; "" or "-1" hide every GPU
    nvml.handles.clear()
    NvmlReader(nvml, environ={"CUDA_VISIBLE_DEVICES": "1,-1,2"}).read()
    assert nvml.handles == [1]
    assert NvmlReader(nvml, environ={"CUDA_VISIBLE_DEVICES": "-1"}).read() == (
        None,
        None,
        None,
        "NVML: CUDA_VISIBLE_DEVICES hides every GPU",
    )


def test_pid_on_no_device_prefers_the_container_hint():
    procs = {1: [SimpleNamespace(pid=4242, usedGpuMemory=900 * MB)]}
    _, _, process, reason = NvmlReader(FakeNvml(processes=procs, devices=2), environ={}).read()
    assert process is None and "container" in reason and "4242" not in reason


# -- GPU readings per run ------------------------------------------------------------------------
def test_collector_reads_allocator_and_nvml_when_tf_initialized_a_gpu():
    tf, config = fake_tf(initialized=True)
    procs = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=900 * MB)]
    collector = GpuCollector(lambda: tf, NvmlReader(FakeNvml(processes=procs), environ={}))
    collector.begin()
    reading = collector.end()
    assert config.stats_resets == ["GPU:0"]
    assert (reading.tf_current, reading.tf_peak) == (100 * MB, 700 * MB)
    assert (reading.nvml_used, reading.nvml_total, reading.nvml_process_used) == (
        3000 * MB,
        80000 * MB,
        900 * MB,
    )
    assert reading.reason is None and reading.known


def test_allocator_figures_are_summed_over_every_gpu_tf_uses():
    tf, config = fake_tf(gpus=2, initialized=True)
    collector = GpuCollector(lambda: tf, NvmlReader(FakeNvml(devices=2), environ={}))
    collector.begin()
    reading = collector.end()
    assert config.stats_resets == ["GPU:0", "GPU:1"]
    assert (reading.tf_current, reading.tf_peak) == (200 * MB, 1400 * MB)
    assert reading.nvml_total == 2 * 80000 * MB


@pytest.mark.parametrize(
    "tf, words",
    [
        (None, "TensorFlow is not imported"),
        (fake_tf(gpus=0)[0], "sees none"),
        (fake_tf(initialized=False)[0], "not initialized"),
    ],
)
def test_no_gpu_reading_is_none_with_a_reason(tf, words):
    nvml = FakeNvml()
    collector = GpuCollector(lambda: tf, NvmlReader(nvml, environ={}))
    collector.begin()
    reading = collector.end()
    assert not reading.known and words in reading.reason
    assert nvml.inits == 0  # NVML is only asked when TF has a GPU going


# -- GPU setup ---------------------------------------------------------------------------------
def test_load_before_tensorflow_sets_growth_env_but_respects_the_user():
    environ: dict[str, str] = {}
    assert gpu_setup.configure_at_load(None, environ) == []
    assert environ[gpu_setup.GROWTH_ENV] == "true"
    mine = {gpu_setup.GROWTH_ENV: "false"}
    gpu_setup.configure_at_load(None, mine)
    assert mine[gpu_setup.GROWTH_ENV] == "false"


def test_growth_through_tf_config_before_the_gpu_is_initialized():
    tf, config = fake_tf(gpus=2)
    assert gpu_setup.configure_at_load(tf, {}) == []
    assert config.growth == {"/physical_device:GPU:0": True, "/physical_device:GPU:1": True}


def test_too_late_for_growth_is_one_clear_warning_not_an_exception():
    tf, _ = fake_tf(initialized=True)
    (problem,) = gpu_setup.set_growth(tf, True, {})
    assert "already initialized" in problem and "Restart the kernel" in problem
    assert gpu_setup.set_growth(tf, True, {gpu_setup.GROWTH_ENV: "true"}) == []


def test_memory_limit_before_and_after_initialization():
    tf, config = fake_tf()
    assert gpu_setup.set_memory_limit(tf, 2048) == []
    assert config.logical["/physical_device:GPU:0"][0].memory_limit == 2048
    config.initialized = True
    assert gpu_setup.set_memory_limit(tf, 2048) == []  # already in force: nothing to say
    (problem,) = gpu_setup.set_memory_limit(tf, 1024)
    assert "can't be applied" in problem and "2048 MiB" in problem
    (problem,) = gpu_setup.set_memory_limit(fake_tf(gpus=0)[0], 1024)
    assert "sees no GPU" in problem


def test_too_late_gpu_limit_through_the_magic_warns_once_and_the_cell_runs(shell):
    import keras_nbguard

    tf, _ = fake_tf(initialized=True)
    keras_nbguard.get_session().tf_gpu = lambda: tf
    with pytest.warns(keras_nbguard.NbguardWarning, match="can't be applied"):
        first = shell.run_cell("%%kerasrun --gpu-limit 1024 --quiet --label cap\nran = 1\n")
    second = shell.run_cell("%%kerasrun --gpu-limit 1024 --quiet --label cap\nran = 2\n")
    assert first.success and second.success and shell.user_ns["ran"] == 2
    records = keras_nbguard.runs("cap")
    assert any("can't be applied" in w for w in records[0].warnings)
    assert records[1].gpu.tf_peak == 700 * MB


def test_tensorflows_cpu_pool_is_read_only_once_its_runtime_is_up():
    """Reading the pool before TensorFlow's runtime exists would start it (and claim the GPUs
    before a GPU setup); where the allocator keeps no count (oneDNN off) there is no figure."""
    asked: list[str] = []

    def get_memory_info(device: str) -> dict[str, int]:
        asked.append(device)
        if device != "CPU:0":
            raise AssertionError(device)
        if stats is None:
            raise ValueError("Allocator stats not available for device 'CPU:0'")
        return stats

    config = SimpleNamespace(experimental=SimpleNamespace(get_memory_info=get_memory_info))
    up = [False]
    tf = TfGpu(config, lambda: up[0])
    stats: dict[str, int] | None = {"current": 5, "peak": 9}
    assert tf.host_pool() is None and asked == []  # never asked before the runtime is up
    up[0] = True
    assert tf.host_pool() == (5, 9)
    stats = None
    assert tf.host_pool() is None and asked == ["CPU:0", "CPU:0"]
