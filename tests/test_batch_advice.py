"""keras_nbguard.batch_advice: the largest batch predicted to fit, from short steps on a copy of
the model. The line, its linearity and the accumulation advice from given probes (pure); real
TensorFlow on tiny models for the rest: the user's model untouched, probes under half the limit,
and an accumulated fit at the advised batch staying under the same --host-limit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import keras_nbguard
from keras_nbguard.advisor.batch_advisor import BatchAdvice, advise, batch_advice, batch_line_magic
from keras_nbguard.advisor.batch_probe import Probe


def probes(*pairs: tuple[int, float]) -> list[Probe]:
    return [Probe(batch, peak, 0.1) for batch, peak in pairs]


# -- the arithmetic, from given probes -------------------------------------------------------------
def test_a_linear_model_gets_the_largest_batch_under_the_limit_less_the_margin():
    advice = advise(
        probes((8, 58.0), (32, 82.0), (128, 178.0)), 1000.0, "given", "host", 1.0, 2.0, 1.5
    )
    assert advice.fixed_mib == pytest.approx(50.0) and advice.per_sample_mib == pytest.approx(1.0)
    assert advice.linear and advice.batch_range is None
    assert advice.batch_size == 900  # (1000 x 0.95 - 50) / 1 MiB per sample
    assert advice.predict(900) <= advice.usable_mib < advice.predict(901)
    assert advice.predicted[900] == pytest.approx(950.0)
    assert advice.breakdown["weights_mib"] == 1.0 and advice.breakdown["optimizer_mib"] == 2.0
    text = advice.text()
    assert "batch_size=900 fits under 1,000 MiB" in text and "5% kept free" in text
    assert "\n" not in text


def test_memory_not_linear_in_the_batch_gets_a_range_and_says_so():
    # quadratic: the line through all three misses the middle one by far more than noise
    advice = advise(
        probes((10, 60.0), (100, 150.0), (200, 450.0)), 2000.0, "given", "host", None, None, 1.0
    )
    assert not advice.linear
    low, high = advice.batch_range
    assert low < high and advice.batch_size == low
    # the steepest segment (3 MiB per sample) bounds the safe end
    assert low == int((2000 * 0.95 - (450 - 3 * 200)) / 3)
    assert "not linear" in advice.text() and f"between {low:,} and {high:,}" in advice.text()


def test_a_batch_smaller_than_wanted_names_the_accumulation_that_keeps_it():
    advice = advise(
        probes((8, 18.0), (32, 42.0), (64, 74.0)),
        300.0,
        "given",
        "host",
        4.0,
        8.0,
        1.0,
        user_batch=1000,
    )
    assert advice.batch_size == 275  # (285 - 10) / 1
    batch, k = advice.accumulation
    assert k * batch >= 1000 and k == 4 and batch == 250
    # the accumulators (one per weight, 4 MiB) still fit at that batch
    assert advice.predict(batch) + 4.0 <= advice.usable_mib
    assert "gradient_accumulation_steps=4" in advice.text() and "batch_size=250" in advice.text()


def test_probes_that_show_no_rise_give_an_upper_bound_and_say_so():
    advice = advise(
        probes((8, 40.0), (64, 40.5), (256, 40.2)), 500.0, "given", "host", None, None, 1.0
    )
    assert advice.per_sample_mib > 0 and "barely grows" in advice.text()


def test_probes_covered_by_memory_an_earlier_step_left_take_the_layers_estimate():
    # a convnet on 64x64 images with oneDNN (its pool keeps what the first steps took): the
    # probes rose 0.7 MiB a sample, its layers' outputs alone take 0.84, a fresh fit about 2
    covered = probes((8, 178.0), (18, 179.0), (65, 216.0))
    advice = advise(covered, 512.0, "given", "host", 1.0, 2.0, 1.5, 0.1, guess_mib=2.52)
    assert advice.per_sample_mib == pytest.approx(2.52)
    assert advice.predict(65) == pytest.approx(216.0)  # the line runs through the highest probe
    assert advice.batch_size == int((512 * 0.9 - (216 - 2.52 * 65)) / 2.52)
    assert "less than the layers' outputs alone (0.840)" in advice.text()
    # a rise of at least the outputs keeps the measured line
    measured = advise(covered, 512.0, "given", "host", 1.0, 2.0, 1.5, 0.1, guess_mib=2.0)
    assert measured.per_sample_mib < 0.8 and "outputs alone" not in measured.text()


def test_fewer_than_two_probes_is_no_advice_with_the_reason():
    advice = advise(probes((8, 300.0)), 500.0, "given", "host", None, None, 1.0)
    assert advice.batch_size is None and "fewer than two" in advice.text()


def test_the_chart_shows_the_probes_the_line_the_limit_and_the_advice():
    advice = advise(
        probes((8, 58.0), (32, 82.0), (128, 178.0)), 1000.0, "given", "host", 1.0, 2.0, 1.5
    )
    page = advice._repr_html_()
    assert page.count("<svg") == 1 and page.count("<circle") == 3
    assert "limit 1,000 MiB" in page and ">900</text>" in page


def test_it_is_public():
    assert keras_nbguard.batch_advice is batch_advice
    assert "batch_advice" in keras_nbguard.__all__ and "BatchAdvice" in keras_nbguard.__all__


# -- real TensorFlow ---------------------------------------------------------------------------
@pytest.mark.slow
def test_the_user_s_model_and_optimizer_are_unchanged_and_probes_stay_under_half(keras_shell):
    ns = keras_shell.user_ns
    assert run(
        keras_shell, "model = make_model()\nmodel.fit(x, y, batch_size=32, verbose=0)"
    ).success
    model = ns["model"]
    weights = [w.copy() for w in model.get_weights()]
    slots = [v.numpy() for v in model.optimizer.variables]
    iterations = int(model.optimizer.iterations)
    advice = batch_advice(model, ns["x"], ns["y"], limit_mib=256)
    assert all(np.array_equal(a, b) for a, b in zip(weights, model.get_weights(), strict=True))
    assert all(
        np.array_equal(a, b.numpy()) for a, b in zip(slots, model.optimizer.variables, strict=True)
    )
    assert int(model.optimizer.iterations) == iterations
    assert isinstance(advice, BatchAdvice) and advice.where == "host (VmHWM)"
    assert len(advice.probes) >= 2
    assert all(p.peak_mib < 128 for p in advice.probes)  # half of the limit
    assert advice.batch_size and advice.batch_size > 0 and advice.seconds > 0
    assert advice.breakdown["weights_mib"] == pytest.approx(sum(w.nbytes for w in weights) / 2**20)
    assert advice.breakdown["optimizer_mib"] > advice.breakdown["weights_mib"]  # Adam: 2 slots


@pytest.mark.slow
def test_the_magic_line_looks_its_names_up(keras_shell):
    assert run(keras_shell, "model = make_model()").success
    advice = keras_shell.run_line_magic("nbguard", "batch model x y --limit 200 --steps 1")
    assert advice.limit_mib == 200 and advice.limit_source == "given"
    with pytest.raises(UsageError, match="no name nope"):  # the magic: no traceback
        keras_shell.run_line_magic("nbguard", "batch model nope")
    with pytest.raises(ValueError, match="no name nope"):
        batch_line_magic(keras_shell, "model nope")
    with pytest.raises(ValueError, match="positive whole number"):
        batch_line_magic(keras_shell, "model x --limit lots")
    with pytest.raises(ValueError, match="usage"):
        batch_line_magic(keras_shell, "model")


CONV = """
import numpy as np, keras
rng = np.random.default_rng(0)
images = rng.random((1024, 32, 32, 3), dtype="float32"); labels = rng.integers(0, 10, 1024)
def conv(accumulate=None):
    m = keras.Sequential([keras.Input((32, 32, 3)),
                          keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    m.compile(keras.optimizers.Adam(gradient_accumulation_steps=accumulate),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m
"""


@pytest.mark.slow
@pytest.mark.xfail(
    strict=False,
    reason="issue 28, not met on the host: a fresh fit's peak RSS came 14-27% over the probes' "
    "line in a third of the runs here (10% is kept free); a pass is reported as XPASS",
)
def test_an_accumulated_fit_at_the_advised_batch_stays_under_the_host_limit(shell):
    """The user wants batch 1024, which needs more than the limit: the advice's smaller batch
    with gradient_accumulation_steps=k runs under the same --host-limit."""
    limit = 160
    assert run(shell, CONV).success
    advice = batch_advice(
        shell.user_ns["conv"](),
        shell.user_ns["images"],
        shell.user_ns["labels"],
        limit_mib=limit,
        batch_size=1024,
    )
    assert advice.batch_size is not None and advice.batch_size < 1024, advice.text()
    assert advice.predict(1024) > limit
    batch, k = advice.accumulation
    assert k * batch >= 1024
    shell.user_ns.update(batch=batch, k=k)
    cell = (
        f"%%kerasrun --host-limit {limit} --label accumulated\n"
        "m = conv(accumulate=k)\n"
        "m.fit(images, labels, batch_size=batch, steps_per_epoch=k, verbose=0)\n"
        "del m"
    )
    run(shell, cell)
    record = keras_nbguard.runs("accumulated", this_kernel=True)[-1]
    assert record.status == "ok", (advice.text(), record.error)
    assert record.rss_peak - record.rss_before <= limit * 2**20


@pytest.mark.slow
def test_an_out_of_memory_run_of_the_advised_model_quotes_the_advice(shell):
    """batch_advice() for a model, then a fit of the same model at a batch over the limit: the
    run's first advice line, and so the oom_batch finding, quotes what that batch needs and what
    fits, with the accumulation that keeps it."""
    limit = 160
    assert run(shell, CONV).success
    conv = shell.user_ns["conv"]
    advice = batch_advice(conv(), shell.user_ns["images"], shell.user_ns["labels"], limit_mib=limit)
    assert advice.batch_size is not None and advice.predict(1024) > limit, advice.text()
    cell = (
        f"%%kerasrun --host-limit {limit} --label big --quiet\n"
        "m = conv()\n"
        "m.fit(images, labels, batch_size=1024, steps_per_epoch=1, verbose=0)"
    )
    run(shell, cell)
    record = keras_nbguard.runs("big", this_kernel=True)[-1]
    assert record.status == "oom", record.error
    quote = record.advice[0]
    assert quote.startswith("batch_advice: batch 1,024 needs ~"), record.advice
    assert f"{advice.batch_size:,} fits under {limit} MiB" in quote
    assert "gradient_accumulation_steps=" in quote
    (finding,) = [f for f in keras_nbguard.diagnose("big") if f.kind == "oom_batch"]
    assert finding.advice == quote
    shell.run_cell("del m")


@pytest.mark.slow
def test_kerasrun_batch_advice_probes_what_the_labels_last_run_fit(keras_shell):
    cell = (
        "%%kerasrun --label advised --quiet --host-limit 200 {flag}\n"
        "model = make_model()\n"
        "model.fit(x, y, batch_size=32, epochs=1, verbose=0);"
    )
    with capture_output() as first:
        assert run(keras_shell, cell.format(flag="--batch-advice")).success
    assert "batch advice: n/a (no earlier run of 'advised' in this kernel fit a model)" in (
        first.stdout
    )
    with capture_output() as second:
        assert run(keras_shell, cell.format(flag="--batch-advice")).success
    line = second.stdout.strip().splitlines()[0]
    assert line.startswith("batch advice: batch_size="), second.stdout
    assert "fits under 200 MiB (--host-limit" in line  # the cell's own limit
    # the run itself is measured after the probes, and still recorded as usual
    assert [r.run_number for r in keras_nbguard.runs("advised", this_kernel=True)] == [1, 2]
    # a re-run setup cell binds new arrays to x and y: the names are followed
    assert run(keras_shell, "x = x.copy(); y = y.copy()").success
    with capture_output() as rebound:
        run(keras_shell, "%%kerasrun --label advised --quiet --batch-advice\nz = 1")
    assert rebound.stdout.startswith("batch advice: batch_size="), rebound.stdout
    keras_shell.run_cell("del model")
    with capture_output() as gone:
        run(keras_shell, "%%kerasrun --label advised --quiet --batch-advice\nz = 1")
    assert "the model or the data 'advised' last fit is gone, and no name" in gone.stdout
    with capture_output() as isolated:
        assert not run(keras_shell, "%%kerasrun --isolate --batch-advice\nz = 1").success
    assert "--batch-advice probes in this kernel" in isolated.stdout + isolated.stderr


@pytest.mark.slow
def test_the_dashboard_shows_the_advice_for_the_last_runs_model(keras_shell):
    from keras_nbguard.board.kernel_board import dashboard

    assert run(keras_shell, "model = make_model()").success
    advice = keras_shell.run_line_magic("nbguard", "batch model x y --limit 200 --steps 1")
    board = dashboard(mode="static")
    cell = "%%kerasrun --label shown --quiet\nmodel.fit(x, y, batch_size=32, epochs=1, verbose=0);"
    assert run(keras_shell, cell).success
    text = board._bundle()["text/plain"]
    assert advice.text().removeprefix("batch advice: ") in text
    html_view = board._bundle()["text/html"]
    assert "Batch advice for the last run's model" in html_view
    other = "%%kerasrun --label other --quiet\nm2 = make_model(units=8)\nm2.fit(x, y, verbose=0);"
    assert run(keras_shell, other).success  # another model: its advice was never asked for
    assert "Batch advice for the last run's model" not in board._bundle()["text/html"]
    board.detach()


# -- JAX on a GPU: XLA's plan of the step, not JAX's process-wide peak -----------------------------
XLA_PLAN = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np, keras
from keras_nbguard.advisor import batch_probe
rng = np.random.default_rng(0)
x = rng.random((64, 16, 16, 3), dtype="float32"); y = rng.integers(0, 10, 64)
model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(32, 3, padding="same"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
model.compile("adam", "sparse_categorical_crossentropy")
class OneGpu:  # what JAX's allocator says on a GPU (a fake only where no GPU can be here)
    name = "JAX"
    def unavailable(self): return None
    def read(self): return (0, 5 * 2**30)  # a peak a compile's autotuning left, never reset
    def reset_peak(self): return False
batch_probe.allocator_for = lambda backend, tf_gpu: OneGpu()
source = batch_probe.peak_source()
copy = batch_probe.copy_of(model)
peaks = {b: batch_probe.measure(copy, x, y, b, 1, source).peak_mib for b in (4, 8, 16)}
state = sum(v.value.nbytes for v in copy.weights + copy.optimizer.variables) / 2**20
print(json.dumps({"where": source.where, "peaks": peaks, "state": state}))
"""


def test_on_jax_a_probe_s_peak_is_xla_s_plan_of_the_step_at_its_batch():
    """On an H200 JAX's peak (one per process, never reset) held a GPU compile's autotuning
    scratch: 763 MiB at a convnet's batch 8. The probe reads XLA's own plan of Keras' train step
    compiled at its batch instead: it holds the copy's state and rises with the batch."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", XLA_PLAN], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["where"] == "GPU (XLA's plan of the JAX train step)"
    p4, p8, p16 = (got["peaks"][str(b)] for b in (4, 8, 16))
    assert got["state"] < p4 < 1024  # the weights and Adam's slots, not the process's high
    assert p4 < p8 < p16
    assert p16 - p8 == pytest.approx(2 * (p8 - p4), rel=0.15)  # linear in the batch


# -- torch on a GPU: what its caching allocator reserved, as a cap counts it ---------------------
class ReservingCuda:
    """torch.cuda's slice the probe reads (no GPU here): tensors in use, and the blocks reserved
    around them, which an emptied cache gives back."""

    def __init__(self) -> None:
        self.allocated, self.reserved, self.peak = 100 * 2**20, 300 * 2**20, 300 * 2**20
        self.emptied = 0

    def device_count(self) -> int:
        return 1

    def empty_cache(self) -> None:
        self.emptied += 1
        self.reserved = self.peak = self.allocated

    def reset_peak_memory_stats(self, device: int) -> None:
        self.peak = self.reserved

    def memory_allocated(self, device: int) -> int:
        return self.allocated

    max_memory_allocated = memory_allocated

    def memory_stats(self, device: int) -> dict[str, int]:
        return {"reserved_bytes.all.current": self.reserved, "reserved_bytes.all.peak": self.peak}


def test_on_torch_a_probe_s_peak_is_the_memory_reserved_from_an_emptied_cache(monkeypatch):
    """On an H200 a convnet advised from torch's tensor peaks ran out of memory under its cap:
    the cap bounds what torch reserves (907 MiB in tensors, 115 MiB more reserved). The probe
    reads the reserved peak, from a cache emptied as each %%kerasrun run starts."""
    import sys
    from types import SimpleNamespace

    from keras_nbguard.advisor import batch_probe
    from keras_nbguard.collectors.allocators import TorchAllocator

    cuda = ReservingCuda()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    allocator = TorchAllocator(sys.modules["torch"])
    monkeypatch.setattr(batch_probe, "allocator_for", lambda backend, tf_gpu: allocator)
    monkeypatch.setattr(batch_probe.backends, "current_backend", lambda: "torch")
    monkeypatch.setattr(allocator, "unavailable", lambda: None)
    source = batch_probe.peak_source()
    assert isinstance(source, batch_probe.TorchReservedPeaks) and cuda.emptied == 1
    assert source.base == 100 * 2**20  # the cache given back first: only tensors in use
    source.reset()
    cuda.peak = 612 * 2**20  # a step: 400 MiB of tensors, rounded and fragmented into 512
    assert source.peak_after(None, None, None, 8) == 512 * 2**20
    assert source.where == "GPU (torch's reserved memory)"
