"""Export: %nbguard export FILE.csv / FILE.json, keras_nbguard.runs_frame(), and %nbguard config
--db."""

from __future__ import annotations

import csv
import json
import math
import sqlite3
import sys

import pytest
from IPython.core.error import UsageError

import keras_nbguard

FIT_CELL = "%%kerasrun --label mlp\nmodel = make_model()\nmodel.fit(x, y, epochs=2, verbose=0)\n"


def _two_runs_and_a_failure(shell) -> None:
    for _ in range(2):
        assert shell.run_cell(FIT_CELL).success
    assert not shell.run_cell("%%kerasrun --label broken\nraise ValueError('bad batch')").success


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_export_writes_one_row_per_run_with_unknowns_left_empty(keras_shell, tmp_path, capsys):
    _two_runs_and_a_failure(keras_shell)
    target = tmp_path / "runs.csv"
    keras_shell.run_line_magic("nbguard", f"export {target}")
    assert "wrote 3 run(s)" in capsys.readouterr().out

    rows = _rows(target)
    records = keras_nbguard.runs()
    assert [(r["label"], r["run_number"], r["status"]) for r in rows] == [
        ("mlp", "1", "ok"),
        ("mlp", "2", "ok"),
        ("broken", "1", "error"),
    ]
    for row, record in zip(rows, records, strict=True):
        assert float(row["wall_seconds"]) == pytest.approx(record.wall_seconds)
        assert int(row["rss_peak"]) == record.rss_peak
        assert row["kernel_id"] == record.kernel_id
    assert float(rows[1]["fit_seconds"]) == pytest.approx(records[1].fit_seconds)
    assert rows[1]["epochs"] == "2" and len(rows[1]["epoch_seconds"].split(";")) == 2
    assert float(rows[1]["delta_fit_seconds"]) == pytest.approx(records[1].delta_fit_seconds)
    # no GPU here: the GPU figures are unknown, so empty (not 0), and the reason is given
    assert rows[0]["gpu_tf_peak"] == "" and rows[0]["gpu_nvml_used"] == ""
    assert rows[0]["gpu_note"]
    # the failing run has no fit: no fit time, no epochs — and its error is kept
    assert rows[2]["fit_seconds"] == "" and rows[2]["epochs"] == ""
    assert "bad batch" in rows[2]["error"]


@pytest.mark.slow
def test_export_narrows_by_label(keras_shell, tmp_path):
    _two_runs_and_a_failure(keras_shell)
    keras_shell.run_line_magic("nbguard", f"export {tmp_path / 'mlp.csv'} --label mlp")
    assert [r["label"] for r in _rows(tmp_path / "mlp.csv")] == ["mlp", "mlp"]


def test_export_mistakes_are_usage_errors_in_plain_words(shell, tmp_path):
    with pytest.raises(UsageError, match="needs a file name"):
        shell.run_line_magic("nbguard", "export")
    with pytest.raises(UsageError, match="does not exist"):
        shell.run_line_magic("nbguard", f"export {tmp_path / 'no' / 'such' / 'runs.csv'}")
    with pytest.raises(UsageError, match="is a folder"):
        shell.run_line_magic("nbguard", f"export {tmp_path}")
    with pytest.raises(UsageError, match="takes nothing after its name but its options"):
        shell.run_line_magic("nbguard", "leaks somefile.csv")


def test_export_json_is_json_with_the_csv_columns_numbers_and_null_for_unknowns(
    shell, tmp_path, capsys
):
    assert shell.run_cell("%%kerasrun --label j --quiet\nz = 1").success
    assert not shell.run_cell("%%kerasrun --label '=j' --quiet\nraise ValueError('bad')").success
    shell.run_line_magic("nbguard", f"export {tmp_path / 'runs.csv'}")
    shell.run_line_magic("nbguard", f"export {tmp_path / 'runs.json'}")
    assert f"wrote 2 run(s) to {tmp_path / 'runs.json'}" in capsys.readouterr().out

    text = (tmp_path / "runs.json").read_text(encoding="utf-8")
    assert not text.startswith("notebook,")  # not the CSV under another name
    runs = json.loads(text)
    rows = _rows(tmp_path / "runs.csv")
    assert [list(run) for run in runs] == [list(row) for row in rows]  # the same columns
    for run, row in zip(runs, rows, strict=True):
        for column, value in run.items():
            cell = row[column]
            if value is None:  # unknown: null here, an empty cell there
                assert cell == "", (column, cell)
            elif isinstance(value, bool):
                assert cell == str(value), column
            elif isinstance(value, int | float):  # numbers as numbers
                assert float(cell) == pytest.approx(value), column
            else:
                assert isinstance(value, str) and cell.lstrip("'") == value, column
    ok, failed = runs
    assert (ok["label"], ok["run_number"], ok["status"]) == ("j", 1, "ok")
    assert isinstance(ok["rss_peak"], int) and isinstance(ok["wall_seconds"], float)
    assert ok["fit_seconds"] is None and ok["error"] is None and ok["isolated"] is False
    assert failed["label"] == "=j" and "bad" in failed["error"]  # text as it is (no ' before =)


def test_export_refuses_a_file_that_is_neither_csv_nor_json(shell, tmp_path):
    assert shell.run_cell("%%kerasrun --label e --quiet\nz = 1").success
    for name in ("runs.txt", "runs.xlsx", "runs"):
        target = tmp_path / name
        with pytest.raises(UsageError, match=r"writes \.csv \(CSV\) or \.json \(JSON\) files"):
            shell.run_line_magic("nbguard", f"export {target}")
        with pytest.raises(ValueError, match=f"give a file name such as {tmp_path / 'runs'}.csv"):
            keras_nbguard.export(str(target))
        assert not target.exists()
    assert keras_nbguard.export(str(tmp_path / "RUNS.JSON")) == 1  # the ending in any case
    assert json.loads((tmp_path / "RUNS.JSON").read_text())[0]["label"] == "e"


@pytest.mark.slow
def test_runs_frame_has_real_columns_and_nan_for_unknowns(keras_shell):
    _two_runs_and_a_failure(keras_shell)
    frame = keras_nbguard.runs_frame()
    assert list(frame["status"]) == ["ok", "ok", "error"]
    assert frame["fit_seconds"].iloc[0] > 0 and math.isnan(frame["fit_seconds"].iloc[2])
    assert frame["gpu_tf_peak"].isna().all()
    assert str(frame["started_at"].dt.tz) == "UTC"
    assert frame["started_at"].is_monotonic_increasing
    assert list(keras_nbguard.runs_frame("broken")["label"]) == ["broken"]


def test_runs_frame_without_pandas_says_how_to_get_it(shell, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an environment without pandas sees
    with pytest.raises(ImportError, match="pip install pandas"):
        keras_nbguard.runs_frame()


def test_config_db_moves_the_history_to_another_file(shell, tmp_path, history_database):
    assert shell.run_cell("%%kerasrun --label before\npass").success
    other = tmp_path / "elsewhere.sqlite"
    table = shell.run_line_magic("nbguard", f"config --db {other}")
    assert ("history db", str(other)) in table.rows
    assert shell.run_cell("%%kerasrun --label after\npass").success
    keras_nbguard.get_session().store.flush()

    def labels(path) -> list[str]:
        with sqlite3.connect(path) as db:
            return [row[0] for row in db.execute("SELECT label FROM runs ORDER BY started_at")]

    assert labels(other) == ["after"]
    assert labels(history_database) == ["before"]
    # this kernel's runs stay visible; the status says where history goes now
    assert [r.label for r in keras_nbguard.runs()] == ["before", "after"]
    assert ("history db", str(other)) in shell.run_line_magic("nbguard", "status").rows


def test_config_db_in_memory_keeps_nothing_on_disk(shell, tmp_path):
    table = shell.run_line_magic("nbguard", "config --db :memory:")
    assert ("history db", "in memory (not kept)") in table.rows
    assert shell.run_cell("%%kerasrun --label ephemeral\npass").success
    assert [r.label for r in keras_nbguard.runs()] == ["ephemeral"]


def test_export_never_overwrites_unless_forced_and_never_the_history_or_a_notebook(
    shell, tmp_path, history_database, capsys
):
    assert shell.run_cell("%%kerasrun --label e --quiet\nz = 1").success
    keras_nbguard.get_session().store.flush()
    mine = tmp_path / "mine.csv"
    mine.write_text("my own data\n")
    with pytest.raises(UsageError, match="exists already; add --force"):
        shell.run_line_magic("nbguard", f"export {mine}")
    assert mine.read_text() == "my own data\n"
    with pytest.raises(ValueError, match="exists already"):
        keras_nbguard.export(str(mine))
    shell.run_line_magic("nbguard", f"export {mine} --force")
    assert [r["label"] for r in _rows(mine)] == ["e"]
    assert keras_nbguard.export(str(mine), force=True) == 1

    notebook = tmp_path / "analysis.ipynb"
    notebook.write_text('{"cells": []}')
    history_before = history_database.read_bytes()
    for target in (history_database, notebook, tmp_path / "new.ipynb"):
        with pytest.raises(UsageError, match="won't export"):
            shell.run_line_magic("nbguard", f"export {target} --force")
        with pytest.raises(ValueError, match="won't export"):
            keras_nbguard.export(str(target), force=True)
    link = tmp_path / "innocent.csv"
    link.symlink_to(notebook)  # a link to the notebook is the notebook
    with pytest.raises(ValueError, match="notebook"):
        keras_nbguard.export(str(link), force=True)
    other_db = tmp_path / "other.sqlite"
    sqlite3.connect(other_db).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ValueError, match="SQLite database"):
        keras_nbguard.export(str(other_db), force=True)
    assert notebook.read_text() == '{"cells": []}'
    assert history_database.read_bytes() == history_before
    assert not (tmp_path / "new.ipynb").exists()
    assert shell.run_cell("%%kerasrun --label after --quiet\nz = 1").success  # history intact
    assert [r.label for r in keras_nbguard.runs()] == ["e", "after"]
    assert not keras_nbguard.get_session().store.in_memory


def test_export_writes_any_label_as_text(shell, tmp_path):
    with keras_nbguard.track("lone \udcff"):
        pass
    keras_nbguard.export(str(tmp_path / "odd \udcff.csv"))
    assert [r["label"] for r in _rows(tmp_path / "odd \udcff.csv")] == ["lone \\udcff"]


def test_export_json_gives_each_epochs_seconds_as_a_list(tmp_path):
    """A walkthrough read `"epoch_seconds": "1.82408;0.973484"` in runs.json: the CSV cell's
    text, where JSON holds a list of numbers."""
    from helpers import make_record

    from keras_nbguard.records.calls import FitRecord
    from keras_nbguard.store.exporting import write_runs

    fit = FitRecord(seconds=2.8, epochs=2, epoch_seconds=(1.82408, 0.973484))
    write_runs([make_record(fits=(fit,)), make_record(run_number=2, fits=())], tmp_path / "r.json")
    first, second = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert first["epoch_seconds"] == [1.82408, 0.973484] and second["epoch_seconds"] is None


def test_export_of_a_label_with_no_run_writes_nothing_and_names_the_labels(shell, tmp_path):
    """`%nbguard export --label X runs2.csv` wrote a file of headers alone and said `wrote 0
    run(s)` where no run was labelled X (a typo)."""
    assert shell.run_cell("%%kerasrun --label mlp --quiet\nz = 1").success
    with pytest.raises(UsageError, match=r"no run labelled 'X' \(the labels: mlp\)"):
        shell.run_line_magic("nbguard", f"export --label X {tmp_path / 'r.csv'}")
    assert not (tmp_path / "r.csv").exists()
