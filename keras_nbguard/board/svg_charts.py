"""Small static charts as inline SVG, from ``figure_data``: the dashboard without a widget
frontend, the widget until its interactive figure is made, and the history page."""

from __future__ import annotations

import html
from typing import Any


def svg_chart(
    data: dict[str, Any], panel: str, series: str, title: str, width: int = 420, height: int = 130
) -> str:
    """A small static line chart of one series (the no-widget fallback): inline SVG."""
    lines = [t for t in data["traces"] if t["panel"] == panel and t["series"] == series]
    pts = [(x, y) for t in lines for x, y in zip(t["x"], t["y"], strict=True) if y is not None]
    head = f"<div style='font-size:85%'><b>{html.escape(title)}</b></div>"
    if not pts:
        why = data.get("gpu_note") if panel == "gpu" else None
        return head + f"<div style='color:#777'>{html.escape(why or 'no run yet')}</div>"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    pad = 28
    height += 12  # the x axis' words

    def sx(x: float) -> float:
        return pad + (x - x0) / ((x1 - x0) or 1) * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - 26 - (y - y0) / ((y1 - y0) or 1) * (height - 28)

    body: list[str] = []
    for t in lines:  # a y of None (unknown, or a kernel restart) breaks the line
        segments: list[list[tuple[float, float]]] = [[]]
        for x, y in zip(t["x"], t["y"], strict=True):
            if y is None:
                segments.append([])
            else:
                segments[-1].append((sx(x), sy(y)))
        body.extend(
            f"<polyline fill='none' stroke='{t['color']}' stroke-width='1.5' points='"
            + " ".join(f"{a:.1f},{b:.1f}" for a, b in xy)
            + "'/>"
            for xy in segments
            if xy
        )
        body.extend(
            f"<circle cx='{a:.1f}' cy='{b:.1f}' r='2.5' fill='{t['color']}'/>"
            for xy in segments
            for a, b in xy
        )
    for mark in data.get("restarts", ()):  # where a label's line breaks: a kernel restart
        if x0 <= mark["x"] <= x1:
            body.append(
                f"<line x1='{sx(mark['x']):.1f}' x2='{sx(mark['x']):.1f}' y1='4' "
                f"y2='{height - 26}' stroke='{mark['color']}' stroke-dasharray='2,3'>"
                f"<title>kernel restart</title></line>"
            )
    for t in data["traces"]:
        if t["uid"] == f"{panel}:not ok":  # failed runs: big red dots
            body.extend(
                f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='4' fill='#d62728'/>"
                for x, y in zip(t["x"], t["y"], strict=True)
            )
    body.append(
        f"<text x='2' y='12' font-size='10'>{y1:,.3g}</text>"
        f"<text x='2' y='{height - 16}' font-size='10'>{y0:,.3g}</text>"
        f"<text x='{pad}' y='{height - 2}' font-size='10'>run {x0:g}</text>"
        f"<text x='{width - pad}' y='{height - 2}' font-size='10' text-anchor='end'>"
        f"run {x1:g} (of its label)</text>"
    )
    return (
        head
        + f"<svg width='{width}' height='{height}' style='background:#fafafa'>"
        + "".join(body)
        + "</svg>"
    )


def static_charts(data: dict[str, Any]) -> str:
    """The two across-runs charts as inline SVG: the static view's, and the widget's until its
    interactive figure is made."""
    return svg_chart(data, "fit", "fit", "fit time per run [s]") + svg_chart(
        data, "rss", "after", "RSS after each run [MiB]"
    )
