"""Default labels: readable, and stable across re-runs (and edits) of the same cell."""

from __future__ import annotations

MAX_LENGTH = 40


def label_from_source(body: str) -> str:
    """The cell's first line of code, shortened: what the user recognises the cell by."""
    for line in body.splitlines():
        text = line.strip()
        if text and not text.startswith(("#", "%")):
            return text if len(text) <= MAX_LENGTH else text[: MAX_LENGTH - 1] + "…"
    return "empty cell"


class CellLabels:
    """Remembers the label each cell got first, so editing a cell's first line keeps its history,
    and two cells that start alike still get labels of their own."""

    def __init__(self) -> None:
        self._by_cell: dict[str, str] = {}

    def label_for(self, body: str, cell_id: str | None) -> str:
        if cell_id is None:
            return label_from_source(body)
        if cell_id in self._by_cell:
            return self._by_cell[cell_id]
        base = label = label_from_source(body)
        taken = set(self._by_cell.values())
        n = 2
        while label in taken:
            label, n = f"{base} ({n})", n + 1
        self._by_cell[cell_id] = label
        return label
