"""The dashboard's plotly figure: five panels, one trace per label and panel, drawn again only
where the data changed (``sent`` remembers what the widget already has)."""

from __future__ import annotations

import contextlib
import copy
import html
from collections.abc import Callable
from typing import Any

AXES = {"fit": ("x", "y"), "rss": ("x2", "y2"), "gpu": ("x3", "y3")}
TITLES = ("fit time per run [s]", "RSS per run [MiB]: after ─ peak ··· before - -",
          "GPU memory per run [MiB]", "seconds per epoch (current run)",
          "RSS over time (current run) [MiB]")

CHART_CLASS = "keras-nbguard-chart"
# A flex item is as wide as its content by default: plotly's first paint (700 px when the panel
# was still hidden) would then fix the figure's width for good. Let it take the area's width
# instead, so plotly's autosize (at paint, and on window and panel resizes) follows the area.
CHART_STYLE = (f"<style>.{CHART_CLASS} > .js-plotly-plot {{min-width: 0; width: 100%; "
               f"flex: 1 1 auto}}</style>")


def make_figure() -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=3, cols=2, specs=[[{}, {}], [{}, {}], [{"colspan": 2}, None]],
                        subplot_titles=TITLES, vertical_spacing=0.1, horizontal_spacing=0.08)
    grey = "#607d8b"
    fig.add_trace(go.Bar(meta="live:epochs", name="epoch", marker_color=grey, showlegend=False,
                         hovertemplate="epoch %{x}: %{y:.3f} s<extra></extra>"), row=2, col=2)
    fig.add_trace(go.Scatter(meta="live:rss", name="RSS", mode="lines", line_color=grey,
                             showlegend=False,
                             hovertemplate="%{x:.2f} s: %{y:.1f} MiB<extra></extra>"),
                  row=3, col=1)
    fig.update_layout(autosize=True, height=760, margin={"l": 50, "r": 20, "t": 60, "b": 80},
                      template="plotly_white", hovermode="closest",
                      # under the panels, in rows: a legend at the side takes a narrow area's width
                      legend={"orientation": "h", "yanchor": "top", "y": -0.08, "x": 0,
                              "title_text": "label"},
                      title={"text": "runs: ✕ error  ★ out of memory  ◆ interrupted  ┆ restart",
                             "font": {"size": 12}},
                      xaxis2_matches="x", xaxis3_title_text="run",
                      xaxis4_title_text="epoch", xaxis5_title_text="seconds into the run")
    # no axis from -1 while a panel waits for its first point: runs, seconds, MiB are >= 0
    fig.update_xaxes(rangemode="nonnegative")
    fig.update_yaxes(rangemode="nonnegative")
    widget = go.FigureWidget(fig)
    # the width follows the output area or side panel (window and panel resizes included):
    # without it plotly keeps the width it found at first paint, 700 px in a hidden panel
    widget._config = {"responsive": True}
    return widget


def draw(fig: Any, data: dict[str, Any], sent: dict[str, Any]) -> None:
    """Copy figure_data into the widget in one batch_update, sending only what changed (``sent``:
    what the widget holds, by uid); traces are rebuilt only for a new label or series."""
    import plotly.graph_objects as go

    array: Callable[..., Any] = _as_list  # without numpy: the same plot, a little slower
    with contextlib.suppress(ImportError):  # numpy arrays: plotly validates them in one step
        from numpy import array

    traces = data["traces"]
    if [t["uid"] for t in traces] != [k for k in sent if k != "layout"]:  # live traces first
        # FigureWidget sets its own trace uids: ours go in ``meta``, which the page can read
        sent.clear()
        fig.data = fig.data[:2]
        fig.add_traces([go.Scatter(
            meta=t["uid"], name=t["name"], legendgroup=t["label"], showlegend=t["showlegend"],
            mode="lines+markers" if t["symbol"] is None else "markers",
            xaxis=AXES[t["panel"]][0], yaxis=AXES[t["panel"]][1],
            line={"color": t["color"], "dash": t["dash"], "width": 1.5},
            marker={"size": 6} if t["symbol"] is None else {"size": 13, "color": t["color"]},
            hovertemplate="%{text}<extra></extra>" if t["text"] is not None
            else "%{fullData.name}: %{y:.1f} MiB<extra></extra>") for t in traces])
    shapes = [{"type": "line", "xref": xa, "yref": f"{ya} domain", "x0": x - 0.5, "x1": x - 0.5,
               "y0": 0, "y1": 1, "line": {"dash": "dot", "color": "#999", "width": 1}}
              for x in data["restarts"] for xa, ya in AXES.values()]
    notes = [] if not data["gpu_note"] else [{  # in the middle of the (empty) GPU panel
        "text": html.escape(data["gpu_note"]), "xref": "paper", "yref": "paper", "name": "note",
        "x": sum(fig.layout.xaxis3.domain) / 2, "y": sum(fig.layout.yaxis3.domain) / 2,
        "xanchor": "center", "showarrow": False, "font": {"color": "#777"}}]
    step = max(1, data["runs"] // 10)  # whole run numbers, about ten ticks
    with fig.batch_update():
        for trace, t in zip(fig.data[2:], traces, strict=True):
            old = sent.get(t["uid"], {})
            if any(old.get(k) != t[k] for k in ("x", "y", "text", "symbol")):
                trace.x, trace.y = array(t["x"]), array(t["y"], dtype=float)  # None: NaN, a gap
                if t["text"] is not None:
                    trace.text = array(t["text"], dtype=object)
                if t["symbol"] is not None:
                    trace.marker.symbol = t["symbol"]
            sent[t["uid"]] = t
        if sent.get("layout") != (shapes, notes, step):
            sent["layout"] = (shapes, notes, step)
            fig.update_xaxes(tick0=1, dtick=step, row=1)
            fig.update_xaxes(tick0=1, dtick=step, row=2, col=1)
            fig.layout.shapes = shapes
            titles = [a for a in fig.layout.annotations if a.name != "note"]
            fig.layout.annotations = titles + notes


def _as_list(values: list[Any], dtype: Any = None) -> list[Any]:
    return values


def keep_for_reload(fig: Any) -> None:
    """plotly sends its updates as messages and leaves the widget's state as the figure was
    made, so a reloaded page (which asks the kernel for each widget's state) showed an empty
    figure. Keep that state current, without sending it: the page has it already."""
    with contextlib.suppress(Exception):  # plotly's internals: a later version may differ
        fig._trait_values["_widget_data"] = copy.deepcopy(fig._data)
        fig._trait_values["_widget_layout"] = copy.deepcopy(fig._layout_obj._props)
