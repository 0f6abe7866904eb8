"""One rule for every RSS series that must stay bounded (the run's own, the dashboard's live one):
merge neighbours into one sample at the later time with the larger value, so a peak is never
averaged away. (The store's feed applies the same rule as it streams: each stored sample is the
largest of its step.)"""

from __future__ import annotations

from typing import TypeVar

V = TypeVar("V", int, float)


def halve(samples: list[tuple[float, V]]) -> list[tuple[float, V]]:
    """``samples`` with each pair of neighbours merged; an odd last sample stays as it is."""
    even = len(samples) - len(samples) % 2
    pairs = zip(samples[0:even:2], samples[1:even:2], strict=True)
    return [(b[0], max(a[1], b[1])) for a, b in pairs] + samples[even:]
