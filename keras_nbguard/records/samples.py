"""A run's RSS series, kept in two arrays instead of a tuple of pairs.

Every record of the kernel's runs stays in the session's history, its series with it. As Python
pairs each sample cost ~113 bytes (a tuple, a float, an int): a run of 25 s left 141 KiB in the
kernel for good, up to 230 KiB for a long one, and the small objects, allocated among the run's
transient ones, kept whole pages of Python's allocator from going back. As arrays, 16 bytes a
sample, in two blocks. It reads as the tuple did: ``(seconds, rss)`` pairs, equal to one.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload


class RssSamples(Sequence[tuple[float, int]]):
    """``(seconds since the run began, RSS in bytes)`` pairs, oldest first."""

    __slots__ = ("_rss", "_seconds")

    def __init__(self, pairs: Iterable[Sequence[Any]] = ()) -> None:
        pairs = pairs if isinstance(pairs, (list, tuple)) else list(pairs)
        self._seconds = array("d", [float(pair[0]) for pair in pairs])
        self._rss = array("q", [int(pair[1]) for pair in pairs])  # a float read back: bytes

    @classmethod
    def of(cls, samples: Iterable[Sequence[Any]]) -> RssSamples:
        """``samples`` as they are if already these, else copied into them."""
        return samples if isinstance(samples, RssSamples) else cls(samples)

    def __len__(self) -> int:
        return len(self._seconds)

    @overload
    def __getitem__(self, index: int) -> tuple[float, int]: ...

    @overload
    def __getitem__(self, index: slice) -> RssSamples: ...

    def __getitem__(self, index: int | slice) -> tuple[float, int] | RssSamples:
        if isinstance(index, slice):
            part = RssSamples()
            part._seconds, part._rss = self._seconds[index], self._rss[index]
            return part
        return self._seconds[index], self._rss[index]

    def __iter__(self) -> Iterator[tuple[float, int]]:
        return zip(self._seconds, self._rss, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RssSamples):
            return self._seconds == other._seconds and self._rss == other._rss
        if isinstance(other, (tuple, list)):  # what the records held before
            return len(other) == len(self) and all(
                tuple(theirs) == ours for theirs, ours in zip(other, self, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._seconds.tobytes(), self._rss.tobytes()))

    def __repr__(self) -> str:
        return f"RssSamples({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _from_bytes, (self._seconds.tobytes(), self._rss.tobytes())


def _from_bytes(seconds: bytes, rss: bytes) -> RssSamples:
    samples = RssSamples()
    samples._seconds.frombytes(seconds)
    samples._rss.frombytes(rss)
    return samples
