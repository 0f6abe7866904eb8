"""Causes read within one run: models kept, callbacks, checkpoints, a slow input, retracing,
epochs slowing down, predict or fit called batch by batch, running out of memory, a GPU held
whole."""

from __future__ import annotations

import statistics

from keras_nbguard.diagnosis.findings import (
    CALLBACK_SHARE,
    CHECKPOINT_SHARE,
    EPOCH_RISE_SECONDS,
    GPU_HELD_SHARE,
    GPU_USED_SHARE,
    INPUT_SHARE,
    LOOP_CALLS,
    LOOP_SECONDS,
    LOOP_SHARE,
    MIN_EPOCHS,
    RETRACE_THRESHOLD,
    TRACES_PER_FIT,
    WRITER_BYTES,
    Finding,
    Trend,
    name_of,
)
from keras_nbguard.records.calls import CallbackTime, FitRecord
from keras_nbguard.records.formatting import fmt_bytes, fmt_seconds, fmt_stale_size
from keras_nbguard.records.run import HeldModels, RunRecord, error_names_a_gpu


def within_run(run: RunRecord) -> list[Finding]:
    checks = (
        _stale_models, _callbacks, _checkpoint_io, _input_pipeline, _retracing, _epoch_slowdown,
        _inference_loop, _fit_loop, _oom_batch, _gpu_growth_not_set,
    )  # fmt: skip
    return [f for f in (check(run) for check in checks) if f]


def _stale_models(run: RunRecord) -> Finding | None:
    """The earlier runs' models still alive after ``run`` (as the record says; the diagnosis
    checks them against the kernel's live models when it shows them)."""
    return stale_finding(run, run.stale_models)


def stale_finding(run: RunRecord, held: HeldModels | None) -> Finding | None:
    if held is None or not held.count:
        return None
    runs = ", ".join(f"#{n}" for n in held.runs)
    whose = f"from {run.label} {runs}" if runs else f"of {run.label!r}"
    models = f"{held.count} model{'s' if held.count != 1 else ''} {whose}"
    where = f": {', '.join(held.paths[:3])}" if held.paths else ": `%nbguard leaks` says where"
    more = f" and {len(held.paths) - 3} more" if len(held.paths) > 3 else ""
    size = fmt_stale_size(held, run.keras)
    return Finding(
        "stale_models",
        f"{models} still alive after {name_of(run)} ({size}){where}{more}",
        held.command or "%nbguard free --containers, or del the names",
        (("models", str(held.count)), ("weights", fmt_bytes(held.weight_bytes))),
        (name_of(run),),
        0.5,
    )


def _hooks(run: RunRecord, writers: bool) -> list[CallbackTime]:
    """The run's callback methods, merged over its fits: those that wrote (or the others)."""
    merged: dict[str, CallbackTime] = {}
    for fit in run.fits:
        for hook in fit.callbacks:
            was = merged.get(hook.name)
            if was is not None:
                written = None
                if was.bytes_written is not None and hook.bytes_written is not None:
                    written = was.bytes_written + hook.bytes_written
                hook = CallbackTime(
                    hook.name, was.seconds + hook.seconds, was.calls + hook.calls, written
                )
            merged[hook.name] = hook
    chosen = [h for h in merged.values() if _writes(h) == writers]
    return sorted(chosen, key=lambda h: -h.seconds)


def _writes(hook: CallbackTime) -> bool:
    """A hook that writes (checkpoints, logs to disk): ``checkpoint_io`` names it."""
    return (hook.bytes_written or 0) >= WRITER_BYTES


def _hook_list(hooks: list[CallbackTime]) -> str:
    return ", ".join(f"{h.name} {fmt_seconds(h.seconds)} in {h.calls} calls" for h in hooks[:3])


def _callbacks(run: RunRecord) -> Finding | None:
    fit_total = sum(f.seconds for f in run.fits)
    if any(f.callbacks for f in run.fits):
        hooks = _hooks(run, writers=False)
        seconds = sum(h.seconds for h in hooks)
    else:  # a record from before the breakdown
        hooks, seconds = [], sum(f.callback_seconds or 0.0 for f in run.fits)
    # judged on what the hooks cost again and again: a slowest call's one-time work (TensorBoard
    # writing the graph at the first batch: 11% of a 1.45 s fit, and nothing of a long one) is
    # not what "do less per epoch or batch" fixes
    repeated = sum(
        hook.repeated_seconds for fit in run.fits for hook in fit.callbacks if not _writes(hook)
    )
    if not hooks:
        repeated = seconds
    if fit_total <= 0 or repeated / fit_total < CALLBACK_SHARE:
        return None
    which = f": {_hook_list(hooks)}" if hooks else ""
    return Finding(
        "callbacks",
        f"your callbacks took {fmt_seconds(seconds)} of the {fmt_seconds(fit_total)} fit "
        f"({seconds / fit_total:.0%}) in {name_of(run)}{which}",
        "make them do less per epoch or batch: log every few epochs, keep no growing lists",
        tuple((h.name, f"{fmt_seconds(h.seconds)} in {h.calls} calls") for h in hooks)
        or (("callbacks", fmt_seconds(seconds)),),
        (name_of(run),),
        seconds / fit_total,
    )


def _checkpoint_io(run: RunRecord) -> Finding | None:
    fit_total = sum(f.seconds for f in run.fits)
    writers = _hooks(run, writers=True)
    seconds = sum(h.seconds for h in writers)
    if fit_total <= 0 or seconds / fit_total < CHECKPOINT_SHARE:
        return None
    written = sum(h.bytes_written or 0 for h in writers)
    calls = sum(h.calls for h in writers)
    return Finding(
        "checkpoint_io",
        f"{writers[0].name} wrote {fmt_bytes(written)} in {calls} calls, taking "
        f"{fmt_seconds(seconds)} of the {fmt_seconds(fit_total)} fit ({seconds / fit_total:.0%}) "
        f"in {name_of(run)}",
        "save less often (save_freq, or every few epochs), only the best "
        "(save_best_only=True), or the weights only (save_weights_only=True)",
        tuple(
            (h.name, f"{fmt_bytes(h.bytes_written)} in {fmt_seconds(h.seconds)}, {h.calls} calls")
            for h in writers
        ),
        (name_of(run),),
        seconds / fit_total,
    )


def _input_pipeline(run: RunRecord) -> Finding | None:
    """A batch takes about as long to make as a training step: the fit waits for its input."""
    fits = [f for f in run.fits if f.input_seconds is not None and f.input_batches]
    if not fits:
        return None
    fit = max(fits, key=_input_share)
    share = _input_share(fit)
    if share < INPUT_SHARE:
        return None
    per_batch = (fit.input_seconds or 0.0) / (fit.input_batches or 1)
    return Finding(
        "input_pipeline",
        f"your {fit.input_kind} took {fmt_seconds(per_batch)} to make each of its "
        f"{fit.input_batches} batches, {share:.0%} of a {fmt_seconds(_step_seconds(fit))} "
        f"training step in {name_of(run)}: the fit waits for its input",
        _input_advice(fit.input_kind, run.keras),
        (
            ("making batches", fmt_seconds(fit.input_seconds)),
            ("per batch", fmt_seconds(per_batch)),
            ("per step", fmt_seconds(_step_seconds(fit))),
        ),
        (name_of(run),),
        min(1.0, share),
    )


_PARALLEL = (
    "make batches ahead and in parallel: a tf.data pipeline with .map(..., "
    "num_parallel_calls=tf.data.AUTOTUNE).cache().prefetch(tf.data.AUTOTUNE)"
)
_INPUT_ADVICE = {
    # a generator runs in fit's thread, one batch at a time: its batches by index can run in several
    "generator": (
        f"{_PARALLEL}, or make the same batches in a keras.utils.PyDataset (batch i in "
        "__getitem__) with workers=4"
    ),
    "PyDataset": (
        f"{_PARALLEL}, or let Keras call yours in threads: super().__init__(workers=4) in its "
        "__init__"
    ),
    # its flow() takes no workers, and it augments one image at a time in NumPy and SciPy
    "ImageDataGenerator": (
        "augment with Keras' layers instead (RandomFlip, RandomRotation, RandomTranslation, "
        "RandomZoom) in a tf.data .map(..., num_parallel_calls=tf.data.AUTOTUNE) or at the "
        "model's start, as keras.io does now; or let Keras make its batches in threads: "
        "batches = datagen.flow(...); batches.workers = 4"
    ),
}

# Keras 2's fit takes workers=... itself, for a Sequence and ImageDataGenerator's batches alike;
# its queue then waits out a 5 s timeout at each epoch's end (a Sequence of 0.3 s batches, 2
# CPUs: 40 an epoch 8.4 s with 4 workers, 20.8 s without; 4 an epoch 5.5 s with, 1.4 without)
_KERAS2_THREADS = (
    "let fit make its batches in threads: model.fit(..., workers=4) (Keras 2 then waits "
    "about 5 s at each epoch's end: worth it for epochs whose batches take longer)"
)
_KERAS2_INPUT_ADVICE = {
    "generator": (
        f"{_PARALLEL}, or make the same batches in a keras.utils.Sequence (batch i in "
        f"__getitem__) and {_KERAS2_THREADS}"
    ),
    "Sequence": f"{_PARALLEL}, or {_KERAS2_THREADS}",
    "ImageDataGenerator": (
        "augment with Keras' layers instead (RandomFlip, RandomRotation, RandomTranslation, "
        "RandomZoom) in a tf.data .map(..., num_parallel_calls=tf.data.AUTOTUNE) or at the "
        f"model's start; or {_KERAS2_THREADS}"
    ),
}


def _input_advice(kind: str | None, keras: str | None) -> str:
    """What that input can take on the Keras that ran it."""
    advice = _KERAS2_INPUT_ADVICE if (keras or "").startswith("Keras 2") else _INPUT_ADVICE
    return advice.get(kind or "", advice["generator"])


def _step_seconds(fit: FitRecord) -> float:
    """A training step's time: from the epochs after the first (which traces) when known."""
    if fit.steps and len(fit.epoch_seconds) > 1:
        return statistics.median(fit.epoch_seconds[1:]) / fit.steps
    return fit.seconds / max(1, fit.input_batches or 1)


def _input_share(fit: FitRecord) -> float:
    step = _step_seconds(fit)
    per_batch = (fit.input_seconds or 0.0) / max(1, fit.input_batches or 1)
    return per_batch / step if step > 0 else 0.0


def _retracing(run: RunRecord) -> Finding | None:
    if run.traces is None:
        return None
    if run.trace_kind != "tf.function":
        return _recompiling(run)
    # TensorFlow's own test: one tf.function traced again and again (RETRACE_THRESHOLD inputs)
    over = [(name, n) for name, n in run.signatures if n >= RETRACE_THRESHOLD]
    if not over:
        return None
    name, count = over[0]
    others = "".join(f", {n} {c}×" for n, c in over[1:])
    return Finding(
        "retracing",
        f"{name} was traced for {count} different inputs in {name_of(run)}{others} "
        f"(TensorFlow warns from {RETRACE_THRESHOLD}): each new Python value or shape it is "
        f"called with traces it again",
        "pass tensors, not Python numbers, to your tf.function (or give it an input_signature), "
        "and keep shapes fixed (drop_remainder=True)",
        (
            *((f"{n} traced for", f"{c} inputs") for n, c in over),
            ("tf.function traces", str(run.traces)),
        ),
        (name_of(run),),
        min(1.0, count / (4 * RETRACE_THRESHOLD)),
    )


def _recompiling(run: RunRecord) -> Finding | None:
    """JAX compiles each eager op once per shape on a kernel's first run: only Keras' steps
    compiled again (a new shape, a last partial batch) are retracing there."""
    inference = sum(c.calls for c in run.inference)  # evaluate and predict compile their own
    calls = max(1, len(run.fits) + inference)
    counted = sum(count for name, count in run.traced if "step" in name)
    if counted <= TRACES_PER_FIT * calls:
        return None
    most = ", ".join(f"{name} {count}×" for name, count in run.traced) or "functions"
    per = "per fit" if not run.inference else "per fit, evaluate or predict"
    return Finding(
        "retracing",
        f"{counted} {run.trace_kind} in {name_of(run)} ({counted / calls:.0f} {per}): "
        f"{most} compiled again and again",
        "keep shapes fixed (drop_remainder=True, or pad to a few fixed sizes)",
        (
            (run.trace_kind, str(counted)),
            ("fits", str(len(run.fits))),
            ("evaluate/predict", str(inference)),
        ),
        (name_of(run),),
        min(1.0, counted / (10 * calls)),
    )


def _epoch_slowdown(run: RunRecord) -> Finding | None:
    for fit in run.fits:
        epochs = list(fit.epoch_seconds[1:])  # the first epoch traces
        if len(epochs) < MIN_EPOCHS:
            continue
        trend = Trend(epochs)
        if trend.rise >= EPOCH_RISE_SECONDS and trend.rises():
            return Finding(
                "epoch_slowdown",
                f"epoch time rose {fmt_seconds(trend.rise)} within a fit of {name_of(run)} "
                f"({fmt_seconds(epochs[0])} → {fmt_seconds(epochs[-1])}, {trend.share:.0%})",
                "something grows each epoch: a callback that keeps more every epoch, or an input "
                "pipeline without cache/prefetch",
                (
                    ("epochs", str(len(fit.epoch_seconds))),
                    ("slope", f"{fmt_seconds(trend.slope, signed=True)} an epoch"),
                ),
                (name_of(run),),
                trend.share,
            )
    return None


# what to call instead, for one batch: the call without Keras' per-call setup
ON_BATCH = {"predict": "predict_on_batch(x)", "evaluate": "test_on_batch(x, y)"}


def _inference_loop(run: RunRecord) -> Finding | None:
    """``predict`` (or ``evaluate``) called again and again on one batch: each call sets up its
    data pipeline and callbacks anew (keras.io's text generation, 60 predicts of one sample a
    run: 86 ms each on TensorFlow, 57% of the cell; ``predict_on_batch`` takes 2)."""
    found = None
    for kind, instead in ON_BATCH.items():
        calls = [c for c in run.inference if c.kind == kind and c.steps == 1]
        count, seconds = sum(c.calls for c in calls), sum(c.seconds for c in calls)
        finding = _loop(
            run, "inference_loop", kind, count, seconds, "its data pipeline and callbacks",
            f"for one batch at a time call `model.{instead}`: no setup per call (keras.io's "
            f"text-generation LSTM on a CPU: 2 ms a call, against 60 ms for predict)",
        )  # fmt: skip
        if finding and not (found and found.weight >= finding.weight):
            found = finding
    return found


def _fit_loop(run: RunRecord) -> Finding | None:
    """``fit`` called again and again on one batch, for one epoch: a DQN's step, as tutorials
    write it (``model.fit(state, target, epochs=1, verbose=0)`` in the agent's loop). Each call
    sets up its data adapter, callbacks and progress anew: 61 ms a call for a Dense(32) model on
    this CPU, against 0.95 ms for ``train_on_batch``."""
    fits = [f for f in run.fits if f.completed and f.steps == 1 and f.epochs == 1]
    return _loop(
        run, "fit_loop", "fit", len(fits), sum(f.seconds for f in fits),
        "its data adapter, callbacks and progress",
        "for one batch at a time call `model.train_on_batch(x, y)`: no setup per call (a "
        "Dense(32) model on a CPU: 0.95 ms a call, against 61 ms for fit)",
    )  # fmt: skip


def _loop(
    run: RunRecord, code: str, kind: str, count: int, seconds: float, setup: str, advice: str
) -> Finding | None:
    """A finding for ``count`` calls of ``kind`` on one batch each, when they are many and take a
    share of the run worth the change: of the cell's own time where the run was isolated (the
    kernel's wait adds the process's start-up: keras.io's addition RNN read 13% isolated, 27%
    of its cell)."""
    wall = run.cell_seconds or run.wall_seconds or 0.0
    if count < LOOP_CALLS or seconds < LOOP_SECONDS or wall <= 0 or seconds < LOOP_SHARE * wall:
        return None
    whole = "the cell" if run.cell_seconds else "the run"
    return Finding(
        code,
        f"{count} {kind} calls of one batch each took {fmt_seconds(seconds)} in "
        f"{name_of(run)} ({fmt_seconds(seconds / count)} a call, {seconds / wall:.0%} of "
        f"{whole}): {kind} sets up {setup} for every call",
        advice,
        (
            (f"{kind} calls", str(count)),
            ("in all", fmt_seconds(seconds)),
            ("a call", fmt_seconds(seconds / count)),
        ),
        (name_of(run),),
        min(1.0, seconds / wall),
    )


def _oom_batch(run: RunRecord) -> Finding | None:
    if run.status != "oom":
        return None
    gpu = run.gpu
    # the error may name a GPU that was not read (torch's CUDA error): its use is then unknown
    on_gpu = gpu.known or error_names_a_gpu(run.error)
    where = "GPU" if on_gpu else "host"
    if gpu.known:
        peak: int | None = gpu.tf_peak or gpu.nvml_process_used
    else:
        peak = None if on_gpu else run.rss_peak
    unread = f"n/a (no GPU reading: {gpu.reason or 'not read'})"
    in_use = fmt_bytes(peak) if peak is not None else unread
    batch = run.fits[-1].batch_size if run.fits else None
    evidence = [(f"{where} memory at the failure", in_use)]
    if batch:
        evidence += [("batch size", str(batch)), ("try", f"batch_size={max(1, batch // 2)}")]
    at = f" at batch_size={batch}" if batch else ""
    with_use = f", with {fmt_bytes(peak)} in use" if peak is not None else ""
    return Finding(
        "oom_batch",
        f"{name_of(run)} ran out of {where} memory{at}{with_use}: {run.error or 'no detail'}",
        run.advice[0] if run.advice else "halve the batch size",
        (*evidence, *(("advice", a) for a in run.advice[1:])),
        (name_of(run),),
        2.0,
    )


def _gpu_growth_not_set(run: RunRecord) -> Finding | None:
    gpu = run.gpu
    held, total, peak = gpu.nvml_process_used, gpu.nvml_total, gpu.tf_peak
    if not held or not total or peak is None:
        return None
    if held < GPU_HELD_SHARE * total or peak >= GPU_USED_SHARE * held:
        return None
    return Finding(
        "gpu_growth_not_set",
        f"this kernel holds {fmt_bytes(held)} of the GPU's {fmt_bytes(total)} "
        f"({held / total:.0%}) while TensorFlow's peak use in {name_of(run)} was "
        f"{fmt_bytes(peak)}: memory growth is off, so TensorFlow took the whole GPU",
        "restart the kernel and run `%load_ext keras_nbguard` before TensorFlow starts (it turns "
        "growth on), or `%%kerasrun --gpu-growth` in the first cell; cap it with --gpu-limit",
        (("held", fmt_bytes(held)), ("GPU total", fmt_bytes(total)), ("TF peak", fmt_bytes(peak))),
        (name_of(run),),
        0.8,
    )
