"""The dashboard's "compare two runs": pick two of the kernel's runs, see every figure side by
side with its change (``compare.py``), as ``%nbguard compare`` shows it in a cell."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from keras_nbguard.diagnosis.compare import Comparison
from keras_nbguard.records.run import RunRecord

CHOICES = 40  # runs offered (newest first); the others: %nbguard compare mlp:3 mlp:7


SHOWN_LABEL = 32  # characters of a label in a dropdown
TABLE_SCROLLS = "overflow-x: auto; overflow-wrap: normal; word-break: normal"


class ComparePicker:
    """Two dropdowns of the runs (newest first) and their comparison under them."""

    def __init__(self) -> None:
        import ipywidgets as w  # only the widget dashboard builds one

        self._runs: dict[str, RunRecord] = {}
        self._updating = False
        self._picked = False  # the user chose a run: keep it
        # a long label (a cell's first line) made "with" run off a 1,000 px window's edge: the
        # second goes under the first where both don't fit, and neither is wider than the area
        narrow = {"width": "auto", "max_width": "100%"}
        self.first = w.Dropdown(description="compare", layout=w.Layout(**narrow))
        self.second = w.Dropdown(description="with", layout=w.Layout(**narrow))
        self.result = w.HTML()
        for dropdown in (self.first, self.second):
            dropdown.observe(self._show, names="value")
        pair = w.HBox([self.first, self.second], layout=w.Layout(flex_flow="row wrap"))
        self.widget = w.VBox([pair, self.result])

    def update(self, records: Sequence[RunRecord]) -> None:
        """New choices after a run or a reset: the latest two until the user picks; then the
        picks stay while their runs do."""
        self._runs = {_name(r): r for r in reversed(records)}
        kept = (self.first.value, self.second.value) if self._picked else (None, None)
        # the latest runs, and the ones picked: the options travel to the page on every change
        names = list(self._runs)[:CHOICES]
        names += [k for k in dict.fromkeys(kept) if k in self._runs and k not in names]
        self._updating = True  # no comparison drawn for the in-between states
        try:
            shown = [(_shown(self._runs[name]), name) for name in names]
            if list(self.first.options) != shown:
                self.first.options = self.second.options = shown
            # by default the run before the latest, against the latest
            self.first.value = (
                kept[0] if kept[0] in self._runs else _default_first(self._runs, names)
            )
            self.second.value = kept[1] if kept[1] in self._runs else (names[0] if names else None)
        finally:
            self._updating = False
        self._show()

    def _show(self, _change: Any = None) -> None:
        if self._updating:
            return
        self._picked = self._picked or _change is not None
        first, second = self._runs.get(self.first.value), self._runs.get(self.second.value)
        if first is None or second is None:
            self.result.value = ""
        elif first is second:
            self.result.value = f"<i>{html.escape(_name(first))}: pick another run to compare</i>"
        else:
            # JupyterLab's styles for a cell's HTML output, so it reads as %nbguard compare does
            table = Comparison(first, second)._repr_html_()
            # a narrow window scrolls the table sideways rather than break its words mid-way
            self.result.value = (
                f'<div class="jp-RenderedHTMLCommon" style="{TABLE_SCROLLS}">{table}</div>'
            )


def _name(record: RunRecord) -> str:
    return f"{record.label} #{record.run_number}"


def _shown(record: RunRecord) -> str:
    """A run as its dropdown shows it: the number first, the label cut (a default label is the
    cell's first line: `input = layers.Input(shape=(28, 28, 1)) #` was all a 900 px window
    showed of two runs)."""
    label = record.label
    if len(label) > SHOWN_LABEL:
        label = label[: SHOWN_LABEL - 1].rstrip() + "…"
    return f"#{record.run_number} {label}"


def _default_first(runs: dict[str, RunRecord], names: list[str]) -> str | None:
    """The latest run's label's run before it (a walkthrough's picker showed the GAN's #3
    against another label's #1, most rows n/a); the run before the latest where it has none."""
    if not names:
        return None
    label = runs[names[0]].label
    same = [name for name in names[1:] if runs[name].label == label]
    return same[0] if same else names[1] if len(names) > 1 else names[0]
