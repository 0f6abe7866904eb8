"""The dashboard in a real browser: JupyterLab (comms on and off subshells) and Notebook 7.

Each test starts a real server on 127.0.0.1, opens ``notebooks/dashboard_demo.ipynb`` in headless
Chromium (Playwright), runs all cells (``%load_ext``, the dashboard, three ``%%kerasrun`` cells)
and reads the plot's data from the page. Skipped only when ``/usr/bin/chromium`` or Playwright is
missing. About 40 s a test on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from jupyter_lab import CHROMIUM, chromium_page, jupyter_server, kernel_eval, run_all, wait_idle

ROOT = Path(__file__).parent.parent
NOTEBOOK = ROOT / "notebooks" / "dashboard_demo.ipynb"
# The README's screenshot is remade only when asked (KERAS_NBGUARD_SCREENSHOTS=1), so that a
# test run leaves the working tree as it found it.
SCREENSHOT = ROOT / "docs" / "dashboard.png"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="playwright is not installed (pip install -e '.[test]')",
    ),
]
# The plot's traces: ``meta`` is our trace key ("fit:fit:mlp", "rss:after:mlp", ...)
TRACES = """() => [...(document.querySelector('.js-plotly-plot')?.data || [])].map(t => ({
    meta: t.meta, y: Array.from(t.y || []).filter(v => v !== null && !Number.isNaN(v))}))"""
# Page errors of the frontend itself, seen with a plain "1+1" notebook and no keras_nbguard too
UPSTREAM_ERRORS = {"notebook": ("Cannot read properties of undefined (reading 'schema')",)}
MODELS = "() => document.querySelector('.nbguard-models')?.innerText || ''"
REPORTS = "() => document.querySelector('.nbguard-reports')?.innerText || ''"


def points(page, key: str) -> int:
    return sum(len(t["y"]) for t in page.evaluate(TRACES) if t["meta"] == key)


SLOW_RUN = """%%kerasrun --label slow --quiet
import time
import keras
class Slow(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.4)
make_model().fit(x, y, epochs=12, verbose=0, callbacks=[Slow()])
"""
# a stop pressed at the second epoch's end, as the stop button raises it (at the first, the fit
# has no epoch time yet: a fit that failed at once, with no time of its own)
STOPPED_FIT = """import keras
class Stop(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch:
            raise KeyboardInterrupt
get_ipython().run_cell('%%kerasrun --label mlp --quiet\\n'
                       'make_model().fit(x, y, epochs=3, verbose=0, callbacks=[Stop()])')
"""
TOP = "() => document.querySelector('.widget-vbox .widget-html')?.innerText || ''"
NOTEBOOK_WIDGET = "window.jupyterapp.shell.currentWidget"


def check_live_and_queued(page, comms: str) -> None:
    """While a run goes, the live panels move; a reset clicked then is queued (comms on a
    subshell) or waits in the kernel's queue (comms disabled) — never run in the middle."""
    page.evaluate(
        """code => { window.nbguardDone = false;
        window.jupyterapp.shell.currentWidget.sessionContext.session.kernel
            .requestExecute({code, store_history: false}).done
            .then(() => { window.nbguardDone = true; }); }""",
        SLOW_RUN,
    )
    page.wait_for_function(f"() => ({TOP})().includes('running: slow #1')", timeout=30_000)
    page.wait_for_function(
        f"() => ({TRACES})().some(t => t.meta === 'live:epochs' && t.y.length >= 2)", timeout=30_000
    )
    assert not page.evaluate("window.nbguardDone")  # seen while the cell was busy
    page.get_by_role("button", name="Clear session", exact=True).click()
    if comms == "perCommTarget":
        page.wait_for_function(
            f"() => ({REPORTS})().includes(\"queued: runs when 'slow' ends\")", timeout=20_000
        )
        assert not page.evaluate("window.nbguardDone")
    page.wait_for_function("window.nbguardDone", timeout=60_000)
    page.wait_for_function(
        f"() => ({REPORTS})().includes('clear_session: cleared')", timeout=20_000
    )
    assert points(page, "fit:fit:slow") == 1


def check_dashboard(page, server, app: str, screenshot: Path | None) -> str:
    """Open and run the notebook, check the plot and a reset button; returns which was clicked."""
    page.goto(server.page_url(NOTEBOOK.name, app))
    run_all(page, timeout=150)
    page.wait_for_function(
        f"() => ({TRACES})().some(t => t.meta === 'fit:fit:mlp' && t.y.length === 3)",
        timeout=30_000,
    )
    assert points(page, "fit:fit:mlp") == 3
    for series in ("after", "peak", "before"):
        assert points(page, f"rss:{series}:mlp") == 3
    assert points(page, "live:rss") > 0  # the last run's RSS over time
    assert "no GPU" in page.inner_text(".js-plotly-plot")  # a note, not an empty plot
    assert "Loading widget" not in page.inner_text("body")
    assert "sequential" in page.evaluate(MODELS)
    assert "True" in kernel_eval(page, "print('model' in globals())")
    if screenshot is not None:
        screenshot.parent.mkdir(exist_ok=True)
        page.locator(".widget-vbox").first.screenshot(path=str(screenshot))
    # A fit stopped part way: chart.js draws its time as a red mark, not on the label's line
    # beside the whole fits (where it read as a fast run)
    kernel_eval(page, STOPPED_FIT, timeout=60)
    page.wait_for_function(
        f"() => ({TRACES})().some(t => t.meta === 'fit:not ok' && t.y.length === 1)",
        timeout=30_000,
    )
    assert points(page, "fit:fit:mlp") == 3
    # Keep the last run's model under another name, then run again: `kept` is now stale
    # (from mlp #3 while mlp #4 is the latest run), the one model "Free flagged models" must free.
    kernel_eval(
        page,
        "kept = model\nget_ipython().run_cell('%%kerasrun --label mlp --quiet\\n"
        "model = make_model()\\nmodel.fit(x, y, epochs=1, verbose=0)\\n')",
        timeout=60,
    )
    assert "True" in kernel_eval(page, "print('kept' in globals())")
    page.get_by_role("button", name="Free flagged", exact=True).click()
    page.wait_for_function(f"() => ({REPORTS})().includes('free')", timeout=30_000)
    page.wait_for_function(f"() => !({MODELS})().includes('kept')", timeout=30_000)
    assert "False" in kernel_eval(page, "print('kept' in globals())")
    assert "True" in kernel_eval(page, "print('model' in globals())")  # current: left alone
    clicked = "free"
    assert "Loading widget" not in page.inner_text("body")
    assert [e for e in page.errors if e not in UPSTREAM_ERRORS.get(app, ())] == []
    return clicked


@pytest.mark.parametrize("comms", ["disabled", "perCommTarget"])
def test_dashboard_in_jupyterlab(tmp_path, comms):
    settings = {"@jupyterlab/apputils-extension/kernels-settings": {"commsOverSubshells": comms}}
    # tall enough for the whole dashboard, the README's screenshot
    with jupyter_server(tmp_path, "lab", settings) as server, chromium_page(1300, 2000) as page:
        shutil.copy(NOTEBOOK, server.root / NOTEBOOK.name)
        try:
            shot = (
                SCREENSHOT
                if os.environ.get("KERAS_NBGUARD_SCREENSHOTS") == "1"
                else tmp_path / "dashboard.png"
            )
            check_dashboard(page, server, "lab", shot if comms == "perCommTarget" else None)
            check_live_and_queued(page, comms)
            assert [e for e in page.errors] == []
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(server.log_tail())
            raise


@pytest.mark.skipif(
    importlib.util.find_spec("notebook") is None,
    reason="Notebook 7 is not installed (pip install notebook)",
)
def test_dashboard_in_notebook7(tmp_path):
    with jupyter_server(tmp_path, "notebook") as server, chromium_page() as page:
        shutil.copy(NOTEBOOK, server.root / NOTEBOOK.name)
        try:
            check_dashboard(page, server, "notebook", None)
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(server.log_tail())
            raise


def open_notebook(server, page, name: str, cells: tuple[str, ...]) -> None:
    """Write ``cells`` as the notebook ``name``, open it, its kernel idle, the file browser
    closed (the notebook as wide as the window allows)."""
    write_notebook(server.root / name, cells)
    page.goto(server.page_url(name))
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    wait_idle(page, 120)
    page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")


def write_notebook(path: Path, cells: tuple[str, ...]) -> None:
    """A notebook of code cells, not run yet."""
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for i, source in enumerate(cells)
        ],
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
    }
    path.write_text(json.dumps(notebook))


LONG_PATH = "kept_by_a_holder_whose_name_runs_well_past_the_width_of_a_narrow_output_area"
FIRST_PAINT_CELLS = (
    "%load_ext keras_nbguard\nimport keras_nbguard, time",
    # a path with no space in it, longer than the area is wide: the lists' box kept the width
    # of the longest such line, and every line of it ran off the edge (JupyterLab at 900 px)
    f"import keras\n{LONG_PATH} = [keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])]",
    "%%kerasrun --label mlp --quiet\nx = sum(range(10**6))",
    "%%kerasrun --label mlp --quiet\nx = sum(range(10**6))",
    "shown_at = time.time()\nkeras_nbguard.dashboard()",
    "probe_at = time.time()",
)
PLOTLY = "() => !!document.querySelector('.jp-OutputArea-output .js-plotly-plot .main-svg')"
# what would be cut at a narrow width: text wider than its box, a plot wider than the area,
# a panel title past the plot's right edge
CUT = r"""() => {
    const out = document.querySelector('.jp-OutputArea-output .widget-vbox');
    const area = out.getBoundingClientRect();
    const cut = [];
    for (const b of out.querySelectorAll('button'))
        if (b.scrollWidth > b.clientWidth + 1) cut.push('button ' + b.innerText);
    for (const h of out.querySelectorAll('.widget-html-content'))
        if (h.scrollWidth > h.clientWidth + 1 || h.getBoundingClientRect().right > area.right + 1)
            cut.push('text ' + h.innerText.slice(0, 40));
    for (const s of out.querySelectorAll('select'))
        if (s.getBoundingClientRect().right > area.right + 1) cut.push('select ' + s.value);
    // a word broken mid-way ("ch an ge" at 900 px): a cell of one word on more than one line
    for (const c of out.querySelectorAll('td, th')) {
        const text = c.innerText.trim(), range = document.createRange();
        range.selectNodeContents(c);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (text && !/\s/.test(text) && lines.size > 1) cut.push('broken ' + text);
    }
    const svg = out.querySelector('.js-plotly-plot .main-svg').getBoundingClientRect();
    if (svg.right > area.right + 1) cut.push('plot ' + svg.width + ' > ' + area.width);
    for (const t of out.querySelectorAll('.js-plotly-plot .annotation-text')) {
        const r = t.getBoundingClientRect();
        if (r.right > svg.right + 1 || r.left < svg.left - 1) cut.push('title ' + t.textContent);
    }
    return {width: area.width, cut};
}"""


def test_figure_in_a_fresh_kernel_the_next_cell_at_once_nothing_cut_at_540_px(tmp_path):
    """A fresh kernel: the interactive figure comes from the page, not the kernel, so the cell
    queued after the dashboard runs at once, and when the page says Idle the kernel is (a request
    then is answered at once). The output area is ~540 px wide: nothing is cut. A reload keeps
    the data. Times are printed (the goals are met in bench/bench_dashboard.py)."""
    with jupyter_server(tmp_path, "lab") as server, chromium_page(656, 1400) as page:
        open_notebook(server, page, "paint.ipynb", FIRST_PAINT_CELLS)
        for index in range(4):
            page.evaluate(f"{NOTEBOOK_WIDGET}.content.activeCellIndex = {index}")
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
        wait_idle(page, 120)
        page.evaluate(f"{NOTEBOOK_WIDGET}.content.activeCellIndex = 4")
        start = time.perf_counter()
        page.evaluate(
            "() => { const run = c => window.jupyterapp.commands.execute(c); "
            "run('notebook:run-cell-and-select-next'); run('notebook:run-cell'); }"
        )
        page.wait_for_function(PLOTLY, timeout=120_000, polling=50)
        interactive = time.perf_counter() - start
        wait_idle(page, 60)
        start = time.perf_counter()
        answered = kernel_eval(page, "print(probe_at - shown_at)", timeout=60)
        idle_answer = time.perf_counter() - start
        next_cell = float(answered)
        print(
            f"interactive figure {interactive:.2f} s after the click; the next cell ran "
            f"{next_cell:.2f} s after the dashboard cell began; a request at Idle answered in "
            f"{idle_answer:.2f} s"
        )
        assert next_cell <= 5.0  # at once (0.2-0.9 s here); plotly's figure used to take 10-15
        assert idle_answer <= 5.0  # Idle means idle: no figure being made after the cells
        drawn = (
            f"() => ({TRACES})().some(t => t.meta === 'rss:after:mlp' "
            "&& t.y.length === 2)"
        )  # the runs fit nothing: RSS is their figure
        page.wait_for_function(drawn, timeout=30_000)
        fit_note = page.inner_text(".js-plotly-plot")
        assert "no fit in these runs" in fit_note and "no GPU" in fit_note  # empty panels say why
        assert "run (of its label)" in fit_note  # the x axis says what it counts
        time.sleep(0.5)  # plotly's resize to the area settles
        seen = page.evaluate(CUT)
        page.locator(".jp-OutputArea-output .widget-vbox").first.screenshot(
            path=str(tmp_path / "narrow.png")
        )
        print(f"output area {seen['width']:.0f} px; cut: {seen['cut']}")
        assert 480 <= seen["width"] <= 600 and seen["cut"] == []
        assert f"{LONG_PATH}[0]" in page.inner_text(".nbguard-models")  # the long line is there
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")  # as autosave does
        page.reload()
        page.wait_for_function(drawn, timeout=60_000)
        assert [e for e in page.errors] == []


RESTART_CELLS = (
    "%load_ext keras_nbguard",
    "%%kerasrun --label mlp --quiet\nx = 1",
    "%nbguard dashboard",
    "%nbguard dashboard --side",
)
PANEL = ".jp-LinkedOutputView"
BANNERS = """() => [...document.querySelectorAll('.nbguard-restart')]
    .filter(b => b.offsetParent !== null).map(b => !!b.closest('.jp-LinkedOutputView'))"""
LIVE_PANEL = f"""() => [...document.querySelectorAll('{PANEL}')].some(p =>
    p.querySelector('.js-plotly-plot .main-svg')
    && !p.querySelector('.jupyter-widgets-disconnected'))"""


def test_a_restart_is_said_in_the_cell_and_the_side_panel_which_comes_back(tmp_path):
    with jupyter_server(tmp_path, "lab") as server, chromium_page(1300, 1100) as page:
        write_notebook(server.root / "restart.ipynb", RESTART_CELLS)
        page.goto(server.page_url("restart.ipynb"))
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        run_all(page, timeout=120)
        page.wait_for_function(LIVE_PANEL, timeout=60_000)
        assert page.evaluate(BANNERS) == []
        page.evaluate(f"{NOTEBOOK_WIDGET}.sessionContext.session.kernel.restart()")
        start = time.perf_counter()
        page.wait_for_function(f"() => ({BANNERS})().length >= 2", timeout=30_000)
        print(f"restart banner after {time.perf_counter() - start:.2f} s")
        assert sorted(page.evaluate(BANNERS)) == [False, True]  # in the cell and in the panel
        banner = page.locator(".nbguard-restart").first.inner_text()
        assert "kernel restarted" in banner and "%load_ext keras_nbguard" in banner
        page.screenshot(path=str(tmp_path / "restarted.png"))
        wait_idle(page, 60)
        kernel_eval(page, "%load_ext keras_nbguard", timeout=60)  # the new kernel
        page.wait_for_function(LIVE_PANEL, timeout=60_000)  # the panel came back by itself
        assert [e for e in page.errors] == []


PANEL_FIGURE = ".jp-LinkedOutputView .js-plotly-plot .main-svg"


def test_side_panel_opens_with_the_dashboard(tmp_path):
    cells = (
        "%load_ext keras_nbguard",
        "%%kerasrun --label mlp --quiet\nx = sum(range(10**6))",
        "%nbguard dashboard --side",
    )
    with jupyter_server(tmp_path, "lab") as server, chromium_page() as page:
        write_notebook(server.root / "side.ipynb", cells)
        page.goto(server.page_url("side.ipynb"))
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        run_all(page, timeout=120)
        page.wait_for_selector(".lm-TabBar-tabLabel:text-is('keras_nbguard')", timeout=30_000)
        panel = ".jupyter-widgets-sidecar, .jp-LinkedOutputView, .widget-sidecar"
        page.wait_for_function(
            f"() => !!document.querySelector('{panel}') && [...document"
            f".querySelectorAll('{panel}')].some(p => p.innerText"
            ".includes('keras_nbguard'))",
            timeout=60_000,
        )
        assert not page.query_selector(".jp-Notebook .keras-nbguard-static")  # not in the cell
        # the figure, once made, is as wide as the panel: not plotly's 700 px, cut off
        page.wait_for_function(f"() => !!document.querySelector('{PANEL_FIGURE}')", timeout=120_000)
        widths = page.evaluate(f"""() => {{
            const svg = document.querySelector('{PANEL_FIGURE}');
            const panel = svg.closest('.jp-LinkedOutputView, .jupyter-widgets-sidecar');
            return [svg.getBoundingClientRect().width, panel.clientWidth]; }}""")
        assert 0.8 * widths[1] <= widths[0] <= widths[1], widths
        assert [e for e in page.errors] == []


OUT_OF_VIEW_CELLS = (
    "%load_ext keras_nbguard",
    "%%kerasrun --label mlp --quiet\nx = 1",
    "%nbguard dashboard",
    *("# a cell of the notebook's\n" + "\n".join(f"a{j} = {j}" for j in range(30)),) * 12,
    "%%kerasrun --label mlp --quiet\nx = 2",
)
PLOT_HEIGHTS = "() => [...document.querySelectorAll('.js-plotly-plot')].map(e => e.clientHeight)"


def test_a_window_narrowed_while_the_dashboard_is_out_of_view_keeps_its_charts(tmp_path):
    """A walkthrough's JupyterLab at 1200 px, narrowed to 1000 while the dashboard sat above the
    cells in view: Plotly's own resize, made while the notebook's windowing left the cell
    unrendered, read its box as 0 px high, and its charts were drawn under the lists and the
    next cell until the page was reloaded."""
    with jupyter_server(tmp_path, "lab") as server, chromium_page(1200, 1600) as page:
        open_notebook(server, page, "view.ipynb", OUT_OF_VIEW_CELLS)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        wait_idle(page, 120)
        page.wait_for_function(PLOTLY, timeout=120_000)
        (drawn,) = page.evaluate(PLOT_HEIGHTS)
        last = len(OUT_OF_VIEW_CELLS) - 1
        for _ in range(2):  # at the notebook's end, the dashboard far above
            page.evaluate(f"{NOTEBOOK_WIDGET}.content.activeCellIndex = {last}")
            page.evaluate(f"{NOTEBOOK_WIDGET}.content.scrollToItem({last}, 'start')")
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
            wait_idle(page, 60)
        page.set_viewport_size({"width": 1000, "height": 1600})
        time.sleep(3)  # Plotly's resize, on the window's
        page.evaluate(f"{NOTEBOOK_WIDGET}.content.scrollToItem(2, 'start')")
        time.sleep(2)
        assert drawn > 500 and page.evaluate(PLOT_HEIGHTS) == [drawn]
        assert [e for e in page.errors] == []
