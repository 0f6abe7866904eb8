"""The history page as HTML: notebooks, their runs across kernels, the across-runs plots.

Pure: runs in, markup out. The plots are drawn in the browser by ``static/history.js`` with the
plotly.js that plotly ships (served by our own handler) from ``figures.figure_data``: the numbers
the in-notebook dashboard plots. Unknown figures read "n/a", never 0.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from typing import Any

from keras_nbguard.board.figures import figure_data
from keras_nbguard.board.svg_charts import svg_chart
from keras_nbguard.records.formatting import NA, fmt_bytes, fmt_seconds, fmt_stale
from keras_nbguard.records.run import STATUSES, RunRecord
from keras_nbguard.server.history import StoredRun, notebook_summary

HEADER = (
    "#",
    "started",
    "kernel",
    "label",
    "run",
    "status",
    "wall",
    "fit",
    "RSS before",
    "RSS after",
    "RSS peak",
    "GPU peak",
    "findings",
)
KNOWN_STATUSES = frozenset((*STATUSES, "running"))
TABLE_ROWS = 1000
TEXT = {"started", "kernel", "label", "status", "findings"}  # left-aligned; the figures align right
CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; word-break: break-all; }
.nbguard-meta, .nbguard-note, .nbguard-trends { color: #555; }
.nbguard-message { padding: .8em 1em; background: #fff8e1; border: 1px solid #ffcc80; }
table { border-collapse: collapse; font-size: 13px; margin-top: .5em; }
th, td { padding: 2px 8px; text-align: right; border-bottom: 1px solid #eee; white-space: nowrap; }
th { background: #f5f5f5; } .nbguard-text { text-align: left; }
tr.nbguard-change td { text-align: left; color: #777; background: #fafafa; font-style: italic; }
.status-ok { color: #2e7d32; } .status-running { color: #1565c0; }
.status-died, .status-error, .status-oom { color: #c62828; font-weight: bold; }
.status-interrupted { color: #ef6c00; }
"""


@cache
def script() -> str:
    return files(__package__).joinpath("static", "history.js").read_text(encoding="utf-8")


def when(t: float | None) -> str:
    return NA if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def json_for_script(value: Any) -> str:
    """JSON safe inside <script>: no "</script>" or "<!--" can end it early."""
    text = json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(
    groups: dict[str, list[StoredRun]], *, db: str, message: str | None, plotly_url: str
) -> str:
    """The whole page; ``message`` (why the history can't be read) replaces the notebooks."""
    total = sum(len(runs) for runs in groups.values())
    meta = (
        f"database <code>{html.escape(db)}</code> · {total} run(s) in {len(groups)} "
        f"notebook(s) · read {when(time.time())}"
    )
    parts = [f"<h1>keras_nbguard · run history</h1><p class='nbguard-meta'>{meta}</p>"]
    if message:
        parts.append(f"<p class='nbguard-message'>{html.escape(message)}</p>")
    elif not groups:
        parts.append(
            "<p class='nbguard-message'>No runs recorded yet: run a %%kerasrun cell in "
            "a kernel that loaded keras_nbguard.</p>"
        )
    if groups:
        parts.append(index(groups))
        parts.extend(section(i, name, runs) for i, (name, runs) in enumerate(groups.items()))
    head = f"<meta charset='utf-8'><title>keras_nbguard · run history</title><style>{CSS}</style>"
    if groups:  # 4.8 MB of plotly.js only when there is something to plot
        head += f"<script src='{html.escape(plotly_url)}'></script>"
        parts.append(f"<script>{script()}</script>")
    return f"<!doctype html><html><head>{head}</head><body>{''.join(parts)}</body></html>"


def index(groups: dict[str, list[StoredRun]]) -> str:
    items = []
    for i, (name, runs) in enumerate(groups.items()):
        s = notebook_summary(name, runs)
        extra = "".join(
            f", {s[key]} {word}"
            for key, word in (("died", "died"), ("running", "running"), ("restarts", "restart(s)"))
            if s[key]
        )
        items.append(
            f"<li><a href='#nb-{i}'>{html.escape(name)}</a> — {s['runs']} run(s) in "
            f"{s['kernels']} kernel(s){extra}; last {when(s['last_started_at'])}</li>"
        )
    return f"<ul class='nbguard-index'>{''.join(items)}</ul>"


def section(i: int, name: str, runs: Sequence[StoredRun]) -> str:
    records = [r.record for r in runs]
    # restarts of the same kernel id (a new process) as well as new kernels and reset histories:
    # each label's line breaks there
    data = figure_data(records, breaks=frozenset(i for i, r in enumerate(runs) if r.change))
    trends = "".join(f"<div>{html.escape(t)}</div>" for t in data["trends"])
    note = (
        f"<p class='nbguard-note'>{html.escape(data['gpu_note'])}</p>" if data["gpu_note"] else ""
    )
    fallback = svg_chart(data, "fit", "fit", "fit time per run [s]") + svg_chart(
        data, "rss", "after", "RSS after each run [MiB]"
    )
    return (
        f"<section class='nbguard-notebook' id='nb-{i}' data-notebook='{html.escape(name)}'>"
        f"<h2>{html.escape(name)}</h2><div class='nbguard-trends'>{trends}</div>"
        f"<div class='nbguard-plot'><noscript>{fallback}</noscript></div>{note}"
        f"<script type='application/json' class='nbguard-data'>{json_for_script(data)}"
        f"</script>{table(runs)}</section>"
    )


def table(runs: Sequence[StoredRun]) -> str:
    """The notebook's runs, the newest ``TABLE_ROWS`` of them (every run is in the plots)."""
    head = "".join(
        f"<th class='nbguard-text'>{h}</th>" if h in TEXT else f"<th>{h}</th>" for h in HEADER
    )
    rows = []
    first = max(0, len(runs) - TABLE_ROWS)
    if first:
        rows.append(
            f"<tr class='nbguard-change'><td colspan='{len(HEADER)}'>the table shows "
            f"the last {TABLE_ROWS:,} of {len(runs):,} runs; the plots show them all, "
            f"and api/runs lists them all</td></tr>"
        )
    for x, run in enumerate(runs[first:], first + 1):
        if run.change:
            rows.append(
                f"<tr class='nbguard-change'><td colspan='{len(HEADER)}'>┆ {run.change}"
                f": {html.escape(kernel_name(run))}</td></tr>"
            )
        rows.append(row(x, run))
    return f"<table class='nbguard-runs'><thead><tr>{head}</tr></thead>{''.join(rows)}</table>"


def kernel_name(run: StoredRun) -> str:
    kernel = (run.kernel_id or NA)[:8]
    return kernel if run.pid is None else f"kernel {kernel}, pid {run.pid}"


def findings_cell(r: RunRecord) -> tuple[str, str]:
    """The stored findings of a run, as kinds (and their words, for the tooltip)."""
    kinds = [f.split(":", 1)[0] for f in r.findings]
    words = list(r.findings)
    if r.stale_models is not None and r.stale_models.count:
        kinds.append(f"stale_models ({r.stale_models.count})")
        words.append(f"stale_models: {fmt_stale(r.stale_models, keras=r.keras)}")
    return ", ".join(kinds) or "none", "\n".join(words)


def row(x: int, run: StoredRun) -> str:
    r = run.record
    status = r.status + (" (process gone)" if run.inferred else "")
    why = r.error or (
        "left 'running' by a kernel process that no longer exists: killed mid-run "
        "(out of memory is the usual cause)"
        if run.inferred
        else ""
    )
    gpu = r.gpu.tf_peak if r.gpu.tf_peak is not None else r.gpu.nvml_process_used
    cells = [
        (str(x), ""),
        (when(r.started_at), ""),
        ((run.kernel_id or NA)[:8], run.kernel_id or ""),
        (r.label, ""),
        (str(r.run_number), ""),
        (status, why),
        (fmt_seconds(r.wall_seconds), ""),
        (fmt_seconds(r.fit_seconds), ""),
        (fmt_bytes(r.rss_before), ""),
        (fmt_bytes(r.rss_after), ""),
        (fmt_bytes(r.rss_peak), ""),
        (fmt_bytes(gpu), r.gpu.reason or ""),
        # the causes' kinds and the stale models (what the dashboard listed after the run);
        # hovering shows them in words
        findings_cell(r),
    ]
    tds = []
    for i, (text, title) in enumerate(cells):
        # a class from our own list only: the stored status is data, never markup
        cls = ("nbguard-text" if HEADER[i] in TEXT else "nbguard-figure") + (
            f" status-{r.status if r.status in KNOWN_STATUSES else 'unknown'}"
            if HEADER[i] == "status"
            else ""
        )
        tip = f" title='{html.escape(title)}'" if title else ""
        tds.append(f"<td class='{cls}'{tip}>{html.escape(text)}</td>")
    return f"<tr class='nbguard-run' data-status='{html.escape(r.status)}'>{''.join(tds)}</tr>"
