"""The dashboard in one line, for the notebook flow (``%nbguard dashboard --compact``): the last
run, its fit change, its label's RSS trend, the stale models and the top finding, redrawn in
place after every run. A display id, not a widget: any frontend shows it, VS Code too."""

from __future__ import annotations

import html
import uuid
from typing import TYPE_CHECKING, Any

from keras_nbguard.board.figures import group_of, trend_text
from keras_nbguard.records.formatting import fmt_seconds

if TYPE_CHECKING:
    from keras_nbguard.records.run import RunRecord
    from keras_nbguard.session.core import Session


class CompactLine:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._display_ids: list[str] = []  # every place it is shown, all kept up to date
        session.events.subscribe("record", self._redraw)

    def close(self) -> None:
        self.session.events.unsubscribe("record", self._redraw)

    def line(self) -> str:
        runs = self.session.runs()
        if not runs:
            return "keras_nbguard · no run yet"
        last = runs[-1]
        parts = [f"keras_nbguard · {last.label} #{last.run_number} {last.status}", _fit(last)]
        trend = trend_text(runs, group_of(last)).split(": ", 1)[1]  # its line's
        parts.append(trend.split("; ")[0])  # the RSS trend (or "a trend needs 2 runs")
        stale = last.stale_models.count if last.stale_models is not None else 0
        if stale:
            parts.append(f"{stale} stale model{'s' * (stale != 1)}")
        if last.findings:
            parts.append(last.findings[0].split(":", 1)[0])  # the top finding's kind
        return " · ".join(parts)

    def bundle(self) -> dict[str, str]:
        line = self.line()
        colour = "#ef6c00" if "⚠" in line or "stale" in line else "#555"
        return {
            "text/plain": line,
            "text/html": f"<div class='nbguard-compact' style='color:{colour}'>"
            f"{html.escape(line)}</div>",
        }

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self._display_ids.append(uuid.uuid4().hex)
        display(self.bundle(), raw=True, display_id=self._display_ids[-1])

    def _redraw(self, _record: Any = None) -> None:
        if not self._display_ids:
            return
        from IPython.display import update_display

        bundle = self.bundle()
        for display_id in self._display_ids:
            update_display(bundle, raw=True, display_id=display_id)

    def __repr__(self) -> str:
        return self.line()


def _fit(record: RunRecord) -> str:
    fit = f"fit {fmt_seconds(record.fit_seconds)}"
    if record.delta_fit_seconds is None:
        return fit
    return f"{fit} ({fmt_seconds(record.delta_fit_seconds, signed=True)})"
