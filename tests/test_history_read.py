"""Reading the history for the page: bounded work per run, whatever the notebook's size."""

from __future__ import annotations

import dataclasses

from helpers import make_record

from keras_nbguard.server import page
from keras_nbguard.server.history import by_notebook, read_runs
from keras_nbguard.store.history_db import RunKey, Store, start_row


def stored(tmp_path, count: int) -> str:
    path = str(tmp_path / "runs.sqlite")
    store = Store(path)
    key = RunKey("nb.ipynb", None, "k", 1, 1.0)
    for i in range(count):
        record = dataclasses.replace(
            make_record(run_number=i + 1), started_at=10.0 + i, notebook="nb.ipynb"
        )
        store.run_started(start_row(f"r{i}", key, "mlp", i + 1, record.started_at, 1))
        store.run_finished(f"r{i}", record)
    store.flush(10)
    store.close()
    return path


def test_the_page_reads_records_without_their_rss_series(tmp_path):
    path = stored(tmp_path, 3)
    alive = lambda pid, started: False  # noqa: E731
    light = read_runs(path, alive=alive, samples=False)
    full = read_runs(path, alive=alive)
    assert [r.record.rss_samples for r in light] == [(), (), ()]
    assert all(len(r.record.rss_samples) == 2 for r in full)
    assert [r.record.rss_after for r in light] == [r.record.rss_after for r in full]


def test_the_table_shows_the_newest_runs_and_says_how_many_there_are(tmp_path, monkeypatch):
    monkeypatch.setattr(page, "TABLE_ROWS", 2)
    runs = read_runs(stored(tmp_path, 5), alive=lambda pid, started: False, samples=False)
    markup = page.render(by_notebook(runs), db="db", message=None, plotly_url="p.js")
    assert "the last 2 of 5 runs" in markup
    assert markup.count("<tr class='nbguard-run'") == 2
    assert '"runs": 5' in markup  # the plots still have every run
