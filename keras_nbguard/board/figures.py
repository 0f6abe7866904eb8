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

from keras_nbguard.diagnosis.findings import trends_text
from keras_nbguard.records.formatting import fmt_bytes, fmt_gpu, fmt_params, fmt_seconds
from keras_nbguard.records.run import RunRecord
from keras_nbguard.records.unknowns import fit_cut_short, fit_unknown

MB = 2**20
# label colours (red is for failed runs)
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
# failed runs stand out by shape and size, whatever the label's colour
SYMBOLS = {"ok": "circle", "error": "x", "oom": "star", "interrupted": "diamond"}
MARKED = {"fit": "fit", "rss": "after", "gpu": "tf peak"}  # the series failed runs are marked on
PARTIAL = frozenset({"fit"})  # row keys a fit stopped part way has only a part of

# (panel, series, row key, value in plot units or None, line dash, legend shown); the row keys
# are what the dashboard's front end (static/chart.js) reads
SERIES = (
    ("fit", "fit", "fit", lambda r: r.fit_seconds, "solid", True),
    ("rss", "after", "after", lambda r: _mb(r.rss_after), "solid", False),
    ("rss", "peak", "peak", lambda r: _mb(r.rss_peak), "dot", False),
    ("rss", "before", "before", lambda r: _mb(r.rss_before), "dash", False),
    ("gpu", "tf peak", "tf", lambda r: _mb(r.gpu.tf_peak), "solid", False),
    ("gpu", "nvml process", "proc", lambda r: _mb(r.gpu.nvml_process_used), "dot", False),
    ("gpu", "nvml device", "dev", lambda r: _mb(r.gpu.nvml_used), "dash", False),
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
    lines = [
        f"<b>{html.escape(r.label)} #{r.run_number}</b> {point} · {html.escape(r.status)} · {when}",
        f"wall {fmt_seconds(r.wall_seconds)}, fit {_fit_words(r)}",
        f"RSS {fmt_bytes(r.rss_before)} → {fmt_bytes(r.rss_after)} (peak {fmt_bytes(r.rss_peak)})",
        f"GPU {html.escape(fmt_gpu(r.gpu))}",
    ]
    if r.error:
        lines.append(html.escape(r.error[:120]))
    return "<br>".join(lines)


def _fit_words(r: RunRecord) -> str:
    if r.fit_seconds is not None or not r.fits:
        return fmt_seconds(r.fit_seconds)
    return f"n/a ({html.escape(fit_unknown(r))}, {fmt_seconds(_fits_ran(r))} spent)"


def _fits_ran(r: RunRecord) -> float:
    """How long the run's fits ran, ended or not (a fit stopped at once has no fit time)."""
    return sum(fit.seconds for fit in r.fits)


def _other_process(a: tuple[str, int | None], b: tuple[str, int | None]) -> bool:
    return a[0] != b[0] or (a[1] is not None and b[1] is not None and a[1] != b[1])


def kernel_epochs(records: Sequence[RunRecord], breaks: frozenset[int] = frozenset()) -> list[int]:
    """Per record, which kernel process it ran in (0, 1, ...): a new one starts at a new kernel,
    the same kernel id in a new process ("Restart kernel" keeps the id), a label's run number
    that went back (a history reset), or a position in ``breaks`` (0-based, the caller's)."""
    last: dict[str, int] = {}
    epochs = []
    kernel = None
    epoch = 0
    for i, r in enumerate(records):
        kernel_id = getattr(r, "kernel_id", None)  # records from a history store have it
        new_kernel = (kernel_id, getattr(r, "pid", None)) if kernel_id is not None else None
        went_back = r.label in last and r.run_number <= last[r.label]
        if i and (
            went_back
            or i in breaks
            or (
                kernel is not None and new_kernel is not None and _other_process(kernel, new_kernel)
            )
        ):
            epoch += 1
        epochs.append(epoch)
        last[r.label], kernel = r.run_number, new_kernel or kernel
    return epochs


Memo = dict[int, tuple[RunRecord, dict[str, Any]]]


def run_rows(
    records: Sequence[RunRecord], memo: Memo | None = None, breaks: frozenset[int] = frozenset()
) -> list[dict[str, Any]]:
    """One plain row per run, what every chart draws from: ``g`` its line (label, and a sweep's
    point), ``c`` the line's colour, ``n`` its run number (the x axis), ``s`` its status, ``k`` its
    kernel process (a line breaks where it changes), each series' value by its key (None:
    unknown), ``cut`` (a fit of the run stopped or failed part way: its time is drawn as a failed
    run's mark, not on its label's line beside whole fits) and ``text``, the hover box.

    ``memo`` (optional, kept by the caller between calls) keeps each record's own part of its row
    (the hover text is the costliest), so a dashboard adding its 500th run makes one row."""
    bases = _bases(records, memo)
    groups = list(dict.fromkeys(base["g"] for base in bases))
    colours = label_colours(groups)
    return [
        {**base, "k": k, "c": colours[base["g"]]}
        for base, k in zip(bases, kernel_epochs(records, breaks), strict=True)
    ]


def _base_row(r: RunRecord) -> dict[str, Any]:
    row: dict[str, Any] = {"g": group_of(r), "n": r.run_number, "s": r.status}
    row["cut"] = fit_cut_short(r) is not None
    for _panel, _series, key, value, _dash, _legend in SERIES:
        row[key] = value(r)
    if row["fit"] is None and row["cut"]:  # stopped before its first epoch ended: no fit time,
        row["fit"] = _fits_ran(r)  # but its mark, at the time it ran
    row["text"] = hover_text(r)
    return row


def _bases(records: Sequence[RunRecord], memo: Memo | None) -> list[dict[str, Any]]:
    if memo is None:
        return [_base_row(r) for r in records]
    fresh: Memo = {}
    for r in records:
        hit = memo.get(id(r))  # the memo holds its records, so an id is never reused meanwhile
        fresh[id(r)] = hit if hit is not None and hit[0] is r else (r, _base_row(r))
    memo.clear()
    memo.update(fresh)
    return [fresh[id(r)][1] for r in records]


def trend_text(records: Sequence[RunRecord], label: str) -> str:
    """RSS growth and fit-time slope of a line's runs in this kernel after its warm-up, with their
    span, in words; the number and its ⚠ come from the diagnosis' one trend
    (``findings.label_trends``: the test that names ``state_growth`` and ``run_slowdown``)."""
    return trends_text(label, [r for r in records if group_of(r) == label])


def group_of(r: RunRecord) -> str:
    """A run's line on the charts: its label, and for a sweep's run its point too, so that each
    point of a sweep run again and again is a line of its own ("mlp units=32"); an isolated run's
    figures are its own process's, so a label's isolated runs are a line of their own beside its
    runs in the kernel ("mlp (isolated)")."""
    line = r.label if not r.params else f"{r.label} {fmt_params(r.params)}"
    return f"{line} (isolated)" if r.isolated and not r.params else line


def figure_data(
    records: Sequence[RunRecord], memo: Memo | None = None, breaks: frozenset[int] = frozenset()
) -> dict[str, Any]:
    """Everything the across-runs panels show, computed from ``run_rows`` alone.

    ``memo`` (optional, kept by the caller between calls) saves re-making the hover text of runs
    already seen: the costliest part with hundreds of runs.

    Returns ``traces``: one line per (panel, series, label) and, per panel, one "not ok" trace of
    the runs that failed (error, oom, interrupted), each a dict with uid "panel:series:label",
    panel, series, label, name, color, dash, showlegend, x, y, text (None but on the panel's main
    series) and (marks only) symbol. x is the run's number (of its label); where a kernel
    restarted, a point with y None between the runs either side breaks the line.
    ``restarts`` (dicts: x, label, color: where a label's line breaks), ``gpu_note`` ("no GPU:
    <reason>" when no run has a GPU figure), ``trends`` (current label first), ``labels``,
    ``runs``, ``max_run`` (the largest run number) and ``failed`` (how many not ok).
    """
    rows = run_rows(records, memo, breaks)
    labels = list(dict.fromkeys(row["g"] for row in rows))
    by_label: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for row in rows:
        by_label[row["g"]].append(row)
    bad = [row for row in rows if row["s"] != "ok"]
    gpu_known = any(r.gpu.known for r in records)
    traces = []
    restart_marks: list[dict[str, Any]] = []
    for panel, series, key, _value, dash, legend in SERIES:
        if panel == "gpu" and not gpu_known:
            continue
        for label in labels:
            x: list[float] = []
            y: list[float | None] = []
            text: list[str] = []
            for i, row in enumerate(by_label[label]):
                before = by_label[label][i - 1] if i else None
                if before is not None and before["k"] != row["k"]:  # a restart: a gap
                    x.append((before["n"] + row["n"]) / 2)
                    y.append(None)
                    text.append("")
                    if key == "fit":
                        restart_marks.append({"x": x[-1], "label": label, "color": row["c"]})
                if key in PARTIAL and row["cut"]:
                    continue  # a part of a fit: its mark says so, the line joins whole fits
                x.append(row["n"])
                y.append(row[key])
                text.append(row["text"])
            traces.append(
                {
                    "uid": f"{panel}:{series}:{label}",
                    "panel": panel,
                    "series": series,
                    # plotly renders <a>, <b>, <br> in trace names: a label is text, never markup
                    "label": label,
                    "name": html.escape(label if legend else f"{label} {series}"),
                    "color": by_label[label][0]["c"],
                    "dash": dash,
                    "showlegend": legend,
                    "x": x,
                    "y": y,
                    # hover boxes on the main series only: the others say "label peak: 532.1 MB"
                    "text": text if MARKED[panel] == series else None,
                    "symbol": None,
                }
            )
        if series == MARKED[panel]:  # failed runs drawn over the panel's main series
            points = [row for row in bad if row[key] is not None]
            traces.append(
                {
                    "uid": f"{panel}:not ok",
                    "panel": panel,
                    "series": "not ok",
                    "label": "not ok",
                    "name": "failed or stopped",
                    "color": "#d62728",
                    "dash": "solid",
                    "showlegend": False,  # its mark would be the first one's: the key says them
                    "x": [row["n"] for row in points],
                    "y": [row[key] for row in points],
                    "text": [row["text"] for row in points],
                    "symbol": [SYMBOLS.get(row["s"], "x") for row in points],
                }
            )
    return {
        "traces": traces,
        "restarts": restart_marks,
        "gpu_note": None if gpu_known or not records else gpu_note(records[-1]),
        "trends": trends(records),
        "labels": labels,
        "runs": len(records),
        "max_run": max((row["n"] for row in rows), default=0),
        "failed": len(bad),
    }


def trends(records: Sequence[RunRecord]) -> list[str]:
    """Each line's trend in words, the current run's first, then the most recent first."""
    labels = list(dict.fromkeys(group_of(r) for r in records))
    current = group_of(records[-1]) if records else None
    order = ([current] if current else []) + [lb for lb in reversed(labels) if lb != current]
    return [trend_text(records, label) for label in order]


def gpu_note(record: RunRecord) -> str:
    reason = record.gpu.reason or "no reading"
    return reason if reason.startswith("no GPU") else f"no GPU: {reason}"
