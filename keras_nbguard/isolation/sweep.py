"""``--sweep "units=32,64; lr=1e-3,1e-4"``: the points of a sweep, every combination in order.

Each value is a Python literal — ``32``, ``1e-3``, ``'relu'``, ``True``, ``None``, ``[1, 2]``,
``(3, 4)``, ``"a,b"`` — or a bare name, taken as text (``relu``). Commas and semicolons inside
brackets and quotes belong to the value: ``a=[1,2],(3,4)`` is two points. Anything else is a
``ValueError`` naming the value. The points are made one at a time as the sweep runs."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

EXAMPLE = '"units=32,64; lr=1e-3,1e-4"'


@dataclass(frozen=True)
class Sweep:
    """The names and their values; ``len`` is the number of points, iterating makes them."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    @classmethod
    def parse(cls, spec: str) -> Sweep:
        """``ValueError`` says in the user's terms what is wrong with ``spec``."""
        axes: list[tuple[str, tuple[Any, ...]]] = []
        for part in (p.strip() for p in split(spec, ";")):
            if not part:
                continue
            name, equals, values = part.partition("=")
            name = name.strip()
            if not equals or not name.isidentifier():
                raise ValueError(f"--sweep: {part!r} is not name=value,value (e.g. {EXAMPLE})")
            if any(name == seen for seen, _ in axes):
                raise ValueError(f"--sweep: {name!r} is given twice")
            parsed = tuple(value(name, v.strip()) for v in split(values, ",") if v.strip())
            if not parsed:
                raise ValueError(f"--sweep: {name!r} has no values")
            _refuse_equal(name, parsed)
            axes.append((name, parsed))
        if not axes:
            raise ValueError(f"--sweep needs at least one name=value,value (e.g. {EXAMPLE})")
        return cls(tuple(axes))

    def __len__(self) -> int:
        count = 1
        for _, values in self.axes:
            count *= len(values)
        return count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Each combination, the first name's varying slowest."""
        names = [name for name, _ in self.axes]
        for combo in itertools.product(*(values for _, values in self.axes)):
            yield dict(zip(names, combo, strict=True))

    def describe(self) -> str:
        """``units (3 values) × lr (4 values)``."""
        return " × ".join(f"{name} ({len(values)} values)" for name, values in self.axes)


def points(spec: str) -> list[dict[str, Any]]:
    """Every point of ``spec`` at once (for a small sweep; ``Sweep`` makes them lazily)."""
    return list(Sweep.parse(spec))


def split(text: str, separator: str) -> list[str]:
    """``text`` cut at ``separator`` where it stands outside brackets and quotes."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    escaped = False
    for i, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == separator and depth <= 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def value(name: str, text: str) -> Any:
    """A Python literal, or a bare name as text (``relu``); else ``ValueError`` naming it."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if text.isidentifier():
            return text
    raise ValueError(
        f"--sweep: {name}={text!r} is not a Python value: use a number, True/False/None, "
        f"'quoted text', [a, list] or (a, tuple); quote text with spaces, commas or symbols"
    )


def _refuse_equal(name: str, values: tuple[Any, ...]) -> None:
    """Two values whose keys are equal (``0`` and ``0.0``, ``1`` and ``True``, ``[1, 2]`` and
    ``(1, 2)``, a value given twice) would be one entry of the sweep's mapping while the table
    and the history show two runs, one of them lost. Refused before any process starts rather
    than kept apart: keeping them apart would need keys that are not the values the user typed,
    and the mapping is read by those (``points[(("d", 0.0),)]``); a value given twice is most
    likely a slip, and repeats of one point are a ``seed=1,2,3`` axis."""
    seen: dict[Any, Any] = {}
    for v in values:
        k = _hashable(v)
        if k in seen:
            earlier = seen[k]
            if repr(earlier) == repr(v):
                raise ValueError(f"--sweep: {name}={v!r} is given twice")
            raise ValueError(
                f"--sweep: {name}={earlier!r} and {name}={v!r} would be one point of the sweep's "
                f"results (as keys they are equal): give one of them"
            )
        seen[k] = v


def key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """How a point's outputs are found in the sweep's mapping: ``(("units", 32), ("lr", 1e-3))``
    (a list value as a tuple, a dict as its items: keys must be hashable)."""
    return tuple((name, _hashable(v)) for name, v in params.items())


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(item) for item in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(item)) for k, item in v.items())
    if isinstance(v, set):
        return frozenset(v)
    return v
