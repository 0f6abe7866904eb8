"""Default labels: readable, and stable across re-runs (and edits) of the same cell."""

from __future__ import annotations

MAX_LENGTH = 40
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def label_from_source(body: str) -> str:
    """The cell's first line of code, shortened: what the user recognises the cell by."""
    for line in body.splitlines():
        text = line.strip()
        if text and not text.startswith(("#", "%")):
            return _shortened(text)
    return "empty cell"


def _shortened(text: str) -> str:
    """``model = keras.Sequential(…)``: a line cut at MAX_LENGTH, or whose statement goes on
    below, ends in an ellipsis and closes its brackets (an open one read as a cut label)."""
    cut = text
    while True:
        closers = _unclosed(cut)
        if cut == text and not closers and len(text) <= MAX_LENGTH:
            return text
        if len(cut) + 1 + len(closers) <= MAX_LENGTH:
            return f"{cut.rstrip()}…{closers}"
        cut = cut[: MAX_LENGTH - 1 - len(closers)]  # shorter each time round


def _unclosed(code: str) -> str:
    """The brackets ``code`` leaves open, closed innermost first (strings and a comment skipped)."""
    expected: list[str] = []
    quote = None
    for char in code:
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            break
        elif char in _CLOSERS:
            expected.append(_CLOSERS[char])
        elif expected and char == expected[-1]:
            expected.pop()
    return "".join(reversed(expected))


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
