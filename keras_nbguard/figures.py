"""What the dashboard shows, as plain data and markup: records in, dicts and strings out.

``figure_data(records)`` gives one trace per (panel, series, label); the widget copies them into its
FigureWidget and the static fallback draws them as inline SVG, so both show the same numbers.
Unknown figures stay ``None`` (a gap in the plot), never 0. No plotly or ipywidgets here.
"""

from __future__ import annotations

import html
import time
import zlib
from collections.abc import Sequence
from typing import Any

from .causes_across import state_growth
from .findings import Finding
from .findings_view import findings_html, findings_text
from .formatting import fmt_bytes, fmt_gpu, fmt_params, fmt_seconds, fmt_size
from .records import RunRecord
from .report import runs_table
from .svg_charts import static_charts

MB = 2**20
# label colours (red is for failed runs)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f")
# failed runs stand out by shape and size, whatever the label's colour
SYMBOLS = {"ok": "circle", "error": "x", "oom": "star", "interrupted": "diamond"}
MARKED = {"fit": "fit", "rss": "after", "gpu": "tf peak"}  # the series failed runs are marked on
TREND_RUNS = 10  # the trend looks at this many recent runs of a label

# (panel, series, value in plot units or None, line dash, legend shown)
SERIES = (
    ("fit", "fit", lambda r: r.fit_seconds, "solid", True),
    ("rss", "after", lambda r: _mb(r.rss_after), "solid", False),
    ("rss", "peak", lambda r: _mb(r.rss_peak), "dot", False),
    ("rss", "before", lambda r: _mb(r.rss_before), "dash", False),
    ("gpu", "tf peak", lambda r: _mb(r.gpu.tf_peak), "solid", False),
    ("gpu", "nvml process", lambda r: _mb(r.gpu.nvml_process_used), "dot", False),
    ("gpu", "nvml device", lambda r: _mb(r.gpu.nvml_used), "dash", False),
)


def label_colours(labels: Sequence[str]) -> dict[str, str]:
    """A colour per label that stays the label's in every view (dashboard, history page, after a
    reset): the slot its name hashes to, or the next free one when an earlier label took it."""
    taken: dict[int, str] = {}
    colours = {}
    for label in labels:
        slot = zlib.crc32(label.encode()) % len(PALETTE)
        for step in range(len(PALETTE)):
            if (slot + step) % len(PALETTE) not in taken:
                slot = (slot + step) % len(PALETTE)
                break
        taken[slot] = label
        colours[label] = PALETTE[slot]
    return colours


def _mb(n: int | None) -> float | None:
    return None if n is None else n / MB


def hover_text(r: RunRecord) -> str:
    """The run's label, status, time and figures, for a point's hover box."""
    when = time.strftime("%H:%M:%S", time.localtime(r.started_at))
    point = html.escape(fmt_params(r.params))
    lines = [f"<b>{html.escape(r.label)} #{r.run_number}</b> {point} · {html.escape(r.status)} · "
             f"{when}",
             f"wall {fmt_seconds(r.wall_seconds)}, fit {fmt_seconds(r.fit_seconds)}",
             f"RSS {fmt_bytes(r.rss_before)} → {fmt_bytes(r.rss_after)} "
             f"(peak {fmt_bytes(r.rss_peak)})",
             f"GPU {html.escape(fmt_gpu(r.gpu))}"]
    if r.error:
        lines.append(html.escape(r.error[:120]))
    return "<br>".join(lines)


def _other_process(a: tuple[str, int | None], b: tuple[str, int | None]) -> bool:
    return a[0] != b[0] or (a[1] is not None and b[1] is not None and a[1] != b[1])


def restarts(records: Sequence[RunRecord]) -> list[int]:
    """x positions (1-based) where the history starts again: a new kernel, or a label's run
    number went back (the history was reset)."""
    last: dict[str, int] = {}
    found = []
    kernel = None
    for x, r in enumerate(records, 1):
        # a new kernel id, or the same id in a new process ("Restart kernel" keeps the id)
        kernel_id = getattr(r, "kernel_id", None)  # records from a history store have it
        new_kernel = (kernel_id, getattr(r, "pid", None)) if kernel_id is not None else None
        went_back = r.label in last and r.run_number <= last[r.label]
        if went_back or (kernel is not None and new_kernel is not None
                         and _other_process(kernel, new_kernel)):
            found.append(x)
        last[r.label], kernel = r.run_number, new_kernel or kernel
    return found


def slope(ys: Sequence[float]) -> float:
    """Least-squares slope of ys against 0..n-1 (n ≥ 2)."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    spread = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / spread


def trend_text(records: Sequence[RunRecord], label: str) -> str:
    """RSS growth and fit-time slope over the label's last runs in this kernel, in words; RSS
    growth is flagged when the diagnosis names it (``state_growth``: beyond the noise, over
    enough runs after the first, which warms up)."""
    runs = _latest_process([r for r in records if group_of(r) == label])[-TREND_RUNS:]
    rss = [r.rss_after for r in runs if r.rss_after is not None]
    fit = [r.fit_seconds for r in runs if r.fit_seconds is not None and r.status == "ok"]
    parts = []
    if len(rss) >= 2:
        growth = slope(rss)
        flag = "⚠ " if state_growth(runs) is not None else ""
        parts.append(f"{flag}RSS {fmt_bytes(round(growth), signed=True)} per run over "
                     f"{len(rss)} runs")
    if len(fit) >= 2:
        parts.append(f"fit time {fmt_seconds(slope(fit), signed=True)} per run "
                     f"over {len(fit)} runs")
    if not parts:
        return f"{label}: a trend needs 2 runs ({len(runs)} so far)"
    return f"{label}: " + "; ".join(parts)


def _latest_process(runs: list[RunRecord]) -> list[RunRecord]:
    """The runs since the last start of a kernel process (earlier kernels' runs are shown on
    the charts, never mixed into a trend), or since run numbers went back (an old history)."""
    for i in range(len(runs) - 1, 0, -1):
        a, b = runs[i - 1], runs[i]
        if b.run_number <= a.run_number or (
            a.kernel_id is not None and b.kernel_id is not None
            and _other_process((a.kernel_id, a.pid), (b.kernel_id, b.pid))):
            return runs[i:]
    return runs


def group_of(r: RunRecord) -> str:
    """A run's line on the charts: its label, and for a sweep's run its point too, so that each
    point of a sweep run again and again is a line of its own ("mlp units=32")."""
    if not r.params:
        return r.label
    return f"{r.label} {fmt_params(r.params)}"


def figure_data(records: Sequence[RunRecord],
                memo: dict[int, tuple[RunRecord, str]] | None = None) -> dict[str, Any]:
    """Everything the across-runs panels show, computed from records alone.

    ``memo`` (optional, kept by the caller between calls) saves re-making the hover text of runs
    already seen: the costliest part with hundreds of runs.

    Returns ``traces``: one line per (panel, series, label) and, per panel, one "not ok" trace of
    the runs that failed (error, oom, interrupted), each a dict with uid "panel:series:label",
    panel, series, label, name, color, dash, showlegend, x, y, text (None but on the panel's main
    series) and (marks only) symbol;
    ``restarts`` (x positions), ``gpu_note`` ("no GPU: <reason>" when no run has a GPU figure),
    ``trends`` (current label first), ``labels``, ``runs`` and ``failed`` (how many not ok). x is
    the run's position in ``records``.
    """
    labels: list[str] = []
    by_label: dict[str, list[tuple[int, RunRecord]]] = {}
    for x, r in enumerate(records, 1):
        if group_of(r) not in by_label:
            labels.append(group_of(r))
            by_label[group_of(r)] = []
        by_label[group_of(r)].append((x, r))
    texts = _hover_texts(records, memo)
    bad = [(x, r) for x, r in enumerate(records, 1) if r.status != "ok"]
    gpu_known = any(r.gpu.known for r in records)
    traces = []
    colours = label_colours(labels)
    for panel, series, value, dash, legend in SERIES:
        if panel == "gpu" and not gpu_known:
            continue
        for label in labels:
            points = by_label[label]
            traces.append({
                "uid": f"{panel}:{series}:{label}", "panel": panel, "series": series,
                # plotly renders <a>, <b>, <br> in trace names: a label is text, never markup
                "label": label, "name": html.escape(label if legend else f"{label} {series}"),
                "color": colours[label], "dash": dash, "showlegend": legend,
                "x": [x for x, _ in points], "y": [value(r) for _, r in points],
                # hover boxes on the main series only: the others say "label peak: 532.1 MB"
                "text": [texts[id(r)] for _, r in points] if MARKED[panel] == series else None,
                "symbol": None,
            })
        if series == MARKED[panel]:  # failed runs drawn over the panel's main series
            points = [(x, r) for x, r in bad if value(r) is not None]
            traces.append({
                "uid": f"{panel}:not ok", "panel": panel, "series": "not ok", "label": "not ok",
                "name": "not ok", "color": "#d62728", "dash": "solid", "showlegend": legend,
                "x": [x for x, _ in points], "y": [value(r) for _, r in points],
                "text": [texts[id(r)] for _, r in points],
                "symbol": [SYMBOLS.get(r.status, "x") for _, r in points],
            })
    current = group_of(records[-1]) if records else None
    order = ([current] if current else []) + [lb for lb in reversed(labels) if lb != current]
    return {
        "traces": traces,
        "restarts": restarts(records),
        "gpu_note": None if gpu_known or not records else gpu_note(records[-1]),
        "trends": [trend_text(records, label) for label in order],
        "labels": labels,
        "runs": len(records),
        "failed": len(bad),
    }


def _hover_texts(records: Sequence[RunRecord],
                 memo: dict[int, tuple[RunRecord, str]] | None) -> dict[int, str]:
    if memo is None:
        return {id(r): hover_text(r) for r in records}
    fresh = {}
    for r in records:
        hit = memo.get(id(r))  # the memo holds its records, so an id is never reused meanwhile
        fresh[id(r)] = hit if hit is not None and hit[0] is r else (r, hover_text(r))
    memo.clear()
    memo.update(fresh)
    return {key: text for key, (_, text) in fresh.items()}


def gpu_note(record: RunRecord) -> str:
    reason = record.gpu.reason or "no reading"
    return reason if reason.startswith("no GPU") else f"no GPU: {reason}"


def model_lines(report: Any) -> list[str]:
    """The leak finder's live models (a ``LeakReport``), one line each, stale ones first and
    flagged: the ones "Free flagged models" frees."""
    lines = []
    for leak in report.leaks:
        run = f"{leak.run_label} #{leak.run_number}" if leak.run_label else "no tracked run"
        paths = ", ".join(leak.paths[:4]) + (" …" if len(leak.paths) > 4 else "")
        lines.append(f"{'STALE' if leak.stale else 'current'} {leak.model_name} "
                     f"({fmt_size(leak.weight_bytes)} weights, {run}): {paths}")
    if report.unreachable:
        lines.append(f"{len(report.unreachable)} more alive that nothing you can name holds "
                     f"(gone at the next clear)")
    return lines


# -- markup shared by the widget and the static view ----------------------------------------------
def header_html(data: dict[str, Any], runs: int, live: str) -> str:
    """Runs so far, the run going on (``live``: HTML) and the trends, current label first."""
    status = f"{runs} run(s)" + (f", {data['failed']} not ok" if data["failed"] else "")
    trends = "".join(f"<div>{html.escape(t)}</div>" if i else f"<div><b>{html.escape(t)}</b></div>"
                     for i, t in enumerate(data["trends"]))
    return f"<div><b>keras_nbguard</b> · {status} · {live}</div>{trends}"


def lists_html(reports: Sequence[str], models: Sequence[str]) -> str:
    """What the last resets did (``reports``: HTML lines) and the models still referenced."""
    items = "".join(f"<li>{html.escape(m)}</li>" for m in models) or "<li>none</li>"
    return (f"<div class='nbguard-reports'>{''.join(reports)}</div><div class='nbguard-models'>"
            f"<b>Models still referenced</b><ul>{items}</ul></div>")


def static_view(records: Sequence[RunRecord], data: dict[str, Any], reports: Sequence[str],
                models: Sequence[str], live: str, note: str,
                findings: Sequence[Finding] = ()) -> dict[str, str]:
    """The dashboard without a widget frontend: trends, two SVG charts, the last runs; a bundle."""
    charts = static_charts(data)
    gpu = f"<div>{html.escape(data['gpu_note'])}</div>" if data["gpu_note"] else ""
    table = runs_table(records[-20:], "last runs")
    head = header_html(data, len(records), html.escape(live))
    body = (f"<div class='keras-nbguard-static'>{head}{charts}{gpu}"
            f"{findings_html(findings, len(records))}{table._repr_html_()}"
            f"{lists_html(reports, models)}"
            f"<div style='color:#777;font-size:80%'>{html.escape(note)}</div></div>")
    text = [*data["trends"], *([data["gpu_note"]] if data["gpu_note"] else []),
            *findings_text(findings), table.text(),
            "models still referenced: " + ("; ".join(models) or "none")]
    return {"text/html": body, "text/plain": "\n".join(text)}
