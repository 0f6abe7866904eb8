"""Findings that tell the present, on a real shell with real TensorFlow: retracing judged as
TensorFlow judges it (the keras.io loop from scratch is clean; a function traced for many Python
numbers is not; a run that traces more than the runs before it is named), a freed model's finding
gone, a second kernel on the same history showing none of the first one's models, and the one
trend with its span."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import make_record, run

import keras_nbguard
from keras_nbguard.board.findings_view import current_findings
from keras_nbguard.diagnosis.findings import (
    NATIVE_RUNS,
    RETRACE_THRESHOLD,
    label_trends,
    trends_text,
)

MiB = 2**20


def kinds(findings) -> list[str]:
    return [f.kind for f in findings]


def test_the_threshold_is_tensorflows_own():
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    assert RETRACE_THRESHOLD == polymorphic_function.FREQUENT_TRACING_WARNING_THRESHOLD


# keras.io/guides/writing_a_training_loop_from_scratch, as written there (MNIST's shapes,
# synthetic, fewer samples: 15 batches of 64 and a last partial one of 40)
LOOP_SETUP = """
import numpy as np
import tensorflow as tf
import keras
rng = np.random.default_rng(0)
x_train = rng.random((1000, 784), dtype="float32")
y_train = rng.integers(0, 10, 1000)
x_val, y_val = x_train[-200:], y_train[-200:]
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1024).batch(64)
val_dataset = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(64)
"""
LOOP = """%%kerasrun --label loop --quiet
inputs = keras.Input(shape=(784,), name="digits")
x1 = keras.layers.Dense(64, activation="relu")(inputs)
x2 = keras.layers.Dense(64, activation="relu")(x1)
outputs = keras.layers.Dense(10, name="predictions")(x2)
model = keras.Model(inputs=inputs, outputs=outputs)
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
val_acc_metric = keras.metrics.SparseCategoricalAccuracy()

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
    train_acc_metric.update_state(y, logits)
    return loss_value

@tf.function
def test_step(x, y):
    val_logits = model(x, training=False)
    val_acc_metric.update_state(y, val_logits)

for epoch in range(2):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        loss_value = train_step(x_batch_train, y_batch_train)
    train_acc = train_acc_metric.result()
    train_acc_metric.reset_state()
    for x_batch_val, y_batch_val in val_dataset:
        test_step(x_batch_val, y_batch_val)
    val_acc = val_acc_metric.result()
    val_acc_metric.reset_state()
"""


@pytest.mark.slow
def test_the_training_loop_from_scratch_is_not_retracing(shell):
    assert run(shell, LOOP_SETUP).success
    for _ in range(3):
        result = run(shell, LOOP)
        assert result.success, result.error_in_exec
    records = keras_nbguard.runs("loop")
    # each run traces its steps anew (defined in the cell): the same count every run, and each
    # step for two inputs only, a full batch and the last partial one
    assert len({r.traces for r in records}) == 1 and records[0].traces >= 4, records
    for record in records:
        steps = dict(record.signatures)
        assert steps["train_step"] == 2 and steps["test_step"] == 2, record.signatures
        assert not [f for f in record.findings if f.startswith("retracing")]
    assert "retracing" not in kinds(keras_nbguard.diagnose("loop"))


SCALE = """%%kerasrun --label {label} --quiet
import tensorflow as tf
@tf.function
def scale(n):
    return tf.constant(1.0) * n
for n in range({count}):
    scale(n)  # a new Python number: a new trace each time
"""


def test_a_function_traced_for_as_many_numbers_as_tensorflow_warns_at_is_retracing(keras_shell):
    below = RETRACE_THRESHOLD - 1
    assert run(keras_shell, SCALE.format(label="few", count=below)).success
    assert keras_nbguard.runs("few")[-1].signatures == (("scale", below),)
    assert "retracing" not in kinds(keras_nbguard.diagnose("few"))  # TensorFlow says nothing

    assert run(keras_shell, SCALE.format(label="many", count=12)).success
    (finding,) = keras_nbguard.diagnose("many")
    assert finding.kind == "retracing"
    assert finding.message.startswith("scale was traced for 12 different inputs in many #1 ")
    assert f"(TensorFlow warns from {RETRACE_THRESHOLD})" in finding.message
    record = keras_nbguard.runs("many")[-1]  # and the run's own summary says it
    assert record.findings == (f"retracing: {finding.message} — %nbguard diagnose",)
    # a reset hides the runs: their findings go with them, in diagnose and the dashboard
    keras_shell.run_line_magic("nbguard", "reset")
    assert keras_nbguard.diagnose() == []
    assert current_findings(keras_nbguard.get_session()) == []
    keras_shell.run_line_magic("nbguard", "reset --undo")
    assert kinds(keras_nbguard.diagnose()) == ["retracing"]


def test_a_run_that_traces_more_than_the_runs_before_it_is_named_and_stays_named(keras_shell):
    setup = "import tensorflow as tf\n@tf.function\ndef scale(n):\n    return tf.constant(1.0) * n"
    assert run(keras_shell, setup).success
    cell = "%%kerasrun --label more --quiet\nfor n in values:\n    scale(n)\n"
    # runs 1 and 2 trace 0 and 1 once each (run 2 finds them cached), run 3 traces 3 new numbers
    for values in ([0, 1], [0, 1], [2, 3, 4]):
        keras_shell.user_ns["values"] = values
        assert run(keras_shell, cell).success
    assert [r.traces for r in keras_nbguard.runs("more")] == [2, 0, 3]
    (finding,) = keras_nbguard.diagnose("more")
    assert finding.kind == "retracing" and finding.runs == ("more #3",)
    assert finding.message.startswith(
        "more #3 made 3 tf.function traces, more than any earlier "
        "run of 'more' in this kernel (2 at most in more #1–#2)"
    )
    assert "scale 3× (2 at most before)" in finding.message
    # run 4 finds them cached again: the cause shown under run 3 is still there, naming run 3
    assert run(keras_shell, cell).success
    (still,) = keras_nbguard.diagnose("more")
    assert still.message == finding.message
    assert keras_nbguard.runs("more")[-1].findings == ()  # run 4's own summary: not its cause


def test_a_cause_of_an_earlier_run_stays_until_a_later_run_does_the_same_work_without_it():
    from keras_nbguard.diagnosis.diagnose import diagnose

    traced = make_record(label="t", run_number=1, traces=12, signatures=(("scale", 12),))
    cached = make_record(label="t", run_number=2, traces=0)  # found its traces cached
    (finding,) = diagnose([traced, cached])
    assert finding.kind == "retracing" and finding.runs == ("t #1",)  # still there, naming #1
    fixed = make_record(label="t", run_number=3, traces=1, signatures=(("scale", 1),))
    assert diagnose([traced, cached, fixed]) == []  # traced again, once: fixed


KEPT = (
    "%%kerasrun --label kept --quiet\nkept.append(make_model())\n"
    "kept[-1].fit(x, y, epochs=1, verbose=0)"
)


def test_a_freed_models_finding_is_gone_at_once(keras_shell):
    run(keras_shell, "kept = []")
    for _ in range(2):
        assert run(keras_shell, KEPT).success
    session = keras_nbguard.get_session()
    (finding,) = keras_nbguard.diagnose("kept")
    assert finding.kind == "stale_models"
    assert finding.message.startswith("1 model from kept #1 still alive after kept #2 (")
    assert "kept[0]" in finding.message
    assert kinds(current_findings(session)) == ["stale_models"]  # the dashboard's, the same
    report = keras_nbguard.free(containers=True)
    assert report.counts()  # it did free something
    assert keras_shell.user_ns["kept"][0] is None
    assert keras_nbguard.diagnose("kept") == []
    assert current_findings(session) == []
    # the record still says what was true when run #2 ended
    assert keras_nbguard.runs("kept")[-1].stale_models.count == 1


SECOND_KERNEL = """
import json, keras_nbguard
from IPython.core.interactiveshell import InteractiveShell
from keras_nbguard.diagnosis.diagnose import diagnose
from keras_nbguard.board.findings_view import current_findings
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "keras_nbguard")
session = keras_nbguard.get_session()
print(json.dumps({
    "history": [[r.label, r.run_number] for r in keras_nbguard.runs()],
    "recorded_stale": [r.run_number for r in keras_nbguard.runs() if r.stale_models],
    "diagnose": [f.kind for f in keras_nbguard.diagnose()],
    "dashboard": [f.kind for f in current_findings(session)],
    "magic": [f.kind for f in shell.run_line_magic("nbguard", "diagnose")],
}))
"""


@pytest.mark.slow
def test_a_second_kernel_on_the_same_history_shows_none_of_the_first_ones_models(
    keras_shell, history_database
):
    run(keras_shell, "kept = []")
    for _ in range(2):
        assert run(keras_shell, KEPT).success
    session = keras_nbguard.get_session()
    assert kinds(keras_nbguard.diagnose()) == ["stale_models"]  # here, in the first kernel
    session.store.flush()  # on disk
    env = {
        **os.environ,
        "KERAS_NBGUARD_DB": str(history_database),
        "KERAS_NBGUARD_NOTEBOOK": session.notebook,
    }
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SECOND_KERNEL)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["history"] == [["kept", 1], ["kept", 2]]  # it reads the first kernel's runs
    assert seen["recorded_stale"] == [2]  # whose record names a stale model
    assert seen["diagnose"] == seen["dashboard"] == seen["magic"] == []  # none of them alive here


# -- the one trend -------------------------------------------------------------------------------
def grown(
    count: int,
    mib_a_run: float,
    kernel: str = "k1",
    pid: int = 1,
    first: int = 1,
    warmup_mib: float = 50,
):
    """Runs of ``mlp`` in one kernel: the first jumps by ``warmup_mib``, then RSS grows steadily;
    each run starts where the one before ended."""
    after = [int((500 + (warmup_mib if i else 0) + i * mib_a_run) * MiB) for i in range(count)]
    return [
        make_record(
            run_number=first + i,
            kernel_id=kernel,
            pid=pid,
            fit_seconds=1.0,
            rss_before=after[i - 1] if i else 500 * MiB,
            rss_after=after[i],
        )
        for i in range(count)
    ]


def test_the_trend_leaves_out_the_warm_up_and_says_its_span():
    runs = grown(5, 2.5)
    rss, fit = label_trends(runs)
    assert fit.span == rss.span == "runs 2–5"
    assert rss.slope == 2.5 * MiB  # not the 50 MiB jump of run 1
    assert not rss.flagged  # 4 runs after the warm-up: too few to judge, and it says so (the
    # docs promise a ⚠ at 2 MiB a run: a JupyterLab walkthrough read the line as a missed flag)
    assert trends_text("mlp", runs) == (
        "mlp: RSS left +2.5 MiB per run over runs 2–5 (a finding needs 5 runs after the first; "
        "4 so far); fit time +0 ms per run over runs 2–5"
    )
    # just under the 2 MiB a run the ⚠ starts at: not rounded up to it (1.98 read "+2.0 MiB")
    under = label_trends(grown(8, 1.98))[0]
    assert not under.flagged and under.text().startswith("RSS left +1.98 MiB per run over")


def test_the_flag_beside_the_number_is_the_diagnosis_finding():
    from keras_nbguard.diagnosis.diagnose import diagnose

    runs = grown(NATIVE_RUNS + 2, 4.0)  # nothing of yours grew: named after NATIVE_RUNS
    rss, _ = label_trends(runs)
    assert rss.flagged and rss.text() == "⚠ RSS left +4.0 MiB per run over runs 2–12"
    (finding,) = diagnose(runs)
    assert finding.kind == "state_growth" and "over mlp #2–#12" in finding.message
    assert "grows 4.0 MiB a run" in finding.message
    flat = grown(NATIVE_RUNS + 2, 1.0)  # under the 2 MiB a run the diagnosis names: no flag
    assert not label_trends(flat)[0].flagged and diagnose(flat) == []


def test_after_a_restart_the_trend_is_the_new_kernels_alone():
    earlier = grown(6, 4.0)
    now = grown(2, 0.5, kernel="k2", pid=2, first=7)
    assert trends_text("mlp", earlier + now) == (
        "mlp: a trend needs 3 runs in this kernel, the first a warm-up (2 so far)"
    )
    now = grown(4, 0.5, kernel="k1", pid=3, first=7)  # "Restart kernel": same id, new process
    assert label_trends(earlier + now)[0].span == "runs 8–10"
