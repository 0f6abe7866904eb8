"""The dashboard: figure_data on records, the widget and its buttons, the static fallback."""

from __future__ import annotations

import dataclasses
import gc
import html
import json
import os
import re
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import nbformat
import pytest
from helpers import make_record, run
from nbclient import NotebookClient

import keras_nbguard
from keras_nbguard.board import kernel_board as dashboard_module
from keras_nbguard.board.figures import figure_data, run_rows, trend_text
from keras_nbguard.board.frontend import widget_frontend
from keras_nbguard.board.kernel_board import dashboard
from keras_nbguard.board.markup import model_lines, static_view
from keras_nbguard.board.widget import Dashboard
from keras_nbguard.diagnosis.findings import Finding
from keras_nbguard.models import Leak, LeakReport
from keras_nbguard.records.formatting import fmt_seconds
from keras_nbguard.records.run import GpuReading
from keras_nbguard.session.core import Session, using

MB = 2**20
NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "dashboard_demo.ipynb"


def runs(n: int, label: str = "mlp", grow_mb: int = 4, rss_before=None, **changes):
    """``n`` runs of ``label``, RSS growing ``grow_mb`` a run; each starts where the last ended."""
    return [
        make_record(
            label=label,
            run_number=i + 1,
            started_at=1000.0 + i,
            fit_seconds=1.0 + 0.01 * i,
            rss_before=rss_before or (500 + grow_mb * max(i - 1, 0)) * MB,
            rss_after=(500 + grow_mb * i) * MB,
            **changes,
        )
        for i in range(n)
    ]


def by_uid(data):
    return {t["uid"]: t for t in data["traces"]}


# -- figure_data: pure, on records -----------------------------------------------------------
def test_figure_data_one_trace_per_series_and_label_with_hover_text():
    records = runs(3) + runs(2, label="cnn")
    data = figure_data(records)
    traces = by_uid(data)
    # x: each label's own run number
    assert traces["fit:fit:mlp"]["x"] == [1, 2, 3] and traces["fit:fit:cnn"]["x"] == [1, 2]
    assert traces["rss:after:mlp"]["y"] == [500.0, 504.0, 508.0]
    assert traces["fit:fit:mlp"]["color"] != traces["fit:fit:cnn"]["color"]
    # a label keeps its colour when runs of others come and go (a reset, another notebook)
    alone = by_uid(figure_data(runs(2, label="cnn")))
    assert alone["fit:fit:cnn"]["color"] == traces["fit:fit:cnn"]["color"]
    text = traces["fit:fit:cnn"]["text"][1]
    assert "cnn #2" in text and "ok" in text and "fit 1.01 s" in text and "RSS" in text
    assert data["labels"] == ["mlp", "cnn"] and data["failed"] == 0
    assert data["trends"][0].startswith("cnn: ")  # the current label first


def test_unknown_figures_are_gaps_never_zero_and_no_gpu_is_said():
    records = [make_record(fit_seconds=None, fits=(), rss_peak=None)]
    traces = by_uid(figure_data(records))
    assert traces["fit:fit:mlp"]["y"] == [None] and traces["rss:peak:mlp"]["y"] == [None]
    assert not any(k.startswith("gpu:") for k in traces)
    assert figure_data(records)["gpu_note"] == "no GPU: TensorFlow sees none"
    no_tf = [make_record(gpu=GpuReading(reason="TensorFlow has not initialized its GPU yet"))]
    assert figure_data(no_tf)["gpu_note"] == "no GPU: TensorFlow has not initialized its GPU yet"


def test_gpu_figures_are_plotted_when_known():
    records = [make_record(gpu=GpuReading(tf_peak=300 * MB, nvml_used=1000 * MB))]
    data = figure_data(records)
    assert data["gpu_note"] is None
    assert by_uid(data)["gpu:tf peak:mlp"]["y"] == [300.0]
    assert by_uid(data)["gpu:nvml process:mlp"]["y"] == [None]


def test_failed_runs_are_marked_and_restarts_found():
    records = runs(3)
    records[1] = make_record(run_number=2, status="oom", error="ResourceExhaustedError: x")
    records += runs(2)  # the history started again: run numbers 1, 2 once more
    data = figure_data(records)
    marks = by_uid(data)["rss:not ok"]
    assert marks["x"] == [2] and marks["symbol"] == ["star"] and "oom" in marks["text"][0]
    # x is the label's run number; the line breaks (a None) where the history started again
    assert by_uid(data)["fit:fit:mlp"]["x"] == [1, 2, 3, 2.0, 1, 2]
    assert by_uid(data)["fit:fit:mlp"]["y"][3] is None
    assert data["failed"] == 1 and [m["x"] for m in data["restarts"]] == [2.0]


def test_a_fit_stopped_part_way_is_a_mark_not_a_point_of_its_labels_line():
    """JupyterLab, keras.io's text example, #9 stopped mid-fit: its line dipped to the part of
    a fit it ran, beside whole fits, as if that run had been fast."""
    records = runs(4)
    whole = records[2].fits[0]
    records[2] = dataclasses.replace(
        records[2],
        status="interrupted",
        fit_seconds=0.3,
        fits=(dataclasses.replace(whole, seconds=0.3, completed=False),),
    )
    data = by_uid(figure_data(records))
    assert data["fit:fit:mlp"]["x"] == [1, 2, 4]  # the line joins the whole fits
    marks = data["fit:not ok"]
    assert marks["x"] == [3] and marks["y"] == [0.3] and marks["symbol"] == ["diamond"]
    assert data["rss:after:mlp"]["x"] == [1, 2, 3, 4]  # its memory is whole: on the line
    assert [row["cut"] for row in run_rows(records)] == [False, False, True, False]
    # stopped before its first epoch ended: no fit time, yet a mark at the time it ran
    records[2] = dataclasses.replace(
        records[2],
        fit_seconds=None,
        fits=(dataclasses.replace(whole, seconds=0.9, epoch_seconds=(), completed=False),),
    )
    data = by_uid(figure_data(records))
    assert data["fit:fit:mlp"]["x"] == [1, 2, 4]
    assert data["fit:not ok"]["x"] == [3] and data["fit:not ok"]["y"] == [0.9]
    assert (
        "fit n/a (stopped before its first epoch ended, 900 ms spent)"
        in (data["fit:not ok"]["text"][0])
    )


def test_a_kernel_restart_breaks_each_labels_line_at_its_run_numbers():
    first = [dataclasses.replace(r, kernel_id="k", pid=1) for r in runs(3)]
    first += [dataclasses.replace(r, kernel_id="k", pid=1, run_number=1) for r in runs(1, "cnn")]
    then = [
        dataclasses.replace(r, kernel_id="k", pid=2, run_number=r.run_number + 3) for r in runs(2)
    ]  # "Restart kernel" keeps the id; the numbers go on
    then += [dataclasses.replace(r, kernel_id="k", pid=2, run_number=2) for r in runs(1, "cnn")]
    rows = run_rows(first + then)
    assert [(row["g"], row["n"], row["k"]) for row in rows] == [
        ("mlp", 1, 0),
        ("mlp", 2, 0),
        ("mlp", 3, 0),
        ("cnn", 1, 0),
        ("mlp", 4, 1),
        ("mlp", 5, 1),
        ("cnn", 2, 1),
    ]
    data = figure_data(first + then)
    assert by_uid(data)["rss:after:mlp"]["x"] == [1, 2, 3, 3.5, 4, 5]
    assert by_uid(data)["rss:after:mlp"]["y"][3] is None
    assert [(m["label"], m["x"]) for m in data["restarts"]] == [("mlp", 3.5), ("cnn", 1.5)]
    assert data["max_run"] == 5


def test_trend_in_words_over_the_labels_last_runs():
    assert trend_text(runs(12, grow_mb=4), "mlp") == (  # flagged: the diagnosis names it
        "mlp: ⚠ RSS left +4.0 MiB per run over runs 2–12; fit time +10 ms per run over runs 2–12"
    )
    assert trend_text(runs(8, grow_mb=1), "mlp").startswith("mlp: RSS left +1.0 MiB per run")
    assert trend_text(runs(3, grow_mb=4), "mlp").startswith("mlp: RSS left +4.0")  # too few runs
    assert trend_text(runs(1), "mlp") == (
        "mlp: a trend needs 3 runs in this kernel, the first a warm-up (1 so far)"
    )
    # only since the label's last restart (an old history whose numbers went back)
    assert "(2 so far)" in trend_text(runs(5) + runs(2, grow_mb=1), "mlp")


def test_trend_is_this_kernels_never_mixed_with_an_earlier_one():
    # a restart: the old kernel's RSS was far higher, each new run adds 8 MiB; numbers go on
    earlier = [
        dataclasses.replace(r, kernel_id="k", pid=1, rss_after=r.rss_after + 700 * MB)
        for r in runs(3)
    ]
    now = [
        dataclasses.replace(r, kernel_id="k", pid=2, run_number=r.run_number + 3)
        for r in runs(7, grow_mb=8)  # each starting where the one before ended
    ]
    text = trend_text(earlier + now, "mlp")
    assert text.startswith("mlp: RSS left +8.0 MiB per run over runs 5–10")  # not mixed: -300


def test_static_view_has_charts_table_and_failures_in_red():
    records = runs(3)
    records[2] = make_record(run_number=3, status="error", rss_after=520 * MB)
    bundle = static_view(records, figure_data(records), [], ["m: held by model"], "last run", "")
    assert bundle["text/html"].count("<svg") == 2 and "#d62728" in bundle["text/html"]
    assert "run 3 (of its label)" in bundle["text/html"]  # the x axis says what it counts
    assert "display:none" in bundle["text/html"].split("The kernel restarted")[0]  # hidden
    assert "mlp    3  error" in bundle["text/plain"]
    assert "m: held by model" in bundle["text/plain"]
    assert "Findings</b>: none, nothing stands out" in bundle["text/html"]
    words = {
        "kind": "retracing",
        "message": "40 tf.function traces in mlp #1",
        "advice": "fix the shapes",
    }  # the other fields (evidence, runs ...) left empty
    found = [Finding(**{f.name: () for f in dataclasses.fields(Finding)} | words)]
    bundle = static_view(records, figure_data(records), [], [], "last run", "", found)
    assert "<b>retracing</b>: 40 tf.function traces in mlp #1" in bundle["text/html"]
    assert "finding: retracing: 40 tf.function traces" in bundle["text/plain"]


def test_importing_the_dashboard_costs_no_plotly_or_widgets():
    assert callable(keras_nbguard.dashboard)  # the documented call, a plain function
    code = (
        "import sys, keras_nbguard.board.widget, keras_nbguard.board.figures, "
        "keras_nbguard.board.plotting; "
        "print([m for m in ('plotly', 'ipywidgets', 'anywidget', 'tensorflow', 'keras') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # a widget made: ipywidgets and anywidget, never plotly's figures or nbformat/jsonschema
    code = (
        "import sys, keras_nbguard; from keras_nbguard.board.widget import Dashboard; "
        "Dashboard(keras_nbguard.get_session(), mode='widget'); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'plotly', 'nbformat', "
        "'jsonschema', 'rfc3987_syntax', 'anywidget', 'ipywidgets'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['anywidget', 'ipywidgets']"


# -- the widget ------------------------------------------------------------------------------
def made_in_a_cell(shell) -> Dashboard:
    """A dashboard made in a cell, as a user makes it."""
    seen = {}

    def make():
        seen["board"] = Dashboard(keras_nbguard.get_session(), mode="widget")
        seen["rows"] = list(seen["board"].chart._rows)  # what the figure has as the cell ends
        return seen["board"]

    shell.user_ns["_make_board"] = make
    assert shell.run_cell("_make_board();").success
    del shell.user_ns["_make_board"]
    seen["board"].rows_in_the_cell = seen["rows"]
    return seen["board"]


@pytest.fixture
def board(shell):
    board = made_in_a_cell(shell)
    yield board
    board.detach()


def test_the_dashboard_is_whole_when_its_cell_ends_and_holds_no_plotly(keras_shell):
    run(keras_shell, "%%kerasrun --quiet --label mlp\nmodel = make_model()\n")
    before = set(keras_shell.events.callbacks["post_run_cell"])
    board = made_in_a_cell(keras_shell)
    # the figure is made in the cell: nothing is left for after it (the kernel is free at once)
    assert [row["n"] for row in board.rows_in_the_cell] == [1]
    assert set(keras_shell.events.callbacks["post_run_cell"]) - before == {board._after_cell}
    # plain lists, drawn by plotly.js in the page: plotly's Python figures are never imported
    assert not [m for m in sys.modules if m.startswith(("plotly.graph_objs", "plotly.io"))]
    state = board.chart.get_state()
    assert len(json.dumps(state, default=str)) < 60_000  # not plotly.js (5 MB) per widget
    assert [row["g"] for row in state["rows"]] == ["mlp"]
    # made after a run: its live panel shows that run, not "no run yet"
    assert "last run: mlp #1 (ok)" in board._top.value
    assert len(state["live"]["t"]) > 0
    # an isolated run's RSS over time is its child's: the panel says whose
    isolated = make_record(run_number=2, isolated="fresh process", rss_samples=((0.0, 2**30),))
    keras_nbguard.get_session().events.emit("record", isolated)
    assert "last run: mlp #2 (ok), the RSS of its own process" in board._top.value
    board.detach()


def bottom(board) -> str:
    """The reports and models under the buttons, as text."""
    return html.unescape(board._bottom.value)


def sent(board) -> list[dict]:
    """The messages the figure sends from now on (what travels to the page)."""
    messages: list[dict] = []
    send = board.chart.send
    board.chart.send = lambda content, buffers=None: (
        messages.append(content),
        send(content, buffers),
    )
    return messages


def test_a_run_of_several_fits_draws_each_fits_epochs_as_its_own(keras_shell, board):
    """k folds, cross-validation, a search: the epoch panel said "epoch 1..5" for the four
    fits of a cross-validated cell; each bar says which fit it is of."""
    messages = sent(board)
    keras_shell.user_ns["board"] = board
    cell = (
        "%%kerasrun --quiet --label folds\nfor fold in range(2):\n"
        "    make_model().fit(x, y, epochs={n}, verbose=0)\n"
        "drawn = list(board._live[3])  # what the run going on draws, epoch by epoch\n"
    )
    assert run(keras_shell, cell.format(n=2)).success
    assert keras_shell.user_ns["drawn"] == [1, 1, 2, 2]
    assert board.chart._live["fits"] == [1, 1, 2, 2]  # the record's, once the run ended
    assert messages[-1]["fits"] == [1, 1, 2, 2] and len(messages[-1]["epochs"]) == 4
    assert run(keras_shell, cell.replace("range(2)", "range(1)").format(n=3)).success
    assert board.chart._live["fits"] == [1, 1, 1]


def test_a_run_updates_the_plot_live_panels_and_models(keras_shell, board):
    messages = sent(board)
    run(
        keras_shell,
        "%%kerasrun --quiet --label mlp\nmodel = make_model()\n"
        "model.fit(x, y, epochs=2, verbose=0)\n",
    )
    assert [(row["g"], row["n"]) for row in board.chart._rows] == [("mlp", 1)]
    assert len(board.chart._live["epochs"]) == 2  # seconds per epoch of the last run
    assert len(board.chart._live["t"]) > 0  # its RSS over time
    assert "last run: mlp #1 (ok)" in board._top.value
    n = max(keras_shell.user_ns["Out"])  # the History the cell ended with is Out[n]
    # the leak finder's line: flag, size, run, and its paths, your names first
    assert f"mlp #1): model, Out[{n}].model" in bottom(board)
    # named as Keras names it (the clear keeps its name counters: sequential, sequential_1...)
    # its size as %nbguard leaks says it, optimizer state included (the list left it out)
    assert re.search(
        r"current sequential(_\d+)? \(644 B weights \+ 1.3 KiB optimizer, mlp #1\)", bottom(board)
    )
    assert board.chart.notes["gpu"].startswith("no GPU")  # the empty panel says why
    # a second run: only its row travels, not the history again
    messages.clear()
    run(keras_shell, "%%kerasrun --quiet --label mlp\nmodel = make_model()\n")
    rows = [m for m in messages if m["type"] == "rows"]
    assert [(m["start"], [r["n"] for r in m["rows"]]) for m in rows] == [(1, [2])]


def test_a_run_is_named_label_colon_number_and_the_old_hash_still_works():
    from keras_nbguard.diagnosis.compare import compare_runs, find_run

    records = [
        make_record(label=label, run_number=n)
        for label, n in (("mlp", 1), ("mlp", 5), ("cnn:3", 2))
    ]
    assert find_run(records, "mlp:5") is records[1]  # not read as a comment by an editor
    assert find_run(records, "mlp#5") is records[1] and find_run(records, "mlp #5") is records[1]
    assert find_run(records, "cnn:3") is records[2]  # a label that looks like a reference
    pair = compare_runs(records, ["mlp:1", "mlp:5"])
    assert (pair.first, pair.second) == (records[0], records[1])
    with pytest.raises(ValueError, match="name a run as 'label:3'"):
        find_run(records, "rnn:1")


def test_a_run_is_named_by_the_start_of_its_label_or_its_number_alone():
    """JupyterLab, keras.io's GAN: its default label is its first line, cut, ending in "…";
    `compare gan:1 gan:3` said "no run labelled 'gan'", `compare '#1' '#3'` "no run labelled ''",
    and to compare at all the ellipsis had to be typed."""
    from keras_nbguard.diagnosis.compare import find_run

    gan = "gan = GAN(discriminator=discriminator, …"
    records = [
        make_record(label=label, run_number=n)
        for label, n in ((gan, 1), ("generate", 1), (gan, 2), (gan, 3))
    ]
    assert find_run(records, "gan:1") is records[0]  # the start of one label
    assert find_run(records, "gan = GAN(discriminator=discriminator, …:3") is records[3]
    assert find_run(records, "gan = GAN") is records[3]  # its last run
    for spec in ("2", "#2", ":2"):  # a number alone: the latest run's label
        assert find_run(records, spec) is records[2]
    with pytest.raises(ValueError, match=r"'g' starts 2 labels .*type more"):
        find_run(records, "g:1")
    with pytest.raises(ValueError, match="'3' for run 3 of the latest label"):
        find_run(records, "rnn:1")
    with pytest.raises(ValueError, match="has no run #7"):
        find_run(records, "#7")
    # `compare 1 3` after another label ran once: that label has no #3, the GAN's has; say how
    # to type the GAN's (by its first word, which starts no other label)
    later = [*records, make_record(label="generate", run_number=2)]
    with pytest.raises(ValueError) as said:
        find_run(later, "3")
    assert str(said.value) == (
        "'generate' has no run #3 (it has #1, #2); a number alone is a run of the latest run's "
        "label: for #3 of 'gan = GAN(discriminator=discriminator, …', type gan:3"
    )
    with pytest.raises(ValueError, match=r"\(it has #1, #2\)$"):  # named: nothing to add
        find_run(later, "generate:3")


def test_two_runs_picked_are_compared_side_by_side(keras_shell, board):
    cell = "%%kerasrun --quiet --label pick\nmodel = make_model()\nmodel.fit(x, y, verbose=0)\n"
    for _ in range(2):
        run(keras_shell, cell)
    picker = board.picker
    # newest first, each shown number first (a long label cut: the number stays in sight)
    assert list(picker.first.options) == [("#2 pick", "pick #2"), ("#1 pick", "pick #1")]
    assert (picker.first.value, picker.second.value) == ("pick #1", "pick #2")
    records = keras_nbguard.runs("pick")
    change = records[1].fit_seconds - records[0].fit_seconds
    # padded (the runs' names ran together), a figure on one line ("+4.2 / MiB")
    td = '<td style="padding: 0.2em 0.6em; white-space: nowrap">'
    assert f"{td}fit</td>{td}{fmt_seconds(records[0].fit_seconds)}</td>" in picker.result.value
    assert f"{td}{html.escape(fmt_seconds(change, signed=True))}</td>" in picker.result.value
    # a narrow window scrolls it sideways rather than break its words mid-way ("ch an ge")
    assert picker.result.value.startswith(
        '<div class="jp-RenderedHTMLCommon" style="overflow-x: auto; overflow-wrap: normal;'
    )
    picker.first.value = "pick #2"  # a pick, as a user makes it
    assert "pick another run" in picker.result.value
    run(keras_shell, cell)  # a new run keeps the user's picks
    assert (picker.first.value, picker.second.value) == ("pick #2", "pick #2")


def test_the_pickers_first_default_is_the_latest_labels_run_before():
    """JupyterLab, the GAN beside another label's one run: the picker showed gan #3 against
    gtest #1, most rows n/a. By default it is the latest run's label's run before it."""
    from keras_nbguard.board.compare_picker import ComparePicker

    picker = ComparePicker()
    records = [make_record(label=label, run_number=n) for label, n in (("gan", 1), ("gan", 2))]
    records += [make_record(label="other", run_number=1), make_record(label="gan", run_number=3)]
    picker.update(records)
    assert (picker.first.value, picker.second.value) == ("gan #2", "gan #3")
    long = make_record(label="input = layers.Input(shape=(28, 28, 1))", run_number=5)
    picker.update([*records, long])
    assert picker.first.options[0] == ("#5 input = layers.Input(shape=(28,…", long.label + " #5")
    picker.update(records[:3])  # the latest label has no run before it: the run before
    assert (picker.first.value, picker.second.value) == ("gan #2", "other #1")


def test_compact_line_says_the_last_run_its_trend_and_stale_models(keras_shell):
    from keras_nbguard.board.compact import CompactLine

    line = CompactLine(keras_nbguard.get_session())
    assert line.line() == "keras_nbguard · no run yet"
    run(keras_shell, "kept = []")
    for _ in range(2):
        run(
            keras_shell,
            "%%kerasrun --quiet --label kept\nkept.append(make_model())\n"
            "kept[-1].fit(x, y, epochs=1, verbose=0)\n",
        )
    last = keras_nbguard.runs("kept")[-1]
    text = line.line()
    assert text.startswith(
        f"keras_nbguard · kept #2 ok · fit {fmt_seconds(last.fit_seconds)} "
        f"({fmt_seconds(last.delta_fit_seconds, signed=True)}) · "
    )
    assert " · a trend needs 3 runs in this kernel, the first a warm-up (2 so far) · " in text
    assert text.endswith(" · 1 stale model")
    assert "#ef6c00" in line.bundle()["text/html"]  # a stale model: orange
    shown = keras_shell.run_line_magic("nbguard", "dashboard --compact")
    assert shown is None  # displayed, redrawn in place after each run
    line.close()


def test_compact_line_gives_the_trend_of_the_last_runs_own_line():
    """The last run isolated, or a sweep's point: the line gave the trend of the label's runs
    here ("a trend needs 3 runs ... (0 so far)" after four isolated runs)."""
    import types

    from keras_nbguard.board.compact import CompactLine
    from keras_nbguard.records.events import Events

    records = [
        make_record(run_number=n, rss_after=(700 + n) * 2**20, isolated="fresh process")
        for n in range(1, 5)
    ]
    session = types.SimpleNamespace(runs=lambda: records, events=Events(lambda message: None))
    text = CompactLine(session).line()  # type: ignore[arg-type]
    assert " · RSS left +" in text and "a trend needs" not in text, text


def test_clear_session_button_reports_rss_before_and_after(board):
    board.buttons["clear_session"].click()
    assert "clear_session:" in bottom(board) and "RSS" in bottom(board)
    assert " MiB → " in bottom(board)


def test_clear_output_cache_and_reset_history_buttons(keras_shell, board):
    session = keras_nbguard.get_session()
    run(keras_shell, "%%kerasrun --quiet\nmodel = make_model()\nmodel.fit(x, y, verbose=0)\n")
    board.buttons["clear_output_cache"].click()
    assert "clear_output_cache: cleared" in bottom(board)
    assert "Out[" not in bottom(board).split("Models still referenced")[1]
    board.buttons["reset_history"].click()
    assert session.history == [] and "hid 1 run(s)" in bottom(board)
    assert board.chart._rows == []  # the runs are gone
    # header, live panels and numbering agree with the emptied charts
    assert "0 run(s)" in board._top.value and "history reset: no run since" in board._top.value
    assert board.chart._live["epochs"] == [] and board.chart._live["t"] == []
    reports = board._bottom.value.split("nbguard-reports'>")[1].split("</div><div class")[0]
    assert reports.count("<div") == 2 and reports.index("reset_history") < reports.index(
        "clear_output_cache"
    )  # one entry a line, newest first
    run(keras_shell, "%%kerasrun --quiet\nmodel = make_model()\n")
    assert keras_nbguard.runs()[-1].run_number == 2  # numbers go on after a reset


@pytest.mark.slow
def test_free_button_frees_exactly_the_flagged_models(keras_shell, board):
    run(keras_shell, "keep = []")
    cell = "%%kerasrun --quiet --label mlp\nmodel = make_model()\nkeep.append(model)\n"
    for _ in range(3):
        run(keras_shell, cell + "model.fit(x, y, epochs=1, verbose=0)\n")
    listed = bottom(board).split("Models still referenced")[1]
    assert listed.count("STALE ") == 2
    size = r"644 B weights \+ 1.3 KiB optimizer"
    assert re.search(rf"STALE sequential(_\d+)? \({size}, mlp #1\): keep\[0\]", listed)
    assert re.search(rf"current sequential(_\d+)? \({size}, mlp #3\): model, keep\[2", listed)
    refs = [weakref.ref(m) for m in keras_shell.user_ns["keep"]]
    findings = bottom(board).split("Models still referenced")[0]
    assert "<b>stale_models</b>: 2 models from mlp #1, #2 still alive" in findings  # in words
    board.buttons["free"].click()
    gc.collect()
    assert [r() is None for r in refs] == [True, True, False]  # the two flagged ones, no more
    assert keras_shell.user_ns["keep"][:2] == [None, None]
    assert "free: freed 2 model(s) (keep[0] = None, keep[1] = None, " in bottom(board)
    assert "STALE" not in bottom(board).split("Models still referenced")[1]
    assert "stale_models" not in bottom(board)  # the finding is the present's too


def test_free_button_says_when_the_action_is_not_there(board):
    session = board.session
    if "free" in session.actions:
        board.buttons["free"].click()
        assert "free:" in bottom(board)
    else:
        board.buttons["free"].click()
        assert "free: not available in this build" in bottom(board)


def cleared(reports: str) -> bool:
    """Whether the reports show a clear that ran: "cleared" once Keras is imported, "Keras is
    not imported; ran gc" before (as in a process that runs this file's tests alone)."""
    return any(
        f"clear_session: {done}" in reports for done in ("cleared", "Keras is not imported; ran gc")
    )


def test_a_click_during_a_run_is_queued_then_done(board):
    session = board.session
    with using(session), keras_nbguard.track("busy"):
        clicker = threading.Thread(target=board.buttons["clear_session"].click)  # a subshell
        clicker.start()
        clicker.join()
        assert "clear_session: queued: runs when 'busy' ends" in bottom(board)
        assert "running: busy #1" in board._top.value
    assert cleared(bottom(board).split("queued")[0])  # newest first


def test_a_click_on_a_subshell_during_an_untracked_cell_waits_for_the_cell(board):
    board._before_cell()  # a plain cell (no %%kerasrun) is running on the main shell
    clicker = threading.Thread(target=board.buttons["clear_session"].click)
    clicker.start()
    clicker.join()
    assert "clear_session: queued: runs when the running cell ends" in bottom(board)
    assert not cleared(bottom(board))
    board._after_cell()
    assert cleared(bottom(board))
    board.buttons["reset_history"].click()  # on the main thread: that cell is over, now
    assert "reset_history: hid" in bottom(board)


def test_button_errors_are_shown_in_the_widget(board, monkeypatch):
    board.session.actions["clear_session"] = lambda: 1 / 0
    board.buttons["clear_session"].click()
    assert "clear_session: ZeroDivisionError" in bottom(board)  # a failed report
    monkeypatch.setattr(board.session, "perform", lambda name: {}[name])
    board.buttons["reset_history"].click()  # our own bug: the traceback goes to the Output
    assert "reset_history failed: KeyError" in bottom(board)


@pytest.mark.slow
def test_the_widget_never_keeps_a_model_alive(keras_shell, board):
    run(keras_shell, "%%kerasrun --quiet\nmodel = make_model()\nmodel.fit(x, y, verbose=0)\n")
    ref = weakref.ref(keras_shell.user_ns["model"])
    assert "sequential" in bottom(board)
    run(keras_shell, "del model")
    board.buttons["clear_output_cache"].click()
    board.buttons["clear_session"].click()
    gc.collect()
    assert ref() is None
    assert "<li>none</li>" in bottom(board)


def test_updates_from_many_threads_keep_the_figure_whole(board):
    session = board.session
    session.past.mine.extend(runs(20))
    threads = [
        threading.Thread(target=lambda: [board.refresh() for _ in range(5)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for i in range(20):
        board._on_sample(i * 0.1, 500 * MB)
    for t in threads:
        t.join()
    assert [row["n"] for row in board.chart._rows] == list(range(1, 21))


def test_one_dashboard_per_kernel_also_across_reload(shell):
    dashboard_module.close()
    first = dashboard(mode="widget")
    assert dashboard() is first and keras_nbguard.get_session().dashboard is first
    figure = first.chart
    shell.run_line_magic("reload_ext", "keras_nbguard")
    again = dashboard()
    assert again is first and again.chart is figure
    assert again.session is keras_nbguard.get_session()
    again.detach()


def test_detach_leaves_no_hooks_and_follow_reattaches(shell):
    dashboard_module.close()
    board = dashboard(mode="static")
    session = keras_nbguard.get_session()
    board.detach()
    assert board._after_cell not in shell.events.callbacks["post_run_cell"]
    assert not session.events.subscribed("record", board._on_record)
    dashboard_module.follow(session)
    assert board._after_cell in shell.events.callbacks["post_run_cell"]
    assert session.dashboard is board
    board.detach()


def test_keras_nbguard_dashboard_is_the_kernels_dashboard(shell):
    dashboard_module.close()
    board = keras_nbguard.dashboard(mode="static")
    assert board.mode == "static" and board.widget is None
    assert "models still referenced" in repr(board)
    board.detach()


def test_closing_the_kernels_dashboard_removes_its_hooks_and_the_next_is_new(shell):
    board = keras_nbguard.dashboard(mode="static")
    session = keras_nbguard.get_session()
    dashboard_module.close()
    assert board._after_cell not in shell.events.callbacks["post_run_cell"]
    assert not session.events.subscribed("record", board._on_record)
    assert session.dashboard is None
    again = keras_nbguard.dashboard(mode="static")
    assert again is not board and session.dashboard is again
    dashboard_module.close()


# -- without a widget frontend ---------------------------------------------------------------
def test_frontend_detection(monkeypatch):
    class Kernelled:
        kernel = object()

    monkeypatch.delenv("KERAS_NBGUARD_DASHBOARD", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("VSCODE_PID", raising=False)
    assert widget_frontend(None)[0] is False
    assert widget_frontend(object())[0] is False  # terminal IPython: no kernel
    assert widget_frontend(Kernelled()) == (False, widget_frontend(Kernelled())[1])
    monkeypatch.setenv("JPY_SESSION_NAME", "/x/demo.ipynb")
    assert widget_frontend(Kernelled()) == (True, "kernel started by a Jupyter server")
    monkeypatch.setenv("KERAS_NBGUARD_DASHBOARD", "static")
    assert widget_frontend(Kernelled())[0] is False


def test_model_lines_flag_stale_models_first_with_size_and_paths():
    stale = Leak(
        "models[0]",
        ("models[0]", "Out[3].model"),
        "sequential_1",
        "Sequential",
        10,
        40 * 2**20,
        0,
        "mlp",
        1,
        True,
        "from run 'mlp' #1; the latest is #2",
    )
    current = dataclasses.replace(
        stale, path="model", paths=("model",), model_name="sequential", run_number=2, stale=False
    )
    lines = model_lines(LeakReport((stale, current), (current,)))
    assert lines == [
        "STALE sequential_1 (40.0 MiB weights, mlp #1): models[0], Out[3].model",
        "current sequential (40.0 MiB weights, mlp #2): model",
        "1 more alive that nothing you can name holds (garbage the next clear collects, or "
        "held by the framework's own objects: %nbguard leaks collects first and says which): "
        "sequential (40.0 MiB weights, mlp #2)",
    ]
    # after a collection, none of them is garbage (a walkthrough's `f = model.train_function`
    # kept one through a dozen clears under "gone at the next clear")
    collected = model_lines(LeakReport((stale, current), (current,), collected=True))
    assert collected[-1].startswith(
        "1 more alive that nothing you can name holds (the framework's own objects hold them): "
    )
    # paths you can type come first (one only words can say took a typeable one's place), as
    # many and in the same words as %nbguard leaks lists them (they had rules of their own)
    from keras_nbguard.models.records import UNTYPEABLE

    words = f"kept._compiled_trainable_state — a _DictWrapper … {UNTYPEABLE}"
    held = dataclasses.replace(current, paths=("model", words, "a", "b", "c"))
    assert model_lines(LeakReport((held,)))[0].endswith(": model, a, b and 2 more")
    assert "sequential (Sequential, 40.0 MiB weights, 'mlp' #2): model, a, b and 2 more" in (
        "\n".join(LeakReport((held,)).lines())
    )
    only = dataclasses.replace(current, paths=(words,))
    assert model_lines(LeakReport((only,)))[0].endswith(f": {words}")


@pytest.mark.kernel
def test_nbclient_execution_shows_the_static_view_updated_by_display_id(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(o.get("output_type") != "error" for c in code for o in c.outputs)
    (shown,) = code[2].outputs
    assert "application/vnd.jupyter.widget-view+json" not in shown["data"]
    markup, text = shown["data"]["text/html"], shown["data"]["text/plain"]
    assert "keras-nbguard-static" in markup and "3 run(s)" in markup and "<svg" in markup
    assert re.search(r"mlp: (⚠ )?RSS", text) and "per run over runs 2–3" in text
    assert re.search(r"current sequential(_\d+)? \(.*mlp #3\): model, history.model", text)
    assert "Loading widget" not in markup + text
    assert Session  # the notebook ran in its own kernel: nothing leaks into this process


KERNEL = """
import json, sys, keras_nbguard
from keras_nbguard.board.figures import figure_data, trend_text
keep = []
for _ in range(int(sys.argv[1])):
    with keras_nbguard.track("mlp", quiet=True):
        keep.append(b"x" * (int(sys.argv[2]) * 2**20))  # touched: RSS grows by that much
runs = keras_nbguard.runs("mlp")
print(json.dumps({"trend": trend_text(runs, "mlp"), "numbers": [r.run_number for r in runs],
                  "restarts": figure_data(runs)["restarts"]}))
"""


def test_trend_is_the_current_kernels_over_two_real_processes(tmp_path):
    """Two kernel processes of one notebook, one history: the first grew 60 MiB a run and its
    RSS ended far above the second's start; the second's trend is its own +8 MiB a run."""
    env = {
        **os.environ,
        "KERAS_NBGUARD_DB": str(tmp_path / "h.db"),
        "KERAS_NBGUARD_NOTEBOOK": str(tmp_path / "same.ipynb"),
        "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    }

    def kernel(runs: int, mb: int) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", KERNEL, str(runs), str(mb)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    kernel(3, 60)
    second = kernel(6, 8)
    assert second["numbers"] == list(range(1, 10))  # numbering goes on across the restart
    # the earlier kernel: shown, its line broken and marked between mlp #3 and mlp #4
    assert [(m["label"], m["x"]) for m in second["restarts"]] == [("mlp", 3.5)]
    words = second["trend"]
    assert "per run over runs 5–9" in words, words  # the first kernel is not mixed in
    per_run = float(words.split("RSS left ")[1].split(" MiB")[0])
    assert 6 <= per_run <= 10, words  # mixed in, the restart's drop would make it negative


def test_a_sweeps_points_are_lines_of_their_own():
    records = [
        make_record(label="sweep", run_number=n, params={"units": u})
        for n, u in enumerate((32, 64, 32, 64), 1)
    ]
    data = figure_data(records)
    fits = {t["label"]: t["x"] for t in data["traces"] if t["uid"].startswith("fit:fit:")}
    assert fits == {"sweep units=32": [1, 3], "sweep units=64": [2, 4]}
    assert data["trends"][0].startswith("sweep units=64")  # the last run's point first


def test_a_labels_isolated_runs_are_a_line_of_their_own():
    """A label run here, then with --isolate, then here: the isolated run's RSS is its child's,
    and one line joined it to the kernel's (down 40 MiB and up again, though the kernel never
    moved)."""
    here = [make_record(run_number=n, rss_after=(800 + n) * 2**20) for n in (1, 2, 4, 5)]
    isolated = make_record(run_number=3, rss_after=760 * 2**20, isolated="fresh process")
    records = [*here[:2], isolated, *here[2:]]
    data = figure_data(records)
    rss = {t["label"]: t["x"] for t in data["traces"] if t["uid"].startswith("rss:after:")}
    assert rss == {"mlp": [1, 2, 4, 5], "mlp (isolated)": [3]}, rss
    words = trend_text(records, "mlp")  # the kernel's runs, 2, 4 and 5, after the warm-up
    assert words.startswith("mlp: RSS left +") and "per run over runs 2–5" in words, words


def test_a_sweep_reads_as_one_table_that_fills_in():
    from keras_nbguard.board.sweep_table import SweepTable

    points = [{"units": u} for u in (16, 32, 64, 128)]
    table = SweepTable("mlp", points)
    assert table.summary() == "sweep mlp: 0 done, 0 running, 4 left of 4"
    table.started(points[0])
    table.started(points[1])
    table.finished(
        points[0], make_record(label="mlp", run_number=1, fit_seconds=2.0, params=points[0])
    )
    table.finished(
        points[1],
        make_record(
            label="mlp",
            run_number=2,
            fit_seconds=1.5,
            params=points[1],
            findings=("retracing: 9 traces",),
        ),
    )
    table.started(points[2])
    done = table.summary()
    assert done.startswith("sweep mlp: 2 done, 1 running, 1 left of 4, about ") and "left" in done
    rows = table.rows()  # the running point first, then the latest ended
    assert [(r[1], r[2]) for r in rows] == [
        ("units=64", "running"),
        ("units=32", "ok"),
        ("units=16", "ok"),
    ]
    assert rows[1][0] == "★" and rows[1][5] == "retracing: 9 traces"  # the fastest, marked
    table.finished(points[2], status="died")  # nothing came back
    markup = table.bundle()["text/html"]
    assert markup.count("<tr>") == 4 and "died" in markup and "%nbguard runs" in markup


def test_the_figure_sends_only_new_samples_and_keeps_its_state_whole(board):
    chart = board.chart
    messages = sent(board)
    chart.set_live([0.0, 0.1], [500.0, 501.0], [], "running: mlp #1")
    chart.set_live([0.0, 0.1, 0.2], [500.0, 501.0, 502.0], [0.4], "running: mlp #1")
    chart.set_live([0.0, 0.1, 0.2], [500.0, 501.0, 502.0], [0.4], "running: mlp #1")  # no change
    assert [(m["start"], m["t"], m["epochs"]) for m in messages] == [
        (0, [0.0, 0.1], []),
        (2, [0.2], [0.4]),
    ]
    chart.set_live([0.0, 0.2], [501.0, 502.0], [0.4], "running: mlp #1")  # halved: all again
    assert (messages[-1]["start"], messages[-1]["t"]) == (0, [0.0, 0.2])
    # a reloaded page asks for the state: it is the whole figure, never sent as a trait change
    state = chart.get_state()
    assert state["live"]["t"] == [0.0, 0.2] and state["live"]["epochs"] == [0.4]
    assert all(m["type"] in ("live", "rows") for m in messages)


def test_the_header_says_what_its_trends_are_of():
    """`RSS left +2.6 MiB per run over runs 2–5` beside RSS afters whose least squares read
    +2.1: a walkthrough could not tell where the figure came from. The key says it."""
    from keras_nbguard.board.markup import header_html

    shown = header_html({"failed": 0, "trends": ["mlp: RSS left +2.6 MiB per run"]}, 5, "")
    assert "trends: a robust line (Theil–Sen) through the runs after the first" in shown
    assert "RSS left: a run's RSS after, or the next run's RSS before where lower" in shown
    assert "(the latest run's: its RSS after, less what the collections after" in shown


def test_a_sweeps_time_left_falls_as_its_last_point_runs(monkeypatch):
    """JupyterLab, `--sweep "units=8,16,32" --parallel 2`: with only units=32 left running, the
    table read 5.0, 6.0, then 7.0 s left, 4 s apart (the sweep's time over the points ended,
    which grows with the clock). Its ★ legend showed while no point had ended."""
    from keras_nbguard.board import sweep_table
    from keras_nbguard.board.sweep_table import SweepTable

    clock = [100.0]
    monkeypatch.setattr(sweep_table.time, "monotonic", lambda: clock[0])
    points = [{"units": u} for u in (8, 16, 32)]
    table = SweepTable("mlp", points)
    table.started(points[0])
    table.started(points[1])
    assert "★" not in table.bundle()["text/html"]  # nothing ended: no fastest to mark
    clock[0] = 104.0
    for point in points[:2]:
        table.finished(point, make_record(label="mlp", fit_seconds=3.0, params=point))
    table.started(points[2])
    left = []
    for now in (105.0, 106.0, 107.0):
        clock[0] = now
        left.append(table.estimate())
    assert left == [3.0, 2.0, 1.0], left  # each took 4 s: what the running one has left
    assert "★ the fastest fit" in table.bundle()["text/html"]
    # a point that fit nothing says so (it read a bare "n/a" in the fit column)
    table.finished(points[2], make_record(label="mlp", fit_seconds=None, fits=(), params=points[2]))
    assert ("units=32", "ok", "no fit") in [row[1:4] for row in table.rows()]
