"""Tables of runs and status, as text and HTML. Pure: records in, strings out."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from keras_nbguard.records.formatting import fmt_bytes, fmt_params, fmt_seconds
from keras_nbguard.records.run import RunRecord

COLUMNS = (
    "label",
    "#",
    "status",
    "wall",
    "fit",
    "Δ fit",
    "RSS after",
    "Δ RSS",
    "RSS peak",
    "GPU peak",
    "traces",
)


def run_row(r: RunRecord) -> tuple[str, ...]:
    return (
        r.label,
        str(r.run_number),
        r.status,
        fmt_seconds(r.wall_seconds),
        fmt_seconds(r.fit_seconds),
        fmt_seconds(r.delta_fit_seconds, signed=True),
        fmt_bytes(r.rss_after),
        fmt_bytes(r.delta_rss_after, signed=True),
        fmt_bytes(r.rss_peak),
        fmt_bytes(r.gpu.tf_peak),
        "n/a" if r.traces is None else str(r.traces),
    )


class Table:
    """A titled table that IPython shows as text or HTML."""

    def __init__(self, title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        self.title = title
        self.header = tuple(header)
        self.rows = [tuple(r) for r in rows]

    def text(self) -> str:
        if not self.rows:
            return f"{self.title}: none yet"
        columns = zip(self.header, *self.rows, strict=True)
        widths = [max(len(str(c)) for c in column) for column in columns]
        lines = [self.title]
        for row in (self.header, *self.rows):
            cells = (str(c).ljust(w) for c, w in zip(row, widths, strict=True))
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return (
            f"<b>{html.escape(self.title)}</b><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )


def runs_table(records: Sequence[RunRecord], title: str = "keras_nbguard runs") -> Table:
    if not any(r.params for r in records):
        return Table(title, COLUMNS, [run_row(r) for r in records])
    # a sweep's runs: which point each was
    rows = [(*run_row(r), fmt_params(r.params)) for r in records]
    return Table(title, (*COLUMNS, "params"), rows)


def key_values(title: str, pairs: Sequence[tuple[str, str]]) -> Table:
    return Table(title, ("", ""), pairs)
