"""``--sweep "units=32,64; lr=1e-3,1e-4"``: the points of a sweep, every combination in order."""

from __future__ import annotations

import ast
import itertools
from typing import Any


def points(spec: str) -> list[dict[str, Any]]:
    """Each combination of the values, the first name's varying slowest. ``ValueError`` says in
    the user's terms what is wrong with the spec."""
    axes: list[tuple[str, list[Any]]] = []
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        name, equals, values = part.partition("=")
        name = name.strip()
        if not equals or not name.isidentifier():
            raise ValueError(
                f'--sweep: {part!r} is not name=value,value (e.g. "units=32,64; lr=1e-3,1e-4")'
            )
        if any(name == seen for seen, _ in axes):
            raise ValueError(f"--sweep: {name!r} is given twice")
        parsed = [_value(v.strip()) for v in values.split(",") if v.strip()]
        if not parsed:
            raise ValueError(f"--sweep: {name!r} has no values")
        axes.append((name, parsed))
    if not axes:
        raise ValueError("--sweep needs at least one name=value,value")
    names = [name for name, _ in axes]
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(values for _, values in axes))
    ]


def _value(text: str) -> Any:
    """A Python literal (32, 1e-3, 'relu', True), else the text itself (relu)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """How a point's outputs are found in the sweep's mapping: ``(("units", 32), ("lr", 1e-3))``."""
    return tuple(params.items())
