"""Diagnosis in words: the trend rules on records, where a clean or merely noisy label must
raise nothing; kept models and compare on a real shell (the other causes, built for real:
test_causes.py; retracing, and findings that tell the present: test_findings_present.py)."""

from __future__ import annotations

import dataclasses
import random
import re
import sys

import pytest
from helpers import make_record, run

import keras_nbguard
from keras_nbguard.diagnosis.compare import Comparison, find_run
from keras_nbguard.diagnosis.diagnose import MIN_RUNS, Trend, diagnose
from keras_nbguard.diagnosis.findings import label_trends, rss_trend, trends_text
from keras_nbguard.records.formatting import fmt_seconds
from keras_nbguard.records.run import FitRecord, GpuReading, Growth, HeldModels

MiB = 2**20


def runs_of(
    fit_seconds: list[float],
    rss_after: list[int] | None = None,
    label: str = "mlp",
    rss_before: list[int] | None = None,
):
    """A label's runs; each starts from the RSS the one before ended at, unless ``rss_before``."""
    rss_after = rss_after or [500 * MiB] * len(fit_seconds)
    rss_before = rss_before or rss_after[:1] + rss_after[:-1]
    return [
        make_record(
            label=label,
            run_number=i + 1,
            fit_seconds=s,
            rss_before=b,
            rss_after=r,
            fits=(FitRecord(seconds=s, epochs=2),),
        )
        for i, (s, b, r) in enumerate(zip(fit_seconds, rss_before, rss_after, strict=True))
    ]


def kinds(findings) -> list[str]:
    return [f.kind for f in findings]


def _retracing(runs):
    """Each run traces one function more than the one before: something piles up."""
    return [dataclasses.replace(r, traces=3 + i) for i, r in enumerate(runs)]


def test_a_steady_slowdown_is_named_with_its_size():
    rng = random.Random(1)
    times = [1.0 + 0.05 * i + rng.uniform(-0.03, 0.03) for i in range(10)]
    (finding,) = [f for f in diagnose(_retracing(runs_of(times))) if f.kind == "run_slowdown"]
    rise_ms = int(re.search(r"fit time rose (\d+) ms", finding.message).group(1))
    assert 320 <= rise_ms <= 480  # 0.05 s a run over the 8 steps of runs #2-#10: 400 ms
    assert finding.runs[0] == "mlp #2"  # the first run is a warm-up, left out


def test_a_slowdown_with_nothing_piling_up_is_the_machines_pace_not_a_finding():
    # Keras' convnet under the magic on a shared VM: fits 0.9 -> 1.4 s over 12 runs, CPU time
    # along, traces, steps, callbacks, names, models and RSS flat
    rng = random.Random(1)
    times = [1.0 + 0.05 * i + rng.uniform(-0.03, 0.03) for i in range(10)]
    runs = runs_of(times)
    assert kinds(diagnose(runs)) == []
    assert "nothing of the runs piles up with it" in trends_text("mlp", runs)
    # each of the causes a slowdown across runs has, piling up with it: named again
    fit = runs[0].fits[0]
    more_steps = [
        dataclasses.replace(r, fits=(dataclasses.replace(fit, seconds=t, steps=10 + i),))
        for i, (r, t) in enumerate(zip(runs, times, strict=True))
    ]
    slower_callbacks = [
        dataclasses.replace(
            r, fits=(dataclasses.replace(fit, seconds=t, callback_seconds=0.05 * i),)
        )
        for i, (r, t) in enumerate(zip(runs, times, strict=True))
    ]
    pipelines = [dataclasses.replace(r, dataset_traces=i // 3) for i, r in enumerate(runs)]
    held = HeldModels(count=2, runs=(1, 2), paths=("models",), weight_bytes=MiB)
    kept = [*runs[:-1], dataclasses.replace(runs[-1], stale_models=held)]
    for piling in (_retracing(runs), more_steps, slower_callbacks, pipelines, kept):
        assert "run_slowdown" in kinds(diagnose(piling))
    # callbacks a little slower, by far less than the fits: still the machine's
    a_little = [
        dataclasses.replace(
            r, fits=(dataclasses.replace(fit, seconds=t, callback_seconds=0.001 * i),)
        )
        for i, (r, t) in enumerate(zip(runs, times, strict=True))
    ]
    assert "run_slowdown" not in kinds(diagnose(a_little))
    # a pipeline the cell builds anew each run, as many each run: no more than before
    rebuilt = [dataclasses.replace(r, dataset_traces=2) for r in runs]
    assert "run_slowdown" not in kinds(diagnose(rebuilt))


def test_the_fit_time_trend_is_of_runs_that_ran_the_latest_runs_epochs():
    """A walkthrough's dashboard read `fit time -33 ms per run` over runs of 3 epochs and one
    of 300 (27.7 s): the line was of different work, not of a pace."""
    rng = random.Random(2)
    times = [1.0 + rng.uniform(-0.02, 0.02) for _ in range(10)]
    runs = runs_of(times)
    fit = runs[0].fits[0]
    long = dataclasses.replace(fit, seconds=100.0, epochs=300, epoch_seconds=(0.33,) * 300)
    runs[4] = dataclasses.replace(runs[4], fit_seconds=100.0, fits=(long,))
    trend = label_trends(runs)[1]
    assert runs[4] not in trend.runs and len(trend.runs) == 8  # after the first, less the 300
    assert abs(trend.trend.slope) < 0.05, trends_text("mlp", runs)
    assert trend.span == "runs 2–10 except #5 of other epochs"  # not as if it had failed
    # an early stop's 3 to 5 epochs are the same work (left out, they left trends of two runs)
    early = [
        dataclasses.replace(r, fits=(dataclasses.replace(fit, epoch_seconds=(0.2,) * (3 + i % 3)),))
        for i, r in enumerate(runs_of(times))
    ]
    assert len(label_trends(early)[1].runs) == 9
    # said, not hidden: a walkthrough read "-100 ms per run" over runs of 2 epochs and one of 3
    assert label_trends(early)[1].span == "runs 2–10, 3–5 epochs"
    assert label_trends(early)[0].span == "runs 2–10"  # the RSS series: epochs are no matter


def test_a_slowdown_with_the_fits_cpu_time_flat_is_a_busier_machine_not_the_runs():
    # As much work each run (CPU time 0.8 s), waiting longer: other processes took the cores
    rng = random.Random(1)
    times = [1.0 + 0.05 * i + rng.uniform(-0.03, 0.03) for i in range(10)]

    def with_cpu(cpu: list[float]):
        return [
            dataclasses.replace(r, fits=(dataclasses.replace(r.fits[0], cpu_seconds=c),))
            for r, c in zip(runs_of(times), cpu, strict=True)
        ]

    busier = with_cpu([0.8 + rng.uniform(-0.02, 0.02) for _ in times])
    assert kinds(diagnose(busier)) == []
    assert "a busier machine: the fits' CPU time" in trends_text("mlp", busier)
    # more work every run (retracing, a growing graph): the CPU time rises with it
    working = _retracing(with_cpu([0.8 * t for t in times]))
    assert "run_slowdown" in kinds(diagnose(working))
    # a fit that waits on a GPU (CPU time a fifth of its time): judged on its time, as before
    waiting = _retracing(with_cpu([0.2] * len(times)))
    assert "run_slowdown" in kinds(diagnose(waiting))


def test_noise_alone_raises_nothing():
    rng = random.Random(7)
    for _ in range(200):  # fit times varying ±10% run to run, as on this machine
        times = [1.0 * rng.uniform(0.9, 1.1) for _ in range(rng.randint(MIN_RUNS + 1, 15))]
        assert diagnose(runs_of(times)) == []


def test_too_few_runs_judge_no_trend():
    assert diagnose(runs_of([1.0, 1.5, 2.0, 2.5, 3.0])) == []  # 4 after the warm-up


def test_rss_growing_every_run_is_state_growth_with_the_rate():
    rss = [500 * MiB + i * 10 * MiB for i in range(12)]
    (finding,) = diagnose(runs_of([1.0] * 12, rss))
    assert finding.kind == "state_growth" and "grows 10.0 MiB a run" in finding.message


def test_a_labels_isolated_runs_and_its_runs_here_are_two_series_not_one():
    """Six runs here at a flat 500 MiB, then six with --isolate, each child at 900 MiB: one
    series read as growth across the switch. An isolated run's RSS is its own process's."""
    flat = runs_of([1.0] * 12, [500 * MiB] * 6 + [900 * MiB] * 6)
    mixed = [
        dataclasses.replace(r, isolated="fresh process") if i >= 6 else r
        for i, r in enumerate(flat)
    ]
    assert diagnose(mixed) == []
    assert "RSS left +0.0 MiB per run over runs 8–12" in trends_text("mlp", mixed)
    back_here = [*mixed, dataclasses.replace(mixed[0], run_number=13, rss_after=500 * MiB)]
    assert diagnose(back_here) == []  # the kernel's own series goes on


def test_rss_after_swinging_up_while_each_next_run_starts_flat_is_no_growth():
    # RSS after each run rises 4 MiB a run (TensorFlow's thread arenas, freed heap not yet given
    # back), but every next run starts from 500 MiB once collected and trimmed: nothing stayed.
    after = [500 * MiB + i * 4 * MiB for i in range(12)]
    assert diagnose(runs_of([1.0] * 12, after, rss_before=[500 * MiB] * 12)) == []
    assert kinds(diagnose(runs_of([1.0] * 12, after))) == ["state_growth"]  # when it does stay


def test_arena_swings_with_nothing_of_yours_growing_are_no_native_growth():
    # What keras.io's examples left, runs 2-6 (heap in use flat): up 13 MiB a run, not run after
    # run; five runs can't show a steady rise, seven that swing don't either
    for left in ([500, 522, 514, 541, 552], [500, 518, 509, 533, 521, 548, 537]):
        rss = [mib * MiB for mib in [left[0], *left]]
        assert diagnose(runs_of([1.0] * len(rss), rss)) == [], left
    steady = [500 * MiB + i * 3 * MiB for i in range(12)]  # each higher than the one before
    assert diagnose(runs_of([1.0] * 7, steady[:7])) == []  # a warm-up could still level off
    assert kinds(diagnose(runs_of([1.0] * 12, steady))) == ["state_growth"]  # after NATIVE_RUNS


def test_growth_between_a_labels_runs_is_not_that_labels():
    # Run All over two cells: "leaky" keeps 4 MiB a run, "tiny" adds nothing; the RSS left after
    # each tiny run rises as fast, but none of it came in a tiny run
    level, leaky, tiny = 500 * MiB, [], []
    for n in range(1, 13):
        kept = level + 4 * MiB
        leaky.append(make_record(label="leaky", run_number=n, rss_before=level, rss_after=kept))
        level = kept
        tiny.append(make_record(label="tiny", run_number=n, rss_before=level, rss_after=level))
    assert kinds(diagnose(tiny)) == []
    assert kinds(diagnose(leaky)) == ["state_growth"]
    together = diagnose([r for pair in zip(leaky, tiny, strict=True) for r in pair])
    assert [f.runs[-1] for f in together] == ["leaky #12"]
    # the dashboard's line for tiny still shows the rise, without ⚠ and saying where it came
    assert trends_text("tiny", tiny).startswith(
        "tiny: RSS left +4.0 MiB per run over runs 2–12 (grown between its runs: each run itself "
        "+0.0 MiB)"
    )
    assert trends_text("leaky", leaky).startswith("leaky: ⚠ RSS left +4.0 MiB per run")


def test_growth_no_name_or_model_explains_is_told_as_native_with_isolate_as_the_way_out():
    rss = [500 * MiB + i * 3 * MiB for i in range(12)]
    (finding,) = diagnose(runs_of([1.0] * 12, rss))  # no name grew, no stale model alive
    assert "native memory kept by the framework" in finding.message
    assert "--isolate" in finding.advice
    # earlier runs' models piling up (a list keeping each run's): the leak finder's to say
    held = HeldModels(count=2, runs=(3, 4), paths=("models[0]", "models[1]"), weight_bytes=MiB)
    stale = [dataclasses.replace(r, stale_models=held) for r in runs_of([1.0] * 12, rss)]
    finding = next(f for f in diagnose(stale) if f.kind == "state_growth")
    assert "native" not in finding.message and "%nbguard leaks" in finding.advice
    # one model you kept is no more each run: the rise is not its (keras.io's custom
    # train_step in JupyterLab: a kept 408 B model made a one-time step read as a leak of yours)
    kept = HeldModels(count=1, runs=(3,), paths=("kept",), weight_bytes=408)
    stale = [dataclasses.replace(r, stale_models=kept) for r in runs_of([1.0] * 12, rss)]
    finding = next(f for f in diagnose(stale) if f.kind == "state_growth")
    assert "only #3's are alive, not more each run (native memory kept" in finding.message
    assert "--isolate" in finding.advice
    # and the summary's row, under a finding's size, does not say "none of it held by your
    # code" beside it (the callbacks guide in JupyterLab, `kept = model`)
    small = [500 * MiB + i * MiB * 3 // 2 for i in range(12)]
    each = _after_each(
        [dataclasses.replace(r, stale_models=kept) for r in runs_of([1.0] * 12, small)]
    )
    note = each[-1].memory_note
    assert note is not None and "none of it held by your code" not in note, note
    assert (
        "not more each run by your code (no name of yours grew; of earlier runs' models only "
        "#3's, which you keep, is alive)"
    ) in note
    # nor is Out gaining 0.1 MiB (the History each cell ending in fit puts there)
    out = Growth("Out", "dict", 1, MiB // 10)
    grew = [dataclasses.replace(r, growth=(out,)) for r in runs_of([1.0] * 12, rss)]
    (finding,) = diagnose(grew)
    assert "native memory kept by the framework" in finding.message and "Out" not in finding.message
    big = [dataclasses.replace(r, growth=(Growth("preds", "list", 1, 3 * MiB),)) for r in grew]
    assert "`preds` (list) +1 item" in diagnose(big)[0].message


def _with_xla(runs):
    """The runs' fits ran XLA-compiled steps on TensorFlow (``jit_compile=True``)."""
    return [
        dataclasses.replace(r, fits=tuple(dataclasses.replace(f, xla=True) for f in r.fits))
        for r in runs
    ]


def test_native_growth_of_runs_xla_compiled_names_xla_and_jit_compile_as_a_way_out():
    # a Dense(64) MLP fit with jit_compile=True under the magic: +7.5 MiB a run, nothing of the
    # user's growing, and no API of TensorFlow's frees what XLA compiled
    rss = [500 * MiB + i * 7 * MiB for i in range(12)]
    (finding,) = diagnose(_with_xla(runs_of([1.0] * 12, rss)))
    assert "XLA compiled your models' training steps" in finding.message
    assert "native memory kept by the framework" not in finding.message
    assert "--isolate" in finding.advice and "jit_compile=False" in finding.advice
    (plain,) = diagnose(runs_of([1.0] * 12, rss))  # the same rise without XLA: as before
    assert "XLA" not in plain.message + plain.advice
    # under the runs a finding needs, the summary's line says it with the number
    few = _after_each(_with_xla(runs_of([1.0] * 6, [800 * MiB + i * 2 * MiB for i in range(6)])))
    assert few[-1].memory_note.startswith("+2.0 MiB a run left over runs 2–6")
    assert "TensorFlow keeps every program it compiles" in few[-1].memory_note
    assert few[-1].memory_note.endswith("jit_compile=False compiles nothing to keep")


def test_memory_that_warms_up_and_slows_is_no_leak_and_a_steady_rise_still_is():
    # Keras' own GAN and text examples: the framework's memory rose 3-9 MiB a run over the
    # first runs, then well under 1, level by run 13 (bench_examples.py, 24 runs)
    steps = [9, 8, 6, 3, 1, 0.5, 0.5, 0.3, 0.2, 0.2, 0.1]
    rss = [500 * MiB]
    for step in steps:
        rss.append(rss[-1] + int(step * MiB))
    for upto in range(6, len(rss) + 1):  # at no run of the warm-up
        assert kinds(diagnose(runs_of([1.0] * upto, rss[:upto]))) == [], upto
    # the dashboard still draws the rise, and says why it is no finding
    text = trends_text("mlp", runs_of([1.0] * 8, rss[:8]))
    assert "⚠" not in text and "warming up" in text, text
    # the same first runs, then a rise that keeps going at 3 MiB a run: named
    steady = rss[:4] + [rss[3] + i * 3 * MiB for i in range(1, 9)]
    assert kinds(diagnose(runs_of([1.0] * len(steady), steady))) == ["state_growth"]


def test_native_memory_that_grows_in_steps_is_no_leak():
    # Keras' transfer-learning example under the magic, heap in use flat: +25 MiB at run 7, a
    # few tenths of a MiB a run around it (bench_examples.py)
    left = [819.6, 843.3, 848.9, 849.2, 849.6, 850.2, 875.1, 875.5, 875.9, 876.0, 876.3, 876.3]

    def runs_leaving(mibs: list[float]):
        # each run ends 15 MiB above what it leaves (its fit's memory, trimmed before the next)
        after = [int((mib + 15) * MiB) for mib in mibs]
        return runs_of([1.0] * 12, after, rss_before=[int(m * MiB) for m in mibs[:1] + mibs[:-1]])

    runs = runs_leaving(left)
    assert diagnose(runs) == []
    assert "in steps, not every run: #7 +24.9 MiB" in trends_text("mlp", runs)
    # the GAN's, a step at run 9 and ~1 MiB a run: still rising in its later half
    gan = [779.6, 815.0, 816.1, 819.8, 819.7, 821.1, 820.1, 821.4, 833.7, 834.3, 836.5, 837.1]
    assert diagnose(runs_leaving(gan)) == []
    # the same steps on top of a leak of 3 MiB every run: named
    leaking = runs_leaving([mib + 3 * i for i, mib in enumerate(left)])
    assert kinds(diagnose(leaking)) == ["state_growth"]


def test_a_warm_up_then_one_step_is_no_leak_at_any_run():
    # Keras' text example under the magic (heap in use flat): 3-9 MiB a run over the first
    # runs, ~1 after, and a one-time step of TensorFlow's heap at a later run; named
    # state_growth at run 11 ("7.0 MiB a run over #2-#11") when the step fell at run 8 or 9
    for at in range(5, 12):
        steps = [9, 8, 6, 3, 1, 1.2, 0.8, 1, 1.1, 0.9, 1]
        steps[at - 2] += 40
        left = [700.0]
        for step in steps:
            left.append(left[-1] + step)
        for upto in range(6, len(left) + 1):
            after = [int((mib + 15) * MiB) for mib in left[:upto]]
            before = [int(mib * MiB) for mib in left[:1] + left[: upto - 1]]
            runs = runs_of([1.0] * upto, after, rss_before=before)
            assert kinds(diagnose(runs)) == [], (at, upto)
    assert f"in steps, not every run: #{at} +4" in trends_text("mlp", runs)  # the step first
    # a leak of 3 MiB a run after the same warm-up and step: named
    leaking = [mib + 3 * i for i, mib in enumerate(left)]
    after = [int((mib + 15) * MiB) for mib in leaking]
    before = [int(mib * MiB) for mib in leaking[:1] + leaking[:-1]]
    assert kinds(diagnose(runs_of([1.0] * len(left), after, rss_before=before))) == ["state_growth"]


def test_epoch_time_rising_within_a_fit_is_told_apart_from_runs():
    epochs = (0.9, 0.30, 0.36, 0.42, 0.48, 0.54, 0.60)  # the first epoch traces
    record = make_record(fits=(FitRecord(seconds=sum(epochs), epochs=7, epoch_seconds=epochs),))
    assert kinds(diagnose([record])) == ["epoch_slowdown"]


def test_a_rise_of_a_few_milliseconds_within_a_fit_is_no_epoch_slowdown():
    epochs = (0.9, 0.056, 0.058, 0.061, 0.064, 0.067, 0.071)  # 15 ms: a busier machine
    record = make_record(fits=(FitRecord(seconds=sum(epochs), epochs=7, epoch_seconds=epochs),))
    assert kinds(diagnose([record])) == []


def test_the_trend_is_robust_to_one_outlier():
    trend = Trend([1.0, 1.0, 1.0, 5.0, 1.0, 1.0])
    assert trend.slope == 0.0 and not trend.rises()


@pytest.mark.slow
def test_a_clean_label_raises_nothing_and_kept_models_are_named(keras_shell):
    for _ in range(MIN_RUNS + 2):
        assert run(
            keras_shell,
            "%%kerasrun --label clean --quiet\nmodel = make_model()\n"
            "model.fit(x, y, epochs=2, verbose=0)",
        ).success
    times = [round(r.fit_seconds, 3) for r in keras_nbguard.runs("clean")]
    assert keras_nbguard.diagnose("clean") == [], times  # the times, should it ever fail
    assert [r.findings for r in keras_nbguard.runs("clean") if r.findings] == []
    run(keras_shell, "kept = []")
    for _ in range(2):
        assert run(
            keras_shell,
            "%%kerasrun --label kept --quiet\nkept.append(make_model())\n"
            "kept[-1].fit(x, y, epochs=1, verbose=0)",
        ).success
    (finding,) = keras_nbguard.diagnose("kept")
    assert finding.kind == "stale_models" and "kept[0]" in finding.message
    assert finding.message.startswith("1 model from kept #1 still alive after kept #2")
    shown = keras_shell.run_line_magic("nbguard", "diagnose --label kept")
    assert shown == [finding]
    compared = keras_shell.run_line_magic("nbguard", "compare clean#2 kept")
    assert (compared.first.label, compared.first.run_number) == ("clean", 2)
    assert (compared.second.label, compared.second.run_number) == ("kept", 2)
    rows = {name: (a, b, change) for name, a, b, change in compared.rows()}
    first, second = compared.first, compared.second
    # (of other epochs: said beside it, test_compare_says_the_epochs_beside_the_fit_time)
    assert rows["fit"][2].startswith(
        fmt_seconds(second.fit_seconds - first.fit_seconds, signed=True)
    )
    assert "clean #2" in compared.text() and "change" in compared.text()


def test_compare_says_no_memory_change_between_an_isolated_run_and_one_here():
    """The dashboard's compare picker, reuse #4 (isolated) with reuse #5 (here): `rss before
    714.2 MiB → 755.7 MiB, +41.5 MiB`, the child's RSS against the kernel's."""
    here = make_record(run_number=5, rss_before=755 * MiB, rss_after=760 * MiB)
    isolated = make_record(
        run_number=4, rss_before=714 * MiB, rss_after=742 * MiB, isolated="fresh process"
    )
    rows = {name: rest for name, *rest in Comparison(isolated, here).rows()}
    assert rows["rss before"] == [
        "714.0 MiB",
        "755.0 MiB",
        "n/a (#4 ran isolated: another process's)",
    ]
    assert rows["fit"][2] == "+0 ms"  # the fit is the fit, wherever it ran
    both_here = {
        n: rest
        for n, *rest in Comparison(dataclasses.replace(isolated, isolated=None), here).rows()
    }
    assert both_here["rss before"][2] == "+41.0 MiB"


def test_compare_says_the_epochs_beside_the_fit_time():
    """A walkthrough's `compare 2 5` read `fit 611 ms → 476 ms, -135 ms` of runs of 3 and 4
    epochs (EarlyStopping), with nothing saying the work differed."""
    three, four = make_record(run_number=2), make_record(run_number=5)
    fit = three.fits[0]
    three = dataclasses.replace(three, fits=(dataclasses.replace(fit, epoch_seconds=(0.2,) * 3),))
    four = dataclasses.replace(four, fits=(dataclasses.replace(fit, epoch_seconds=(0.2,) * 4),))
    rows = {name: rest for name, *rest in Comparison(three, four).rows()}
    assert rows["epochs"] == ["3", "4", "+1"]
    assert rows["fit"][2].endswith(" (#2 ran 3 epochs, #5 4)"), rows["fit"]
    same = {name: rest for name, *rest in Comparison(three, three).rows()}
    assert "(" not in same["fit"][2]
    # a figure stays on one line in the table ("+4.2 / MiB" wrapped at 1200 px)
    assert '; white-space: nowrap">+1</td>' in Comparison(three, four)._repr_html_()


def test_compare_names_runs_in_the_users_terms():
    records = [
        make_record(label="my mlp", run_number=n, fit_seconds=1.0 + n / 10, traces=None)
        for n in (1, 2, 3)
    ]
    first, second = find_run(records, "my mlp#1"), find_run(records, "my mlp")
    assert (first.run_number, second.run_number) == (1, 3)  # a label alone: its last run
    rows = {name: rest for name, *rest in Comparison(first, second).rows()}
    assert rows["fit"] == ["1.10 s", "1.30 s", "+200 ms"]
    assert rows["tf.function traces"] == ["n/a (not counted)"] * 2 + ["n/a"]  # never 0
    assert rows["gpu peak"][:2] == ["n/a (no GPU: TensorFlow sees none)"] * 2
    # our own time as the summary's `ours` row sums it (its parts before and after the cell),
    # not a `prepare` figure the summary never shows
    ours = Comparison(
        dataclasses.replace(first, own_time=(("gc", 0.145), ("leak check", 0.083))),
        dataclasses.replace(second, own_time=(("gc", 0.05),)),
    ).rows()
    assert {name: rest for name, *rest in ours}["ours"] == ["228 ms", "50 ms", "-178 ms"]
    assert "prepare" not in rows
    assert rows["ours"][0] == "n/a (every part under 0.5 ms, or not recorded)"
    one_epoch = dataclasses.replace(
        first.fits[0], epochs=1, epoch_seconds=(0.7,), callback_seconds=None
    )
    plain = dataclasses.replace(second, fits=(), fit_seconds=None, trace_reason="no tf.function")
    rows = {
        name: rest
        for name, *rest in Comparison(dataclasses.replace(first, fits=(one_epoch,)), plain).rows()
    }  # every n/a says why: the first epoch traces, the other run fit nothing
    assert rows["epoch (mean, after the first)"] == ["n/a (one epoch)", "n/a (no fit)", "n/a"]
    # keras.io's transfer learning: two fits of an epoch each, not "one epoch"
    twice = dataclasses.replace(first, fits=(one_epoch, one_epoch))
    rows = {name: rest for name, *rest in Comparison(twice, plain).rows()}
    assert rows["epoch (mean, after the first)"][0] == "n/a (each of its 2 fits one epoch)"
    assert rows["your callbacks"][:2] == ["n/a (not timed)", "n/a (no fit)"]
    assert rows["fit"] == ["1.10 s", "n/a (no fit)", "n/a"]
    assert rows["tf.function traces"][1] == "n/a (no tf.function)"
    same = "retracing: 12 tf.function traces in my mlp #{} (12 per fit) — %nbguard diagnose"
    kept = Comparison(
        dataclasses.replace(first, findings=(same.format(1),)),
        dataclasses.replace(second, findings=(same.format(3), "callbacks: x")),
    )
    assert kept.findings() == ((), ("callbacks: x",))  # the same cause in both is no difference
    with pytest.raises(ValueError, match=r"'my mlp' has no run #9 \(it has #1, #2, #3\)"):
        find_run(records, "my mlp #9")
    with pytest.raises(ValueError, match="no run labelled 'cnn'"):
        find_run(records, "cnn")


def test_a_gpu_held_whole_with_little_used_is_gpu_growth_not_set():
    # the figures NVML and tf.config would read on a GPU box (none here): 76 of 80 GiB held
    held = GpuReading(
        tf_current=300 * MiB,
        tf_peak=1200 * MiB,
        nvml_used=77 * 1024 * MiB,
        nvml_total=80 * 1024 * MiB,
        nvml_process_used=76 * 1024 * MiB,
    )
    (finding,) = diagnose([make_record(gpu=held)])
    assert finding.kind == "gpu_growth_not_set"
    assert "holds 77,824.0 MiB of the GPU's 81,920.0 MiB (95%)" in finding.message
    assert "peak use in mlp #1 was 1,200.0 MiB" in finding.message
    grown = dataclasses.replace(held, nvml_process_used=1400 * MiB)  # growth on: no finding
    assert diagnose([make_record(gpu=grown)]) == []


def test_out_of_memory_names_the_batch_the_memory_and_a_smaller_batch():
    record = make_record(
        status="oom",
        rss_peak=3 * 1024 * MiB,
        error="ResourceExhaustedError: OOM",
        fits=(FitRecord(seconds=0.2, epochs=0, batch_size=16384),),
        advice=("try batch_size=8192", "mixed precision"),
    )
    (finding,) = diagnose([record])
    assert finding.kind == "oom_batch"
    assert finding.message == (
        "mlp #1 ran out of host memory at batch_size=16384, with "
        "3,072.0 MiB in use: ResourceExhaustedError: OOM"
    )
    assert ("try", "batch_size=8192") in finding.evidence


def test_an_out_of_memory_error_naming_the_gpu_is_the_gpu_s_even_unread():
    """torch's CUDA error where no GPU reading was made: the GPU's memory ran out, and the
    host's RSS is not passed off as what was in use there."""
    record = make_record(
        status="oom",
        rss_peak=874 * MiB,
        error="OutOfMemoryError: CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0 has",
        fits=(FitRecord(seconds=0.2, epochs=0, batch_size=256),),
        advice=("fit ran out of GPU memory at batch_size=256: try batch_size=128",),
    )
    (finding,) = diagnose([record])
    assert finding.message.startswith("mlp #1 ran out of GPU memory at batch_size=256: ")
    assert "874" not in finding.message
    (where,) = [value for name, value in finding.evidence if "at the failure" in name]
    assert where.startswith("n/a (no GPU reading")


def _after_each(runs):
    """Each run as the magic records it: diagnosed after it, on the runs before it."""
    from keras_nbguard.diagnosis.diagnose import with_findings

    done = []
    for record in runs:
        done.append(with_findings(record, done, warn=lambda message: None))
    return done


def _text_example_steps():
    """Keras' text example under the magic, some runs: +1.1 to +2.7 MiB a run, heap in use flat,
    by steps of TensorFlow's pool: below what a finding needs, above what the magic promises."""
    steps = [0.2, 9.0, 0.3, 0.1, 6.0, 0.2, 0.1, 0.3, 0.2, 0.1, 0.2]
    left = [800.0]
    for step in steps:
        left.append(left[-1] + step)
    after = [int((mib + 15) * MiB) for mib in left]
    before = [int(mib * MiB) for mib in left[:1] + left[:-1]]
    return runs_of([1.0] * len(left), after, rss_before=before)


def test_a_summary_says_whose_the_memory_is_when_runs_leave_over_a_mib_with_no_finding():
    runs = _after_each(_text_example_steps())
    last = runs[-1]
    assert last.findings == ()
    assert last.memory_note.startswith("+1.")
    assert "a run left over runs 2–12, none of it held by your code (no name or model of yours" in (
        last.memory_note
    )
    # whose it is, why, the way out: a sentence each, not brackets in brackets
    assert "grew). In steps, not every run: " in last.memory_note
    assert "--isolate" in last.memory_note
    assert ("rss trend", last.memory_note) in last.summary_rows()
    assert runs[3].memory_note is None  # too few runs to say
    # a flat label, or a rise a finding names: no such line
    flat = _after_each(runs_of([1.0] * 12, [800 * MiB + i * MiB // 4 for i in range(12)]))
    assert flat[-1].memory_note is None
    leaking = _after_each(runs_of([1.0] * 12, [800 * MiB + i * 4 * MiB for i in range(12)]))
    assert leaking[-1].findings and leaking[-1].memory_note is None
    # isolated runs: their RSS is a child's, gone with it
    isolated = [dataclasses.replace(r, isolated="fresh process (pid 1)") for r in runs]
    assert _after_each(isolated)[-1].memory_note is None
    # something of yours grew: the leak finder's to say, not "the framework's"
    held = HeldModels(count=2, runs=(3, 4), paths=("models[0]", "models[1]"), weight_bytes=MiB)
    yours = [dataclasses.replace(r, stale_models=held) for r in runs]
    assert _after_each(yours)[-1].memory_note is None


def test_diagnose_says_what_the_summarys_rss_trend_row_says():
    """Asking why after a summary showed `rss trend +1.x MiB a run left …` must not answer
    "nothing stands out" alone: the note comes with it, in the notebook's text and HTML, and the
    line above it says no finding *in your code* (not "nothing stands out", which the note
    contradicts)."""
    from keras_nbguard.board.findings_view import findings_html, findings_text

    runs = _after_each(_text_example_steps())
    found = diagnose(runs)
    assert list(found) == [] and found.notes == (f"mlp #12: RSS {runs[-1].memory_note}",)
    text = _pretty(found)
    assert text.startswith("no finding in your code\nnote: mlp #12: RSS +1.")
    assert "none of it held by your code" in found._repr_html_()
    assert "no finding in your code." in found._repr_html_()
    board = findings_html(found, len(runs))
    assert "%%kerasrun --isolate keeps the kernel flat" in board
    assert "<b>Findings</b>: none in your code<div>" in board
    assert findings_text(found) == [f"note: {found.notes[0]}"]
    flat = _after_each(runs_of([1.0] * 12, [800 * MiB + i * MiB // 4 for i in range(12)]))
    assert diagnose(flat).notes == () and _pretty(diagnose(flat)) == (
        "no finding: nothing stands out"
    )


def _pretty(value) -> str:
    from IPython.lib.pretty import pretty

    return pretty(value)


def _with_pool(runs, in_use, peak):
    return [
        dataclasses.replace(r, host_pool_in_use=u, host_pool_peak=p)
        for r, u, p in zip(runs, in_use, peak, strict=True)
    ]


def test_the_latest_runs_unsettled_rss_is_not_read_as_growth():
    # FeatureSpace's example in JupyterLab, 6 runs (its figures): each run ends ~10 MiB above
    # what the next run starts from once it has collected and trimmed; the latest run's RSS
    # after, beside the settled values of the runs before it, read as over 1 MiB a run left
    # (the summary said +2.3)
    after = [765.0, 779.0, 780.5, 780.8, 782.1, 782.6]
    before = [728.0, 761.0, 769.0, 770.0, 772.0, 772.1]
    runs = runs_of(
        [1.5] * 6, [int(a * MiB) for a in after], "features", [int(b * MiB) for b in before]
    )
    assert _after_each(runs)[-1].memory_note is None  # under 1 MiB a run: nothing to explain
    # memory really kept, 3 MiB a run, is in what the next run starts from and in the latest
    # run's after alike, and still shows at its size
    after = [a + 3 * i for i, a in enumerate(after)]
    before = [b + 3 * (i - 1) if i else b for i, b in enumerate(before)]
    runs = runs_of(
        [1.5] * 6, [int(a * MiB) for a in after], "features", [int(b * MiB) for b in before]
    )
    note = _after_each(runs)[-1].memory_note
    assert note is not None and note.startswith("+3."), note


def test_the_summary_names_tensorflows_pool_when_its_peak_rose_with_the_runs():
    # The text example under the magic (oneDNN on): RSS steps where TensorFlow's CPU pool
    # reaches a higher peak (114 -> 134 MiB over runs 2-12 in one run of the harness)
    runs = _text_example_steps()
    n = len(runs)
    in_use = [int((32 + 9 * (i % 2)) * MiB) for i in range(n)]  # 32-41 MiB, no rise
    peak = [int((100 + min(i, 8) * 2) * MiB) for i in range(n)]  # +2 a run to run 9
    note = _after_each(_with_pool(runs, in_use, peak))[-1].memory_note
    # runs 2-12: the pool's peak after run 2 (102) to after run 12 (116)
    assert "TensorFlow's CPU pool reached a higher peak, +14.0 MiB, while what it had in use" in (
        note
    )
    assert "in use between runs stayed" in note
    assert "stayed 32.0 MiB–41.0 MiB" in note and note.endswith("MiB a run on Keras' own examples)")
    # a pool that stayed where it was, or was not read (oneDNN off): not named
    for flat in (int(130 * MiB), None):
        note = _after_each(_with_pool(runs, in_use, [flat] * n))[-1].memory_note
        assert note.startswith("+1.") and "pool" not in note


def test_a_steady_native_rise_with_the_pools_peak_is_no_leak_but_tensors_kept_are():
    # 3 MiB a run, run after run, nothing of yours grew: named state_growth...
    n = 13
    after = [800 * MiB + i * 3 * MiB for i in range(n)]
    runs = runs_of([1.0] * n, after)
    assert _after_each(runs)[-1].findings[0].startswith("state_growth")
    # ...unless TensorFlow's CPU pool reached a higher peak with it, its use after runs flat
    peak = [int((100 + 1.5 * i) * MiB) for i in range(n)]  # +16.5 MiB of the RSS's +33
    flat_use = [int(40 * MiB)] * n
    last = _after_each(_with_pool(runs, flat_use, peak))[-1]
    assert last.findings == ()
    assert "TensorFlow's CPU pool reached a higher peak, +16.5 MiB" in last.memory_note
    assert "between runs stayed 40.0 MiB: it keeps" in last.memory_note  # one value, not 40–40
    # a pool that held nothing between runs (the timeseries transformer: only its activations
    # are large enough for it) says so, not "0.0 MiB–0.0 MiB"
    empty = _after_each(_with_pool(runs, [0] * n, peak))[-1]
    assert empty.findings == () and "between runs stayed at nothing: it keeps" in empty.memory_note
    # tensors kept run after run raise what the pool has in use too: still a leak
    kept = [int((40 + 2 * i) * MiB) for i in range(n)]
    assert _after_each(_with_pool(runs, kept, peak))[-1].findings[0].startswith("state_growth")
    # a peak that rose by far less than the RSS: the rest is not the pool's
    small = [int((100 + 0.3 * i) * MiB) for i in range(n)]
    assert _after_each(_with_pool(runs, flat_use, small))[-1].findings[0].startswith("state_growth")


def test_a_pool_that_explains_part_of_a_rise_leaves_the_rest_said_too():
    # Keras 2's functional API guide under the magic: TensorFlow's pool's peak +4.1 MiB of an RSS
    # rise of ~11, +6.8 of it in the threads' arenas, what every allocator had in use flat; the
    # row named the pool alone, as if the whole rise were its pages
    runs, heap, blocks = _steady_rise_allocators_flat()
    n = len(runs)
    flat = _with_allocators(runs, heap, blocks)
    part = [int((100 + 1.5 * i) * MiB) for i in range(n)]  # half the rise
    last = _after_each(_with_pool(flat, [int(40 * MiB)] * n, part))[-1]
    assert last.findings == ()
    note = last.memory_note
    assert "TensorFlow's CPU pool reached a higher peak, +16.5 MiB" in note
    assert "; what the allocators had in use between runs stayed flat (glibc's heap +20.5 KiB" in (
        note
    )
    assert note.count("40.0 MiB") == 1  # the pool's use said once
    # a peak that rose by the whole rise accounts for it: the pool alone
    whole = [int((100 + 3.5 * i) * MiB) for i in range(n)]
    note = _after_each(_with_pool(flat, [int(40 * MiB)] * n, whole))[-1].memory_note
    assert "reached a higher peak, +38.5 MiB" in note and "stayed flat" not in note


def _steady_rise_allocators_flat(n=13):
    """RSS +3 MiB a run, run after run, while glibc's heap in use rises 0.02 MiB a run and
    Python's blocks ~300 (Keras' GAN under the magic, bench_examples.py): runs, heap, blocks."""
    runs = runs_of([1.0] * n, [800 * MiB + i * 3 * MiB for i in range(n)])
    heap = [int(273 * MiB + i * 0.02 * MiB) for i in range(n)]
    blocks = [1_700_000 + 300 * i for i in range(n)]
    return runs, heap, blocks


def _with_allocators(runs, heap, blocks):
    return [
        dataclasses.replace(r, heap_in_use=h, python_blocks=b)
        for r, h, b in zip(runs, heap, blocks, strict=True)
    ]


def test_a_native_rise_with_the_allocators_use_flat_is_their_slack_not_a_leak():
    # Keras' GAN under the magic: RSS +3 MiB a run, run after run, nothing of yours grew, while
    # glibc's heap in use rose 0.02 MiB a run and Python's blocks ~300 (bench_examples.py)
    runs, heap, blocks = _steady_rise_allocators_flat()
    last = _after_each(_with_allocators(runs, heap, blocks))[-1]
    assert last.findings == ()
    assert ". What the allocators had in use between runs stayed flat (glibc's heap +20.5 KiB" in (
        last.memory_note
    )
    assert "Python's objects +300 blocks a run" in last.memory_note
    # with TensorFlow's pool read too, its use is part of it
    pooled = [dataclasses.replace(r, host_pool_in_use=int(40 * MiB)) for r in runs]
    note = _after_each(_with_allocators(pooled, heap, blocks))[-1].memory_note
    assert "TensorFlow's CPU pool 40.0 MiB)" in note  # the same between every run
    empty = [dataclasses.replace(r, host_pool_in_use=0) for r in runs]
    note = _after_each(_with_allocators(empty, heap, blocks))[-1].memory_note
    assert "TensorFlow's CPU pool held nothing)" in note  # not "0.0 KiB"
    # keras.io's fine-tuning cell: the heap flat but for one allocation kept from one run on
    # (+33 MiB, three benches); "stayed flat" alone hid it
    stepped = [h + (33 * MiB if i >= 7 else 0) for i, h in enumerate(heap)]
    last = _after_each(_with_allocators(runs, stepped, blocks))[-1]
    assert last.findings == ()
    assert "(glibc's heap +20.5 KiB a run but for +33.0 MiB kept since #7, Python's" in (
        last.memory_note
    )
    # the step is memory kept: "not memory kept" speaks of the rest (keras.io's text example
    # in JupyterLab read "… but for +132.1 MiB kept by #5 …): the rise is … not memory kept")
    assert "): besides that step, the rise is freed memory they keep" in (last.memory_note)
    # held one run and given back (a stopped fit's buffers, seen in JupyterLab): not "kept"
    held = [h + (33 * MiB if i == 7 else 0) for i, h in enumerate(heap)]
    assert "kept by" not in _after_each(_with_allocators(runs, held, blocks))[-1].memory_note
    # the step taken across a run the series leaves out (#8 stopped): either may have kept it
    stopped = [
        dataclasses.replace(r, status="interrupted") if i == 7 else r for i, r in enumerate(runs)
    ]
    note = _after_each(_with_allocators(stopped, stepped, blocks))[-1].memory_note
    assert "but for +33.0 MiB kept since #7–#8, Python's" in note
    assert "left over runs 2–13 except #8," in note
    # memory kept through any of them raises its use: a leak, named
    for leak in (
        _with_allocators(runs, [h + i * MiB for i, h in enumerate(heap)], blocks),  # C's
        _with_allocators(runs, heap, [b + 5000 * i for i, b in enumerate(blocks)]),  # Python's
        _with_allocators(
            [
                dataclasses.replace(r, host_pool_in_use=int((40 + 2 * i) * MiB))
                for i, r in enumerate(runs)
            ],
            heap,
            blocks,
        ),  # tensors kept
        runs,  # not read (an older record, not glibc): judged on RSS as before
    ):
        assert _after_each(leak)[-1].findings[0].startswith("state_growth")


def _loader_finds(monkeypatch, folder, sonames: tuple[str, ...]) -> None:
    """The loader's cache gives ``sonames`` (each a library of this Python's kind) and nothing
    else finds a library (the OS's boundary: ``/etc/ld.so.cache``, as ``ldconfig`` writes it)."""
    from helpers import fake_library, loader_cache

    from keras_nbguard.collectors import allocated

    for soname in sonames:
        fake_library(folder / soname)
    cache = folder / f"ld.so.cache.{'.'.join(sonames)}"
    loader_cache(cache, {soname: str(folder / soname) for soname in sonames})
    monkeypatch.setattr(allocated, "LOADER_CACHE", str(cache))
    monkeypatch.setattr(allocated, "LOADER_DIRS", ())
    monkeypatch.setattr(sys, "base_prefix", str(folder / "no-python"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)


def test_glibcs_slack_points_to_the_jemalloc_kernel_and_a_jemalloc_kernels_heap_is_named(
    monkeypatch, tmp_path
):
    # The GAN's row under the magic (bench_examples.py): +3 MiB a run in glibc's arenas, its
    # heap in use flat; on jemalloc the same runs stay flat, so the note says where to go
    from keras_nbguard.diagnosis.causes_across import ISOLATED_FIGURE, JEMALLOC_KERNEL, ON_JEMALLOC

    runs, heap, blocks = _steady_rise_allocators_flat()
    n = len(runs)
    on_glibc = _with_allocators(runs, heap, blocks)
    _loader_finds(monkeypatch, tmp_path, ("libjemalloc.so.2",))
    for malloc in (None, "glibc"):  # None: a record kept before `malloc` was
        note = _after_each([dataclasses.replace(r, malloc=malloc) for r in on_glibc])[-1]
        assert note.memory_note.endswith(f"{ISOLATED_FIGURE}); {ON_JEMALLOC})")
        assert f'(the kernel "{JEMALLOC_KERNEL}")' in note.memory_note
    # where the loader would not find jemalloc, the kernel would run on glibc: say so first
    _loader_finds(monkeypatch, tmp_path, ("libtcmalloc_minimal.so.4",))
    note = _after_each(on_glibc)[-1].memory_note
    assert note.endswith(
        f'(the kernel "{JEMALLOC_KERNEL}", once jemalloc is installed: '
        "`apt-get install libjemalloc2`)"
    )
    # a kernel on jemalloc already: its own heap is named, and no kernel is offered
    on_jemalloc = [dataclasses.replace(r, malloc="jemalloc") for r in on_glibc]
    note = _after_each(on_jemalloc)[-1].memory_note
    assert "stayed flat (jemalloc's heap +20.5 KiB a run" in note and "glibc" not in note
    assert note.endswith(f"--isolate keeps the kernel flat ({ISOLATED_FIGURE})")
    # the C heap not read (--no-clear): nothing says it was glibc's slack
    assert ON_JEMALLOC not in (_after_each(runs)[-1].memory_note or "")
    # TensorFlow's pool's peak rose by the whole rise: its pages, not glibc's
    whole = [int((100 + 3.5 * i) * MiB) for i in range(n)]
    note = _after_each(_with_pool(on_glibc, [int(40 * MiB)] * n, whole))[-1].memory_note
    assert "reached a higher peak" in note and ON_JEMALLOC not in note
    # the pool read at all (oneDNN on), its peak flat: there jemalloc keeps the pool's regions
    # that glibc unmaps (the text example +1.2 -> +3.1 MiB a run side by side): no pointer
    flat = [int(100 * MiB)] * n
    note = _after_each(_with_pool(on_glibc, [int(40 * MiB)] * n, flat))[-1].memory_note
    assert "none of it held by your code" in note and ON_JEMALLOC not in note


def test_the_jemalloc_kernelspec_is_the_one_the_note_names():
    import json
    from pathlib import Path

    from keras_nbguard.diagnosis.causes_across import JEMALLOC_KERNEL

    spec = Path(__file__).parents[1] / "jupyter-config/kernels/python3-keras-nbguard-jemalloc"
    kernel = json.loads((spec / "kernel.json").read_text())
    assert kernel["display_name"] == JEMALLOC_KERNEL
    assert kernel["env"] == {"LD_PRELOAD": "libjemalloc.so.2"}
    assert "--ext=keras_nbguard" in kernel["argv"]


def test_a_pool_whose_use_swings_between_runs_keeps_nothing():
    # Keras' text example under the magic, 30 runs in the bench: a false state_growth at run 12.
    # What TensorFlow's pool had in use as each run began swung by 20 MiB (runs 2-12 of one
    # such run, MiB), up as often as down: the median of its steps (+1.6 MiB) read as tensors
    # kept, where its line fell
    swings = [40.0, 33.3, 47.7, 37.0, 49.3, 34.7, 51.9, 34.1, 37.4, 32.3, 32.3, 35.4]
    n = len(swings)
    runs = runs_of([1.0] * n, [800 * MiB + i * 3 * MiB for i in range(n)])
    heap = [int(293 * MiB + i * 0.04 * MiB) for i in range(n)]
    blocks = [2_030_000 + 400 * i for i in range(n)]
    swung = _with_pool(runs, [int(s * MiB) for s in swings], [int(136 * MiB)] * n)
    last = _after_each(_with_allocators(swung, heap, blocks))[-1]
    assert last.findings == ()
    assert "TensorFlow's CPU pool 32.3 MiB–51.9 MiB)" in last.memory_note
    # the same swings on a pool that keeps 2 MiB more every run: kept, named
    kept = [int((s + 2 * i) * MiB) for i, s in enumerate(swings)]
    leak = _with_allocators(_with_pool(runs, kept, [int(136 * MiB)] * n), heap, blocks)
    assert _after_each(leak)[-1].findings[0].startswith("state_growth")


def test_a_native_rise_whose_runs_peaks_stay_level_is_no_leak():
    # Keras' timeseries transformer under the magic, 12 runs (MiB): each run starts higher (what
    # the last one left, once our collection ran) while how high each went stays level; the
    # allocators handed less back, nothing was kept. Named state_growth at run 11 or 12 before.
    before = [652.1, 2074.8, 2178.0, 2187.8, 2190.1, 2194.8, 2195.4, 2198.6, 2200.7, 2202.4]
    before += [2203.8, 2206.2]
    after = [2085.1, 2241.1, 2244.9, 2269.5, 2245.3, 2246.3, 2270.1, 2248.6, 2249.3, 2272.0]
    after += [2251.1, 2273.7]
    peak = [2115.3, 2241.2, 2269.4, 2269.6, 2269.4, 2269.7, 2270.2, 2271.1, 2271.3, 2272.1]
    peak += [2271.9, 2273.8]

    def runs_with(shift: float):  # shift: MiB every figure of a run gains a run (a leak)
        return [
            dataclasses.replace(
                r, rss_peak=int((p + shift * i) * MiB), rss_before=int((b + shift * i) * MiB)
            )
            for i, (r, p, b) in enumerate(
                zip(
                    runs_of([1.0] * 12, [int((a + shift * i) * MiB) for i, a in enumerate(after)]),
                    peak,
                    before,
                    strict=True,
                )
            )
        ]

    each = _after_each(runs_with(0.0))
    assert all(r.findings == () for r in each), [r.findings for r in each]
    note = each[-1].memory_note
    assert note is not None and ". Each run's peak rose only +0.5 MiB a run" in note, note
    # memory kept raises the floor and the peak alike: the same runs with 3 MiB kept a run
    leaking = _after_each(runs_with(3.0))[-1]
    assert leaking.findings and leaking.findings[0].startswith("state_growth"), leaking.findings
    # glibc's heap in use rising all the same (keras.io's fine-tuning cell, re-run: +0.75 MiB a
    # run) is memory kept natively, not "nothing was kept"
    heap = [
        dataclasses.replace(r, heap_in_use=int((300 + 0.75 * i) * MiB), python_blocks=400_000)
        for i, r in enumerate(runs_with(0.0))
    ]
    note = _after_each(heap)[-1].memory_note
    assert note is not None and "nothing was kept" not in note, note
    assert "glibc's heap in use rose +0.8 MiB a run: memory the framework keeps" in note, note


NATIVE_LEAK_CELL = """%%kerasrun --label seed --quiet --no-deep-clean
model = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(1)]
)
model.compile("adam", "mse")
model.fit(seed_x, seed_y, epochs=1, batch_size=32, verbose=0)
del model
"""


@pytest.mark.slow
def test_tensorflows_own_leak_is_still_named_where_the_allocators_use_grows(keras_shell):
    # Without the deep clean, TensorFlow keeps every run's gradient-registry entries: a leak of
    # the framework's, +3.8 MiB a run here, raising glibc's heap in use (+2.8 MiB) and Python's
    # blocks (~14k) a run along; the allocators' slack must not hide it
    from keras_nbguard.diagnosis.findings import BLOCKS_KEPT, HEAP_KEPT, median_increase

    run(
        keras_shell,
        "import numpy as np\nseed_x = np.random.default_rng(0).random((1024, 32), dtype='float32')"
        "\nseed_y = np.random.default_rng(1).random((1024, 1), dtype='float32')",
    )
    for _ in range(13):
        run(keras_shell, NATIVE_LEAK_CELL)
    runs = keras_nbguard.runs("seed")
    heap = [float(r.heap_in_use) for r in runs[1:]]
    blocks = [float(r.python_blocks) for r in runs[1:]]
    assert median_increase(heap) >= HEAP_KEPT or median_increase(blocks) >= BLOCKS_KEPT
    # named, whatever else the run shows first (its fits slowing as the registry grows, say)
    assert any(f.startswith("state_growth") for f in runs[-1].findings), (
        runs[-1].findings,
        runs[-1].memory_note,
    )


def test_a_rise_in_one_step_is_said_as_a_step_not_as_a_rate():
    """Keras' convnet on JAX under the magic, 8 runs (RSS left 464, 470, 490, 491, 493, 492, 493
    MiB over runs 2-8): +2.8 MiB "a run" is the line's slope, but the runs after #4 add nothing;
    the summary must say where the rise sat, not leave a rate that suggests a leak."""
    left = [448.0, 464.0, 470.0, 490.0, 491.0, 493.0, 492.0, 493.0]
    after = [int((mib + 12) * MiB) for mib in left]
    before = [int(mib * MiB) for mib in left[:1] + left[:-1]]
    runs = [
        dataclasses.replace(r, heap_in_use=90 * MiB, python_blocks=400_000)
        for r in runs_of([1.0] * len(left), after, rss_before=before)
    ]
    note = _after_each(runs)[-1].memory_note
    assert note is not None
    assert ". What the allocators had in use between runs stayed flat" in note
    assert "#2 +16" not in note  # run 2 follows the warm-up (run 1), not in the line
    assert ". In steps, not every run: #4 +20.0 MiB, #3 +6.0 MiB" in note
    # which figure those steps are of: not the table's "Δ RSS after" (a walkthrough looked there)
    assert "(what each run left: its RSS after, or the next run's start where lower)" in note


def test_a_step_that_is_most_of_the_rise_is_said_as_a_step_whatever_the_median_run():
    """JupyterLab, keras.io's collaborative filtering, #4 stopped: what the runs left, 799.6,
    796.6, 818.3, 823.3, 821.4, 824.0 MiB over runs 2-3 and 5-8; the row read "+4.4 MiB a run
    left over runs 2–8 except #4" and no step (the median run +2.6, over half the slope), where
    #7's row had said it: "In steps, not every run: #4–#5 +21.7 MiB"."""
    left = [800.0, 799.6, 796.6, 818.3, 823.3, 821.4, 824.0]
    numbers = [1, 2, 3, 5, 6, 7, 8]
    runs = [
        dataclasses.replace(r, run_number=n, heap_in_use=90 * MiB, python_blocks=400_000)
        for r, n in zip(
            runs_of(
                [1.0] * len(left),
                [int((m + 12) * MiB) for m in left],
                rss_before=[int(m * MiB) for m in left[:1] + left[:-1]],
            ),
            numbers,
            strict=True,
        )
    ]
    note = _after_each(runs)[-1].memory_note
    assert note is not None and "In steps, not every run: #4–#5 +21.7 MiB" in note, note


def test_a_steep_line_no_steadier_than_its_runs_swing_says_so():
    """JupyterLab, keras.io's text example re-run 11 times, #9 stopped: the runs after it sat
    50-80 MiB higher for a while, and the dashboard read "RSS left +5.6 MiB per run over runs
    2–11", no ⚠, "Findings: none": a steep rise to the eye, said as nothing."""
    left = [870.4, 845.4, 864.6, 867.8, 856.8, 870.7, 851.3, 906.8, 918.2]
    runs = runs_of([1.0] * 10, [int(m * MiB) for m in [850.0, *left]])
    trend = rss_trend(runs)
    assert trend.slope is not None and trend.slope > 2 * MiB and not trend.flagged
    assert trend.text().endswith("(the runs swing by 24.6 MiB around the line: not a steady rise)")
    steady = runs_of([1.0] * 10, [int((850 + 3 * i) * MiB) for i in range(10)])
    assert "swing" not in (rss_trend(steady).unflagged_because() or "")


def test_a_fit_time_no_steadier_than_its_runs_swing_says_so():
    """JupyterLab, keras.io's transfer learning re-run 5 times: fits 3.67, 3.04, 2.17, 3.16,
    3.64 s, a V; the dashboard's line read "fit time +341 ms per run over runs 2–5" as a rise,
    where the RSS part of the same line said its swing."""
    runs = runs_of([3.67, 3.04, 2.17, 3.16, 3.64])
    text = trends_text("transfer", runs)
    assert "fit time +340 ms per run over runs 2–5 (the runs swing by 415 ms around the line: " in (
        text
    )
    falling = trends_text("transfer", runs_of([3.67, 3.64, 3.16, 2.17, 3.04]))  # the V turned
    assert "(the runs swing by 415 ms around the line: not a steady fall)" in falling
    steady = runs_of([1.0, 1.1, 1.2, 1.3, 1.4])  # a rise every run: said as a rate alone
    assert trends_text("steady", steady).endswith("fit time +100 ms per run over runs 2–5")


def test_a_trend_over_a_run_it_leaves_out_is_per_run_by_the_runs_numbers():
    """JupyterLab, keras.io's text example, #3 stopped mid-fit: the dashboard read "fit time
    -683 ms per run over runs 2–4 except #3", the whole change from #2 to #4 called one run's.
    What #3 left in memory is in #4's figure too: two runs went by."""
    runs = runs_of([2.8, 2.31, 0.9, 1.63], [int(m * MiB) for m in (900, 956, 945, 1093.7)])
    runs[2] = dataclasses.replace(runs[2], status="interrupted")
    text = trends_text("tc", runs)
    assert "fit time -340 ms per run over runs 2–4 except #3" in text
    assert "RSS left +68.9 MiB per run over runs 2–4 except #3" in text


def test_a_summary_says_a_swing_as_a_swing_not_as_memory_left_a_run():
    """The same runs' summary row: "+5.6 MiB a run left", then "not a steady rise" in its
    reasons, read as a leak rate it itself took back."""
    left = [870.4, 845.4, 864.6, 867.8, 856.8, 870.7, 851.3, 906.8, 918.2]
    runs = [
        dataclasses.replace(r, heap_in_use=90 * MiB, python_blocks=400_000, malloc="glibc")
        for r in runs_of([1.0] * 10, [int(m * MiB) for m in [850.0, *left]])
    ]
    note = _after_each(runs)[-1].memory_note
    assert note is not None
    assert note.startswith(
        "what runs leave swings by 24.6 MiB around +5.6 MiB a run over runs 2–10: "
        "not a steady rise, none of it held by your code ("
    )
    assert "a run left" not in note and note.count("not a steady rise") == 1


def test_a_step_is_named_only_where_it_is_one():
    """JupyterLab, keras.io's denoising autoencoder: `in steps, not every run: #4 +6.5 MiB, #6
    +0.1 MiB` named a flat run as the second step."""
    from keras_nbguard.diagnosis.findings import _in_steps

    runs = [make_record(run_number=n) for n in range(1, 8)]
    left = [v * MiB for v in (900, 900.2, 900.3, 906.8, 906.9, 907.0, 907.0)]
    assert _in_steps(runs, left).startswith("in steps, not every run: #4 +6.5 MiB; the median")
    left[5] = 909.0 * MiB  # a second step of +2.1 MiB, a third of the first: named
    assert _in_steps(runs, left).startswith("in steps, not every run: #4 +6.5 MiB, #6 +2.1 MiB")
    # a run stopped between two of the series (not in it) may have left the step: JupyterLab,
    # keras.io's custom train_step, `#9 +34.1 MiB` of a run that added 4 after a stopped #8
    around_a_stop = [make_record(run_number=n) for n in (1, 2, 3, 5, 6, 7, 8)]
    assert _in_steps(around_a_stop, left).startswith("in steps, not every run: #4–#5 +6.5 MiB")


def test_a_rise_that_is_the_model_you_kept_says_so_not_the_frameworks():
    """JupyterLab, keras.io's weather forecasting: `kept = model` after run 6, and the runs 2-8
    read "+12.4 MiB a run … no name or model of yours grew: the framework's memory" where "Free
    flagged" gave all of it back (945 -> 867 MiB, below run 2's). One step beside the run whose
    model you keep is that model's: its graphs and optimizer stay with it."""
    from keras_nbguard.diagnosis.findings import rss_trend

    left = [800, 801, 801, 802, 801, 802, 880, 881, 881]  # run 7 keeps #6's model
    after = [int((mib + 15) * MiB) for mib in left]
    before = [int(mib * MiB) for mib in left[:1] + left[:-1]]
    kept = HeldModels(count=1, runs=(6,), paths=("kept",), weight_bytes=MiB)
    runs = [
        dataclasses.replace(r, stale_models=kept if r.run_number >= 7 else None)
        for r in runs_of([1.0] * len(left), after, rss_before=before)
    ]
    note = _after_each(runs)[-1].memory_note
    assert note is not None and "part of it #6's model you keep (`kept`)" in note, note
    assert "none of it held by your code" not in note and "framework's memory" not in note
    why = rss_trend(runs).unflagged_because()
    assert why is not None and why.startswith("part of it is #6's model you keep (`kept`)"), why
    # a steady rise beside the same kept model is not its
    steady = [800 + 2 * i for i in range(9)]
    rising = [
        dataclasses.replace(r, stale_models=kept if r.run_number >= 7 else None)
        for r in runs_of([1.0] * 9, [int((m + 15) * MiB) for m in steady])
    ]
    note = _after_each(rising)[-1].memory_note
    assert note is None or "part of it #6's" not in note, note


def test_a_step_at_the_latest_run_is_said_as_an_estimate():
    """JupyterLab, keras.io's VAE: run #7's summary read `in steps: #4 +9.1 MiB, #7 +9.0 MiB`,
    #8's `#7 +26.5 MiB`: the latest run's value is its RSS after less what the runs before gave
    back at the next start, an estimate until the next run ends. Said so."""
    from keras_nbguard.diagnosis.findings import _in_steps

    runs = runs_of([1.0] * 7)
    left = [800.0, 800.2, 800.5, 809.5, 809.8, 809.9, 818.9]
    values = [mib * MiB for mib in left]
    assert "#4 +9.0 MiB, #7 +9.0 MiB so far;" in _in_steps(runs, values)  # #7: the latest
    assert "so far" not in _in_steps(runs, values[:-1])  # settled values only: none of it
