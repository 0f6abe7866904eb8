"""Hostile values stay inert: every stored text set to markup or a formula, then the history page
(rendered and loaded in Chromium with its plots), the dashboard's figure data and the CSV export.

A label is a cell's first line by default, so running someone else's notebook can plant one; the
database is a file anyone with the account can write.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import os
from pathlib import Path

import pytest
from helpers import make_record
from jupyter_lab import CHROMIUM, chromium_page

from keras_nbguard.board.figures import figure_data, hover_text
from keras_nbguard.records.run import GpuReading
from keras_nbguard.server.history import StoredRun
from keras_nbguard.server.page import render
from keras_nbguard.store.exporting import write_runs

PWN = "window.__pwned = (window.__pwned || 0) + 1"
LABEL = f'<a href="https://evil.example/">click</a><img src=x onerror="{PWN}">'
STATUS = f"ok' onmouseover='{PWN}' x='"
ERROR = f"</td><script>{PWN}</script>"


def hostile_record(**changes):
    record = make_record(
        label=LABEL,
        error=ERROR,
        notebook=f"<b>{LABEL}</b>",
        gpu=GpuReading(reason=f"<script>{PWN}</script>"),
    )
    return dataclasses.replace(record, status=STATUS, **changes)


def page_html(plotly_url: str) -> str:
    runs = [
        StoredRun(
            f"r{i}",
            f"<i>nb</i>{LABEL}",
            f"k'><script>{PWN}</script>",
            hostile_record(run_number=i),
            1,
            1.0,
            STATUS,
        )
        for i in (1, 2)
    ]
    return render({runs[0].notebook: runs}, db=f"<db>{LABEL}", message=None, plotly_url=plotly_url)


def test_the_page_markup_holds_no_live_element_from_the_data():
    markup = page_html("plotly.js")
    for live in ('<a href="https://evil', "<img", "<script>window", "onmouseover='", "<b><a"):
        assert live not in markup, live
    assert "status-unknown" in markup  # the status is not a class name


def test_plot_names_and_hover_texts_are_text_not_markup():
    data = figure_data([hostile_record(run_number=1), hostile_record(run_number=2)])
    for trace in data["traces"]:
        assert "<" not in trace["name"], trace["name"]
        for text in trace["text"] or ():
            markup = text.replace("<b>", "").replace("</b>", "").replace("<br>", "")
            assert "<" not in markup, text
    assert "&lt;a href" in hover_text(hostile_record())


def test_csv_cells_that_would_run_as_formulas_are_neutralised(tmp_path):
    records = [
        make_record(
            label='=HYPERLINK("https://evil.example","x")',
            error="@SUM(1+1)",
            notebook="+cmd|' /C calc'!A0",
        ),
        make_record(label="\tlabel", run_number=2, error="-2+3"),
    ]
    path = tmp_path / "runs.csv"
    write_runs(records, path)
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert rows[0]["label"] == '\'=HYPERLINK("https://evil.example","x")'
    assert rows[0]["error"] == "'@SUM(1+1)" and rows[0]["notebook"].startswith("'+cmd")
    assert rows[1]["label"] == "'\tlabel" and rows[1]["error"] == "'-2+3"
    assert rows[0]["run_number"] == "1" and rows[0]["wall_seconds"][0].isdigit()  # numbers stay


@pytest.mark.skipif(
    not os.path.exists(CHROMIUM) or importlib.util.find_spec("playwright") is None,
    reason=f"needs {CHROMIUM} and playwright",
)
@pytest.mark.browser
def test_in_chromium_nothing_runs_and_no_link_appears(tmp_path):
    package = Path(importlib.util.find_spec("plotly").origin).parent
    plotly = package / "package_data" / "plotly.min.js"
    page_file = tmp_path / "history.html"
    page_file.write_text(page_html(plotly.as_uri()), encoding="utf-8")
    with chromium_page() as page:
        page.goto(page_file.as_uri())
        page.wait_for_function(
            "() => document.querySelector('.js-plotly-plot .legend')", timeout=30_000
        )
        cell = page.locator("td.status-unknown").first
        cell.hover()
        page.locator(".js-plotly-plot .legendtoggle").first.hover(force=True)
        page.evaluate(
            "() => { const gd = document.querySelector('.js-plotly-plot');"
            " Plotly.Fx.hover(gd, [{curveNumber: 0, pointNumber: 0}]); }"
        )
        page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
        hover = page.evaluate("document.querySelector('.hoverlayer').textContent")
        assert "<img src=x" in hover  # the label, as text
        assert page.evaluate("window.__pwned || 0") == 0
        assert page.evaluate("document.querySelectorAll('a[href*=\"evil\"]').length") == 0
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        legend = page.evaluate("document.querySelector('.js-plotly-plot .legend').textContent")
        assert "<a href=" in legend  # shown as the text it is
        assert page.errors == []
