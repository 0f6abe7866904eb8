"""Tables of runs and status, as text and HTML. Pure: records in, strings out."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from keras_nbguard.records import unknowns
from keras_nbguard.records.formatting import NA, fmt_bytes, fmt_params, fmt_seconds
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


ELSEWHERE = "against the label's run before, in the kernel before a restart"


class Footnotes:
    """Numbered reasons for a table's "n/a" cells: a reason per cell would not fit a column, so
    each cell reads "n/a¹" and the table ends with what ¹ means (each reason once)."""

    MARKS = "¹²³⁴⁵⁶⁷⁸⁹"

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self._unknown: set[str] = set()  # the reasons of "n/a" cells (the others mark figures)

    def na(self, reason: str) -> str:
        self._unknown.add(reason)
        return NA + self.marked(reason)

    def marked(self, reason: str) -> str:
        """The mark of ``reason``: after "n/a", or after a figure that needs a word (a change
        against a run in the kernel before a restart)."""
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self._mark(self.reasons.index(reason))

    def lines(self) -> list[str]:
        """A line per reason ("n/a¹ no fit"), in the order the cells first used them."""
        return [
            f"{NA if reason in self._unknown else ''}{self._mark(i)} {reason}"
            for i, reason in enumerate(self.reasons)
        ]

    def _mark(self, number: int) -> str:
        return self.MARKS[number] if number < len(self.MARKS) else f"[{number + 1}]"


def run_row(r: RunRecord, notes: Footnotes) -> tuple[str, ...]:
    def known(text: str, why: str) -> str:
        return notes.na(why) if text == NA else text

    def change(text: str, why: str) -> str:
        """A change against the run before: marked where that run was in an earlier kernel
        (`%nbguard runs` showed `-551 ms` against a run before a restart, with no word)."""
        if text != NA and r.previous_elsewhere:
            return text + notes.marked(ELSEWHERE)
        return known(text, why)

    return (
        r.label,
        str(r.run_number),
        r.status,
        fmt_seconds(r.wall_seconds),
        known(fmt_seconds(r.fit_seconds), unknowns.fit_unknown(r)),
        change(fmt_seconds(r.delta_fit_seconds, signed=True), unknowns.delta_fit_unknown(r)),
        known(fmt_bytes(r.rss_after), unknowns.RSS_UNREADABLE),
        change(fmt_bytes(r.delta_rss_after, signed=True), unknowns.delta_rss_unknown(r)),
        known(fmt_bytes(r.rss_peak), unknowns.RSS_UNREADABLE),
        known(fmt_bytes(r.gpu.tf_peak), unknowns.gpu_unknown(r)),
        notes.na(unknowns.traces_unknown(r)) if r.traces is None else str(r.traces),
    )


class Table:
    """A titled table that IPython shows as text or HTML."""

    def __init__(
        self,
        title: str,
        header: Sequence[str],
        rows: Sequence[Sequence[str]],
        notes: Sequence[str] = (),
    ) -> None:
        self.title = title
        self.header = tuple(header)
        self.rows = [tuple(r) for r in rows]
        self.notes = tuple(notes)  # lines under the table: what its marks mean

    def text(self) -> str:
        if not self.rows:
            return f"{self.title}: none yet"
        columns = zip(self.header, *self.rows, strict=True)
        widths = [max(len(str(c)) for c in column) for column in columns]
        lines = [self.title]
        for row in (self.header, *self.rows):
            cells = (str(c).ljust(w) for c, w in zip(row, widths, strict=True))
            lines.append("  ".join(cells).rstrip())
        return "\n".join([*lines, *self.notes])

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
        notes = "".join(f"<div>{html.escape(line)}</div>" for line in self.notes)
        return (
            f"<b>{html.escape(self.title)}</b><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{notes}"
        )


def runs_table(records: Sequence[RunRecord], title: str = "keras_nbguard runs") -> Table:
    notes = Footnotes()
    rows: list[tuple[str, ...]] = [run_row(r, notes) for r in records]
    header: tuple[str, ...] = COLUMNS
    if any(r.params for r in records):  # a sweep's runs: which point each was
        rows = [(*row, fmt_params(r.params)) for row, r in zip(rows, records, strict=True)]
        header = (*COLUMNS, "params")
    return Table(title, header, rows, notes.lines())


def key_values(title: str, pairs: Sequence[tuple[str, str]]) -> Table:
    return Table(title, ("", ""), pairs)
