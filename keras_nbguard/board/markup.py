"""The dashboard's markup, shared by the widget and its static view: the header, the lists, the
leak finder's lines, and the whole static view (trends, SVG charts, findings, the last runs)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from keras_nbguard.board.findings_view import findings_html, findings_text
from keras_nbguard.board.svg_charts import static_charts
from keras_nbguard.diagnosis.findings import Finding
from keras_nbguard.records.run import RunRecord
from keras_nbguard.records.tables import runs_table

SHOWN_UNREACHABLE = 3


def model_lines(report: Any) -> list[str]:
    """The leak finder's live models (a ``LeakReport``), one line each, stale ones first and
    flagged: the ones "Free flagged models" frees."""
    lines = []
    for leak in report.leaks:
        run = leak.run_words(quoted=False)
        lines.append(
            f"{'STALE' if leak.stale else 'current'} {leak.model_name} "
            f"({leak.size_words()}, {run}): {leak.some_paths()}"
        )
    if report.unreachable:  # named: "1 more alive" alone left the user asking which
        named = "; ".join(
            f"{leak.model_name} ({leak.size_words()}, {leak.run_words(quoted=False)})"
            for leak in report.unreachable[:SHOWN_UNREACHABLE]
        )
        more = " …" if len(report.unreachable) > SHOWN_UNREACHABLE else ""
        # not collected first: garbage awaiting a collection, or held by what the walk does
        # not follow (`f = model.train_function`): "gone at the next clear" was a promise
        why = (
            "the framework's own objects hold them"
            if report.collected
            else "garbage the next clear collects, or held by the framework's own objects: "
            "%nbguard leaks collects first and says which"
        )
        lines.append(
            f"{len(report.unreachable)} more alive that nothing you can name holds "
            f"({why}): {named}{more}"
        )
    return lines


RESTARTED = (
    "<div class='nbguard-restart' style='display:none'><b>⟳ The kernel restarted</b>: "
    "this dashboard shows the old kernel and no longer changes. Run "
    "<code>%load_ext keras_nbguard</code>, then <code>%nbguard dashboard</code> for the "
    "new one (a side panel comes back by itself).</div>"
)
# "RSS left +2.6 MiB per run" could not be had from the RSS after shown (a walkthrough's least
# squares read +2.1): the key says what the trends are of, and what line
KEY = (
    "<div style='color:#777;font-size:85%'>x: each label's run number · marks: ✕ error "
    "★ out of memory ◆ interrupted · ┆ a kernel restart breaks the line · trends: a robust "
    "line (Theil–Sen) through the runs after the first; RSS left: a run's RSS after, or the "
    "next run's RSS before where lower (the latest run's: its RSS after, less what the "
    "collections after the runs before it gave back)</div>"
)


def header_html(data: dict[str, Any], runs: int, live: str) -> str:
    """Runs so far, the run going on (``live``: HTML) and the trends, current label first; the
    restart banner (hidden until the kernel restarts: see ``plotting.CHART_STYLE``)."""
    status = f"{runs} run(s)" + (f", {data['failed']} not ok" if data["failed"] else "")
    trends = "".join(
        f"<div>{html.escape(t)}</div>" if i else f"<div><b>{html.escape(t)}</b></div>"
        for i, t in enumerate(data["trends"])
    )
    return (
        f"{RESTARTED}<div style='overflow-wrap:anywhere'><b>keras_nbguard</b> · {status} · "
        f"{live}</div>{trends}{KEY if runs else ''}"
    )


def lists_html(reports: Sequence[str], models: Sequence[str], advice: str | None = None) -> str:
    """What the last resets did (``reports``: HTML lines), the models still referenced and the
    batch advice for the last run's model (``advice``: its line, when ``batch_advice()`` was
    asked for that model)."""
    items = "".join(f"<li>{html.escape(m)}</li>" for m in models) or "<li>none</li>"
    said = (
        f"<div class='nbguard-advice'><b>Batch advice for the last run's model</b>: "
        f"{html.escape(advice)}</div>"
        if advice
        else ""
    )
    return (
        f"<div class='nbguard-reports'>{''.join(reports)}</div>{said}"
        f"<div class='nbguard-models'><b>Models still referenced</b><ul>{items}</ul></div>"
    )


def static_view(
    records: Sequence[RunRecord],
    data: dict[str, Any],
    reports: Sequence[str],
    models: Sequence[str],
    live: str,
    note: str,
    findings: Sequence[Finding] = (),
    advice: str | None = None,
) -> dict[str, str]:
    """The dashboard without a widget frontend: trends, two SVG charts, the last runs; a bundle."""
    charts = static_charts(data)
    gpu = f"<div>{html.escape(data['gpu_note'])}</div>" if data["gpu_note"] else ""
    table = runs_table(records[-20:], "last runs")
    head = header_html(data, len(records), html.escape(live))
    body = (
        f"<div class='keras-nbguard-static'>{head}{charts}{gpu}"
        f"{findings_html(findings, len(records))}{table._repr_html_()}"
        f"{lists_html(reports, models, advice)}"
        f"<div style='color:#777;font-size:80%'>{html.escape(note)}</div></div>"
    )
    text = [
        *data["trends"],
        *([data["gpu_note"]] if data["gpu_note"] else []),
        *findings_text(findings),
        table.text(),
        *([advice] if advice else []),
        "models still referenced: " + ("; ".join(models) or "none"),
    ]
    return {"text/html": body, "text/plain": "\n".join(text)}
