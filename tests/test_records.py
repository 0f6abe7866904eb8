from __future__ import annotations

import dataclasses

import pytest
from helpers import make_record

from keras_nbguard.records.run import GpuReading, RunRecord
from keras_nbguard.records.tables import runs_table


def test_dict_round_trip_keeps_every_field():
    record = make_record(warnings=("w",), advice=("a",), error="E: x")
    assert RunRecord.from_dict(record.to_dict()) == record


def test_a_newer_writers_fields_are_ignored_at_every_depth():
    # every kernel of a machine writes one history, whatever version of ours each runs: a
    # record a newer version wrote (a field added to the deep clean's report) made reading the
    # whole history raise, the history page and `runs()` of every notebook with it
    from keras_nbguard.records.calls import CallbackTime, InferenceRecord
    from keras_nbguard.records.run import CleanReport, Growth, HeldModels

    fit = dataclasses.replace(
        make_record().fits[0], callbacks=(CallbackTime("Cb.on_epoch_end", 0.1, 2),)
    )
    record = make_record(
        fits=(fit,),
        deep_clean=CleanReport(available=True, entries=2, runs=1),
        growth=(Growth(name="histories", kind="list", items=3, bytes=1024),),
        inference=(InferenceRecord(kind="predict", seconds=0.2),),
        released_models=HeldModels(count=1, runs=(2,), paths=("Out[3]",)),
        stale_models=HeldModels(count=1, runs=(1,), paths=("keep[0]",)),
    )
    data = record.to_dict()
    newer = {**data, "added_later": 1}
    for key in ("gpu", "deep_clean", "released_models", "stale_models"):
        newer[key] = {**data[key], "added_later": 1}
    for key in ("fits", "growth", "inference"):
        newer[key] = [{**item, "added_later": 1} for item in data[key]]
    newer["fits"][0]["callbacks"] = [{**data["fits"][0]["callbacks"][0], "added_later": 1}]
    assert RunRecord.from_dict(newer) == record


def test_unknown_figures_show_as_na_never_zero():
    record = make_record(
        rss_before=None, rss_after=None, rss_peak=None, traces=None, fit_seconds=None, fits=()
    )
    text = dict(record.summary_rows())
    assert text["rss"] == "n/a (RSS unreadable)"
    assert text["traces"] == "n/a (not counted)"
    assert text["gpu"] == "n/a (no GPU: TensorFlow sees none)"
    assert "0" not in text["rss"]
    assert text["fit"] == "no fit in this run"


def test_deltas_against_previous_run_of_the_label():
    first = make_record()
    second = make_record(run_number=2, fit_seconds=1.5, rss_after=115 * 2**20).compared_to(first)
    assert second.previous_run == 1
    assert abs(second.delta_fit_seconds - 0.3) < 1e-9
    assert second.delta_rss_after == 5 * 2**20
    assert "#1: Δ fit +300 ms, Δ RSS after +5.0 MiB" in dict(second.summary_rows())["vs previous"]
    assert make_record().compared_to(None).previous_run is None
    restarted = dataclasses.replace(second, pid=(first.pid or 0) + 1).compared_to(first)
    assert (
        "#1 (in an earlier kernel: a restart between)"
        in dict(restarted.summary_rows())["vs previous"]
    )


def test_a_delta_without_its_figure_says_why():
    first = make_record(fit_seconds=None, fits=())
    second = make_record(run_number=2, fit_seconds=1.5).compared_to(first)
    assert "n/a (no fit in #1)" in dict(second.summary_rows())["vs previous"]


def test_a_run_that_died_is_compared_on_nothing_it_cannot_know():
    """An isolated child killed mid-fit: its fit is unknown (it may have trained), and its RSS
    "after" is only the last sample before it died. Beside it the next run said "Δ fit n/a (no fit
    in #1)" and "Δ RSS after -743.7 MiB" (that last sample read 0 as the child died)."""
    died = make_record(
        status="died", fit_seconds=None, fits=(), fit_reason="the isolated process ended first"
    )
    after = make_record(run_number=2, fit_seconds=1.5).compared_to(died)
    assert after.delta_fit_seconds is None and after.delta_rss_after is None
    line = dict(after.summary_rows())["vs previous"]
    assert "Δ fit n/a (#1's fit unknown: the isolated process ended first)" in line, line
    assert "Δ RSS after n/a (#1 died: its last RSS seen is no run's end)" in line, line
    again = dataclasses.replace(died, run_number=2).compared_to(make_record())
    line = dict(again.summary_rows())["vs previous"]
    assert "Δ fit n/a (the isolated process ended first)" in line, line
    assert "Δ RSS after n/a (this run died: its last RSS seen is no run's end)" in line, line
    table = runs_table([died, after])  # the history's table gives the same reason
    assert any("#1 died: its last RSS seen is no run's end" in note for note in table.notes)


def test_a_fit_stopped_part_way_is_no_fit_time_to_compare_and_says_so():
    """A fit stopped in its second epoch took 0.8 s: beside the next run's whole 0.2 s fit the
    summary said "Δ fit -600 ms"; stopped in its first epoch, "n/a (no fit in #1)", though #1
    did fit."""
    whole = make_record().fits[0]
    stopped = make_record(
        status="interrupted",
        fit_seconds=0.8,
        fits=(dataclasses.replace(whole, seconds=0.8, epoch_seconds=(0.7,), completed=False),),
    )
    assert dict(stopped.summary_rows())["fit"].startswith(
        "800 ms; epochs [700 ms], stopped after 1 epoch,"
    )
    after = make_record(run_number=2, fit_seconds=0.2).compared_to(stopped)
    assert after.delta_fit_seconds is None
    assert "Δ fit n/a (#1's fit stopped part way)" in dict(after.summary_rows())["vs previous"]
    # the dashboard's and %nbguard compare's table say so too (it said "fit 2.12 s | 2.80 s |
    # +680 ms" beside the summary's n/a), each side's time still shown
    from keras_nbguard.diagnosis.compare import Comparison

    rows = {name: rest for name, *rest in Comparison(stopped, after).rows()}
    assert rows["fit"] == ["800 ms", "200 ms", "n/a (#1's fit stopped part way)"]
    assert rows["epoch (mean, after the first)"][2] == "n/a"  # (no second epoch in #1)
    # and the cell's wall time: #1's is the time until the stop (it read "+1.2 s" beside it)
    assert rows["wall"][2] == "n/a (#1 stopped part way)"
    # beside another label's #1, the run is named with its label ("#1" said neither which)
    other = make_record(label="err2", run_number=1)
    wall = {name: rest for name, *rest in Comparison(stopped, other).rows()}["wall"]
    assert wall[2] == "n/a ('mlp' #1 stopped part way)"
    whole_runs = {name: rest for name, *rest in Comparison(make_record(), after).rows()}
    assert whole_runs["fit"][2].startswith("+") or whole_runs["fit"][2].startswith("-")
    assert whole_runs["wall"][2][0] in "+-"
    failing = make_record(
        run_number=2,
        status="error",
        fits=(dataclasses.replace(whole, epoch_seconds=(), completed=False),),
        fit_seconds=None,
    )
    assert "failed before its first epoch ended" in dict(failing.summary_rows())["fit"]
    # the compare table's side says it as the summary does (it read "n/a (not timed)"), and
    # its epoch row does not call the fit "one epoch"
    stopped_at_once = dataclasses.replace(failing, status="interrupted")
    rows = {name: rest for name, *rest in Comparison(stopped_at_once, after).rows()}
    assert rows["fit"][0] == "n/a (stopped before its first epoch ended)"
    assert rows["epoch (mean, after the first)"][0] == "n/a (stopped before its first epoch ended)"
    assert failing.compared_to(make_record()).delta_fit_note == "this run's fit failed part way"


def test_a_delta_between_fits_of_different_lengths_says_so():
    """A fit resumed by BackupAndRestore ran 3 of its 6 epochs: the next, whole run read
    "Δ fit +1.35 s", a slowdown to the eye."""
    whole = make_record().fits[0]
    resumed = make_record(fits=(dataclasses.replace(whole, epoch_seconds=(0.2,) * 3),))
    again = make_record(run_number=2, fits=(dataclasses.replace(whole, epoch_seconds=(0.2,) * 6),))
    row = dict(again.compared_to(resumed).summary_rows())["vs previous"]
    assert "Δ fit +0 ms (6 epochs, #1 ran 3)" in row
    same = make_record(run_number=2, fits=(dataclasses.replace(whole, epoch_seconds=(0.2,) * 3),))
    assert "epochs" not in dict(same.compared_to(resumed).summary_rows())["vs previous"]


def test_delta_is_unknown_when_either_side_is():
    first = make_record(fit_seconds=None, fits=())
    assert make_record(run_number=2).compared_to(first).delta_fit_seconds is None


def test_html_summary_escapes_and_shows_status():
    html = make_record(status="error", error="ValueError: <bad>")._repr_html_()
    assert "&lt;bad&gt;" in html and "error" in html and "<table" in html


def test_the_magics_display_bundle_is_the_records_own_reprs():
    from IPython.lib.pretty import pretty

    record = make_record(warnings=("w",), error="ValueError: <bad>")
    bundle = record.summary_bundle()
    assert bundle["text/plain"] == pretty(record)
    assert bundle["text/html"] == record._repr_html_()


def test_our_own_time_names_each_part_once():
    """An isolated run's record comes with its child's own parts (its leak check); the kernel's
    laps after it add to them instead of listing a part twice."""
    from keras_nbguard.session.core import Laps

    laps = Laps()
    laps._parts = [("leak check", 0.002), ("diagnosis", 0.001)]
    merged = laps.added_to((("clear", 0.004), ("leak check", 0.011)))
    assert merged == (("clear", 0.004), ("leak check", pytest.approx(0.013)), ("diagnosis", 0.001))


def test_a_size_under_a_kib_is_said_in_bytes_not_as_zero():
    from keras_nbguard.records.formatting import fmt_size

    # plain SGD's state (its step count and learning rate) in the leak list's "+ ... optimizer"
    assert fmt_size(12) == "12 B"
    assert fmt_size(0) == "0 B"
    assert fmt_size(1536) == "1.5 KiB"
    assert fmt_size(3 * 2**20) == "3.0 MiB"
    assert fmt_size(None) == "n/a"
    # a walkthrough's collaborative filtering: "1,021.2 KiB weights"; and "RSS left -0.0 MiB"
    assert fmt_size(1_045_709) == "1.0 MiB" and fmt_size(999 * 2**10) == "999.0 KiB"
    from keras_nbguard.records.formatting import fmt_bytes

    assert fmt_bytes(-20_000, signed=True) == "+0.0 MiB" and fmt_bytes(-20_000) == "0.0 MiB"
    assert fmt_bytes(-200_000, signed=True) == "-0.2 MiB"


def test_the_runs_table_says_why_each_figure_is_unknown():
    first = make_record(fit_seconds=None, fits=(), traces=None, trace_reason="no tf.function")
    second = make_record(run_number=2, traces=None).compared_to(first)
    table = runs_table([first, second])
    (row1, row2) = table.rows
    columns = dict(zip(table.header, zip(row1, row2, strict=True), strict=True))
    notes = dict(line.split(" ", 1) for line in table.notes)
    assert notes == {
        "n/a¹": "no fit",
        "n/a²": "first run of its label",
        "n/a³": "no GPU: TensorFlow sees none",
        "n/a⁴": "no tf.function",
        "n/a⁵": "no fit in the run before",
        "n/a⁶": "not counted",
    }
    assert columns["fit"] == ("n/a¹", "1.20 s")
    assert columns["Δ fit"] == ("n/a²", "n/a⁵")
    assert columns["Δ RSS"] == ("n/a²", "+0.0 MiB")
    assert columns["GPU peak"] == ("n/a³", "n/a³")  # each reason once, however many cells
    assert columns["traces"] == ("n/a⁴", "n/a⁶")
    assert table.text().endswith("\n".join(table.notes))
    assert "<div>n/a⁶ not counted</div>" in table._repr_html_()
    # nothing unknown: no marks, no notes
    gpu = GpuReading(tf_peak=2**20)
    known = make_record(run_number=2, gpu=gpu).compared_to(make_record(gpu=gpu))
    assert runs_table([known]).notes == () and "n/a" not in runs_table([known]).text()


def test_a_release_that_gave_no_rss_back_says_so_not_minus_zero():
    """keras.io's convnet on torch: the release of run #6's 136 KiB model gave 20 KiB back, and
    the summary read `RSS -0.0 MiB with its graphs`."""
    from keras_nbguard.records.formatting import fmt_released
    from keras_nbguard.records.run import HeldModels

    held = HeldModels(count=1, runs=(6,), paths=("Out[7]",), weight_bytes=136 * 1024)
    small = dataclasses.replace(held, rss_freed=20 * 1024)
    assert fmt_released(small).endswith("136.0 KiB weights, the RSS the same")
    large = dataclasses.replace(held, rss_freed=8 * 2**20)
    assert fmt_released(large).endswith("RSS -8.0 MiB with its graphs")
    # a GAN's earlier model: none of its weights freed (the setup cell's two models hold them),
    # its own two Adams' state freed with it
    gan = dataclasses.replace(held, weight_bytes=0, optimizer_bytes=int(10.8 * 2**20))
    assert fmt_released(gan).endswith(": 0 B weights + 10.8 MiB optimizer")


def test_stale_models_no_path_was_found_for_point_to_leaks_not_to_nothing():
    """A stale note whose walk found no path (its time ran out) read ``...graphs not
    counted):  — %nbguard free``: an empty holder, then the command."""
    from keras_nbguard.records.formatting import fmt_stale
    from keras_nbguard.records.run import HeldModels

    held = HeldModels(count=1, runs=(2,), weight_bytes=20, command="%nbguard free")
    assert fmt_stale(held).endswith("not counted): %nbguard leaks says where — %nbguard free")
    named = dataclasses.replace(held, paths=("models[0]",))
    assert fmt_stale(named).endswith("not counted): models[0] — %nbguard free")


def test_an_isolated_run_and_a_run_here_compare_no_rss():
    """A label run here, then with ``--isolate``, then here: the isolated run's RSS is its own
    process's, and ``vs previous`` read ``Δ RSS after +15.9 MiB`` between the child's and the
    kernel's."""
    from keras_nbguard.records.formatting import fmt_deltas

    here = make_record(run_number=1, rss_after=700 * 2**20)
    isolated = make_record(run_number=2, rss_after=740 * 2**20, isolated="fresh process")
    again = make_record(run_number=3, rss_after=716 * 2**20)
    there = isolated.compared_to(here)
    assert there.delta_rss_after is None
    assert fmt_deltas(there).endswith(
        "Δ RSS after n/a (this run ran isolated: its RSS is another process's)"
    )
    back = again.compared_to(isolated)
    assert back.delta_rss_after is None and "(#2 ran isolated" in fmt_deltas(back)
    assert again.compared_to(here).delta_rss_after == 16 * 2**20  # both here: compared
    both = make_record(run_number=4, rss_after=742 * 2**20, isolated="fresh process")
    assert both.compared_to(isolated).delta_rss_after == 2 * 2**20  # each a fresh process


def test_a_records_rss_series_is_kept_compact_and_reads_as_its_pairs():
    """Every record of the kernel's runs stays in the session's history with its series: as a
    tuple of pairs, 2,000 samples (a long run's) kept ~226 KiB in the kernel for good, 141 KiB
    for a fit of 25 s. Kept as arrays, it still reads, compares, pickles and writes to JSON as
    the pairs it was given."""
    import gc
    import json
    import pickle
    import sys

    def size(value: object, seen: set[int]) -> int:  # the value and all it holds
        if id(value) in seen or isinstance(value, type):
            return 0
        seen.add(id(value))
        return sys.getsizeof(value) + sum(size(held, seen) for held in gc.get_referents(value))

    pairs = [(i * 0.02, 700 * 2**20 + i * 4096) for i in range(2000)]
    record = make_record(rss_samples=list(pairs))  # as a run hands over its sampler's list
    kept = size(record.rss_samples, set())
    assert kept < 40 * 1024, kept  # 16 bytes a sample
    samples = record.rss_samples
    assert samples == tuple(pairs) and samples[-1] == pairs[-1] and list(samples) == pairs
    assert (
        samples[:2] == pairs[:2]
        and len(samples) == 2000
        and bool(make_record(rss_samples=()).rss_samples) is False
    )
    assert pickle.loads(pickle.dumps(record)) == record
    assert RunRecord.from_dict(json.loads(record.to_json())) == record
    assert json.loads(record.to_json())["rss_samples"][1] == list(pairs[1])
    assert RunRecord.from_dict(record.to_dict()).rss_samples == samples


def test_a_replaced_record_is_what_dataclasses_replace_makes_and_the_original_stays():
    """``RunRecord.replaced``, the session's copy with changes (a copy of the fields, not a new
    ``__init__``): the same record as ``dataclasses.replace``'s, the original untouched."""
    record = make_record(findings=("slower",), rss_samples=[(0.0, 1), (0.1, 2)])
    changed = record.replaced(findings=("fatter",), memory_note="kept")
    assert changed == dataclasses.replace(record, findings=("fatter",), memory_note="kept")
    assert type(changed) is RunRecord and changed is not record
    assert (record.findings, record.memory_note) == (("slower",), None)
    assert changed.rss_samples is record.rss_samples  # arrays shared, as replace shares them
    series = changed.replaced(rss_samples=[(0.0, 3)])  # a new series is made arrays, as ever
    assert series.rss_samples == ((0.0, 3),) and type(series.rss_samples) is type(
        record.rss_samples
    )
    with pytest.raises(TypeError, match="no_such_field"):
        record.replaced(no_such_field=1)


def test_the_traces_row_says_whether_one_function_retraced_or_several_traced_once():
    """fit's and evaluate's steps (and a new model's) share a name: ``multi_step_on_iterator 4×``
    read as retracing where four functions were each traced once (keras.io's knowledge
    distillation: a Distiller's fit and evaluate, then a student's). The run's per-function
    ``signatures`` say which it was."""

    def row(traced, signatures):
        record = make_record(traces=4, traced=traced, signatures=signatures)
        return next(line for line in record.summary_text().splitlines() if "traces" in line)

    steps = (("multi_step_on_iterator", 1),) * 3
    assert "multi_step_on_iterator 4× (several functions, one input each)" in row(
        (("multi_step_on_iterator", 4),), steps
    )
    retraced = (("step", 3), ("other", 1))
    assert "step 3× (one function for 3 inputs), other 1×" in row(
        (("step", 3), ("other", 1)), retraced
    )
    assert "step 4× (one function for 2 inputs)" in row((("step", 4),), (("step", 2),))
    assert row((("step", 2),), ()).endswith("most: step 2×")  # a record from before: as it was
    # Keras 2's train step: one input, traced again once its first call had made variables
    twice = make_record(
        traces=3,
        traced=(("train_function", 2), ("test_function", 1)),
        signatures=(("train_function", 1), ("test_function", 1)),
        traced_twice=(("train_function", 1),),
    ).summary_text()
    assert (
        "most: train_function 2× (one input; TensorFlow traces a first call that makes "
        "variables twice), test_function 1×"
    ) in twice


def test_a_rise_that_came_between_two_runs_is_said_so():
    """JupyterLab, keras.io's VAE stopped mid-fit: the next run read `Δ RSS after +52.9 MiB`
    with no word, though ~49 MiB of it came after the stopped run ended (IPython parsing
    TensorFlow's sources to show its traceback): the row says how much came between the runs."""
    from keras_nbguard.records.formatting import fmt_deltas

    MiB = 2**20
    stopped = make_record(run_number=12, status="interrupted", rss_after=913 * MiB)
    after = make_record(run_number=13, rss_before=962 * MiB, rss_after=966 * MiB)
    row = fmt_deltas(after.compared_to(stopped))
    assert row.endswith(
        "Δ RSS after +53.0 MiB (+49.0 MiB of it came after #12 ended, before this run began)"
    )
    # the run's own rise, or a small one, reads as before
    own = make_record(run_number=13, rss_before=914 * MiB, rss_after=966 * MiB)
    assert fmt_deltas(own.compared_to(stopped)).endswith("Δ RSS after +53.0 MiB")
    small = make_record(run_number=13, rss_before=916 * MiB, rss_after=916 * MiB)
    assert fmt_deltas(small.compared_to(stopped)).endswith("Δ RSS after +3.0 MiB")


def test_an_isolated_runs_rss_row_says_whose_it_is():
    """JupyterLab: an isolated run's `rss 51.2 MiB → 51.3 MiB` beside a kernel of ~960 MiB did
    not say it was the child's."""
    MiB = 2**20
    isolated = make_record(
        rss_before=51 * MiB, rss_after=52 * MiB, rss_peak=52 * MiB, isolated="fresh process"
    )
    assert dict(isolated.summary_rows())["rss"] == (
        "the isolated process's: 51.0 MiB → 52.0 MiB (peak 52.0 MiB)"
    )
    assert "isolated" not in dict(make_record().summary_rows())["rss"]


def test_the_runs_table_marks_a_change_against_a_run_before_a_restart():
    """JupyterLab: `%nbguard runs` showed run #2's `Δ fit -551 ms` against run #1 of the kernel
    before a restart, with no mark (the summary said `in an earlier kernel: a restart between`)."""
    first = make_record(kernel_id="k1", pid=1)
    second = make_record(run_number=2, kernel_id="k1", pid=2, fit_seconds=0.6).compared_to(first)
    (row,) = runs_table([second]).rows
    columns = dict(zip(runs_table([second]).header, row, strict=True))
    assert columns["Δ fit"] == "-600 ms¹" and columns["Δ RSS"].endswith("MiB¹")
    assert runs_table([second]).notes[0] == (
        "¹ against the label's run before, in the kernel before a restart"
    )
    same = make_record(run_number=2, kernel_id="k1", pid=1).compared_to(first)
    table = runs_table([same])
    columns = dict(zip(table.header, table.rows[0], strict=True))
    assert (columns["Δ fit"], columns["Δ RSS"]) == ("+0 ms", "+0.0 MiB")  # no mark


def test_what_a_stale_model_pins_beyond_its_weights_is_said_for_its_backend():
    """A walkthrough on a torch kernel: "6.8 MiB optimizer, graphs not counted" of a model the
    eager backend builds no graph for."""
    from keras_nbguard.records.formatting import fmt_stale_size
    from keras_nbguard.records.run import HeldModels

    held = HeldModels(count=1, runs=(3,), weight_bytes=2**20, paths=("kept",), optimizer_bytes=0)
    assert fmt_stale_size(held, "Keras 3.15.1 (tensorflow)").endswith(", graphs not counted")
    assert fmt_stale_size(held, "Keras 3.15.1 (jax)").endswith(", compiled steps not counted")
    assert "not counted" not in fmt_stale_size(held, "Keras 3.15.1 (torch)")
    assert fmt_stale_size(held, "Keras 2.21.0 (tf_keras)").endswith(", graphs not counted")


def test_a_run_after_one_on_another_backend_compares_nothing_and_says_why():
    """A walkthrough: a JAX kernel's first run read `vs previous #4 (in an earlier kernel: a
    restart between): Δ fit +529 ms, Δ RSS after -133.4 MiB` against the torch kernel's run."""
    torch = make_record(run_number=4, keras="Keras 3.15.1 (torch)", kernel_id="a")
    jax = make_record(run_number=5, keras="Keras 3.15.1 (jax)", kernel_id="b").compared_to(torch)
    assert jax.delta_fit_seconds is None and jax.delta_rss_after is None
    row = dict(jax.summary_rows())["vs previous"]
    assert row == (
        "#4 (in an earlier kernel: a restart between): Δ fit n/a (#4 ran on Keras 3.15.1 "
        "(torch)), Δ RSS after n/a (#4 ran on Keras 3.15.1 (torch))"
    ), row
    same = make_record(run_number=5, keras="Keras 3.15.1 (torch)").compared_to(torch)
    assert same.delta_fit_seconds is not None and same.delta_rss_after is not None
