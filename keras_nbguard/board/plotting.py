"""The dashboard's interactive figure: an anywidget of our own whose small ESM (``static/chart.js``)
draws with plotly.js from plain rows, one per run.

The kernel holds plain lists and never imports plotly's Python figure machinery (``FigureWidget``
took 4 s and 69 MiB in a fresh kernel, most of it ``plotly.io`` → ``nbformat`` → ``jsonschema``
→ ``rfc3987_syntax``, and its state carried the 5 MB plotly.js bundle per instance). What changes
travels as small custom messages: the rows from the first one that changed, the live samples
from the first new one. The widget's state is kept current without being sent (``get_state``
reads the lists), so a reloaded page gets the figure as it is. plotly.js comes from the Jupyter
server extension, else once per page from this kernel (``plotly/package_data/plotly.min.js``).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from functools import cache
from importlib.resources import files
from typing import Any

CHART_CLASS = "keras-nbguard-chart"
# A flex item is as wide as its content by default: let the figure take the area's width, so
# plotly's autosize (at paint, and on window and panel resizes) follows the output area or panel.
# A restarted kernel's widgets get "jupyter-widgets-disconnected" from ipywidgets: the banner
# (in the header) shows then, in the cell and in the side panel alike.
BOARD_CLASS = "keras-nbguard-board"
CHART_STYLE = (
    f"<style>.{CHART_CLASS} {{min-width: 0; width: 100%; flex: 1 1 auto}}"
    # a long unbreakable path (`sys.last_value.__context__.__traceback__…`) kept the lists'
    # box as wide as the first draw's: shrunk to 900 px, every line of it ran off the edge
    f".{BOARD_CLASS} .widget-html-content {{line-height: 1.45; overflow-wrap: anywhere;"
    " min-width: 0}"
    f".{BOARD_CLASS} .widget-html {{min-width: 0}}"
    ".jupyter-widgets-disconnected .nbguard-restart"
    " {display: block !important; padding: .4em .6em; margin: .2em 0;"
    " background: #fff3e0; border: 1px solid #ef6c00; color: #bf360c}</style>"
)


@cache
def esm() -> str:
    return files(__package__).joinpath("static", "chart.js").read_text(encoding="utf-8")


def plotly_js_path() -> str | None:
    """plotly.min.js as plotly ships it, found without importing plotly (~90 ms)."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "package_data", "plotly.min.js")
        if os.path.exists(path):
            return path
    return None


def plotly_tag() -> str:
    """Tells one plotly.min.js from another (a browser may cache the file by it)."""
    path = plotly_js_path()
    if path is None:
        return "none"
    stat = os.stat(path)
    return f"{stat.st_size}-{int(stat.st_mtime)}"


@cache
def chart_class() -> type:
    import anywidget
    import traitlets as t

    class Chart(anywidget.AnyWidget):
        _esm = esm()
        # state only: get_state reads ``_rows`` and ``_live``; changes travel as messages
        rows: t.List[Any] = t.List().tag(sync=True)
        live = t.Dict().tag(sync=True)
        notes = t.Dict().tag(sync=True)
        plotly_v = t.Unicode().tag(sync=True)

        def __init__(self) -> None:
            self._rows: list[dict[str, Any]] = []
            self._live: dict[str, Any] = {"t": [], "y": [], "epochs": [], "fits": [], "title": ""}
            self._send_lock = threading.Lock()
            super().__init__(plotly_v=plotly_tag())
            self.add_class(CHART_CLASS)
            self.on_msg(self._on_front_end)

        def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
            state = super().get_state(key, drop_defaults)
            if "rows" in state:
                state["rows"] = list(self._rows)
            if "live" in state:
                state["live"] = {
                    k: list(v) if isinstance(v, list) else v for k, v in self._live.items()
                }
            return state

        def set_rows(self, rows: list[dict[str, Any]]) -> None:
            """Send the rows from the first one that differs from what the page has."""
            with self._send_lock:
                old = self._rows
                start = next(
                    (i for i, (a, b) in enumerate(zip(old, rows, strict=False)) if a != b),
                    min(len(old), len(rows)),
                )
                if start == len(old) == len(rows):
                    return
                self._rows = list(rows)
                self.send({"type": "rows", "start": start, "rows": rows[start:]})

        def set_live(
            self,
            ts: list[float],
            ys: list[float],
            epochs: list[float],
            title: str,
            fits: list[int] | None = None,
        ) -> None:
            """The run going on: only the samples the page does not have yet travel. ``fits``:
            the fit each epoch belongs to (1, 1, 2, ...; None: all one fit's)."""
            fits = list(fits) if fits is not None else [1] * len(epochs)
            with self._send_lock:
                old = self._live
                n = len(old["t"])
                start = (
                    n
                    if ts[:1] == old["t"][:1]
                    and len(ts) >= n
                    and (not n or ts[n - 1] == old["t"][n - 1])
                    else 0
                )
                unchanged = epochs == old["epochs"] and fits == old["fits"]
                if start == len(ts) and unchanged and title == old["title"]:
                    return
                self._live = {
                    "t": list(ts),
                    "y": list(ys),
                    "epochs": list(epochs),
                    "fits": fits,
                    "title": title,
                }
                self.send(
                    {
                        "type": "live",
                        "start": start,
                        "t": ts[start:],
                        "y": ys[start:],
                        "epochs": list(epochs),
                        "fits": fits,
                        "title": title,
                    }
                )

        def _on_front_end(self, _widget: Any, content: Any, _buffers: Any) -> None:
            kind = content.get("type") if isinstance(content, dict) else None
            if kind == "plotly":  # no server extension (VS Code, a plain Jupyter): from here
                path = plotly_js_path()
                if path is not None:
                    with open(path, "rb") as file:
                        self.send({"type": "plotly"}, buffers=[file.read()])
            elif kind == "resync":  # the page missed a message: everything again
                with self._send_lock:
                    self.send({"type": "rows", "start": 0, "rows": list(self._rows)})
                    live = self._live
                    self.send(
                        {
                            "type": "live",
                            "start": 0,
                            "t": live["t"],
                            "y": live["y"],
                            "epochs": live["epochs"],
                            "fits": live["fits"],
                            "title": live["title"],
                        }
                    )

    return Chart


def make_chart(gpu_note: str | None = None) -> Any:
    chart = chart_class()()
    chart.notes = {"gpu": gpu_note}
    return chart
