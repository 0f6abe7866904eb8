"""The run options, and the one place their values are checked.

``configure()``, ``track()``, ``%nbguard config`` and ``%%kerasrun`` all go through
``checked_options``: sizes are positive whole numbers of MiB, a dtype policy is one Keras knows
(``float16`` means ``mixed_float16`` everywhere: pure float16 training gives NaNs), switches are
True or False. A wrong value is a ``ValueError`` that names the option the way the user wrote it
(``gpu_limit_mb`` in Python, ``--gpu-limit`` in a magic). Stdlib only; argparse never gets here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunOptions:
    """The per-run knobs: ``%%kerasrun`` options, or ``track()`` keyword arguments. Build changed
    ones with ``checked_options`` (``dataclasses.replace`` checks nothing)."""

    clear: bool = True
    deep_clean: bool = True  # also purge what clear_session leaves (see deepclean.py)
    gpu_growth: bool | None = None  # None: leave as configured at load
    gpu_limit_mb: int | None = None
    host_limit_mb: int | None = None  # what a run may add to the kernel's RSS (host_limit.py)
    mixed_precision: str | None = None  # a Keras dtype policy name, e.g. "mixed_float16"
    quiet: bool = False
    # keep earlier runs' models that only IPython's caches and Keras' History hold (autorelease.py)
    keep_stale: bool = False


FIELDS = tuple(f.name for f in dataclasses.fields(RunOptions))
SWITCHES = ("clear", "deep_clean", "quiet", "keep_stale")
SIZES = ("gpu_limit_mb", "host_limit_mb")
# The dtype policies a run can ask for; the short names mean the mixed ones, as Keras' own guide
# uses them (a pure float16 model trains to NaNs), in Python and in the magics alike.
POLICIES = {"mixed_float16", "mixed_bfloat16", "float32", "float64"}
SHORT_POLICIES = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def checked_options(
    base: RunOptions, spelling: Mapping[str, str] | None = None, **changes: Any
) -> RunOptions:
    """``base`` with ``changes`` (``RunOptions`` field names), each checked and put in its one
    form. ``TypeError`` for a name that is no option; ``ValueError`` for a wrong value, naming
    the option as ``spelling`` says the user wrote it (default: the field name)."""
    if not changes:
        return base
    return dataclasses.replace(base, **checked_changes(changes, spelling))


def checked_changes(
    changes: Mapping[str, Any], spelling: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``changes`` checked and normalized (see ``checked_options``), as a new dict."""
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise TypeError(
            f"unknown option(s): {', '.join(sorted(unknown))}; the options are {', '.join(FIELDS)}"
        )
    spelling = spelling or {}
    return {name: _check(name, value, spelling.get(name, name)) for name, value in changes.items()}


def _check(name: str, value: Any, shown: str) -> Any:
    if name in SWITCHES:
        return _switch(value, shown)
    if name == "gpu_growth":
        return None if value is None else _switch(value, shown)
    if name in SIZES:
        return None if value is None else _size(value, shown)
    return policy(value, shown)


def _switch(value: Any, shown: str) -> bool:
    # ``0``/``1`` and numpy's bools pass; ``"no"`` would be True by truthiness, so it doesn't
    if isinstance(value, str) or value not in (True, False):
        raise ValueError(f"{shown} takes True or False, not {value!r}")
    return bool(value)


def _size(value: Any, shown: str) -> int:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and value.is_integer():
        whole, value = True, int(value)
    if not whole:
        raise ValueError(
            f"{shown} takes a positive whole number of MiB (e.g. 4096), not "
            f"{value!r}" + (" (None: no limit)" if isinstance(value, str) else "")
        )
    if value <= 0:
        raise ValueError(f"{shown} takes a positive number of MiB, not {value} (None: no limit)")
    return int(value)


def policy(value: Any, shown: str = "mixed_precision") -> str | None:
    """A dtype policy in its one form: ``True``/``"float16"`` → ``"mixed_float16"``,
    ``"bfloat16"`` → ``"mixed_bfloat16"``, ``None``/``False`` → None (no policy set)."""
    if value is None or value is False:
        return None
    if value is True:
        return "mixed_float16"
    name = value.strip().lower() if isinstance(value, str) else ""
    name = SHORT_POLICIES.get(name, name)
    if name not in POLICIES:
        raise ValueError(
            f"{shown}: unknown policy {value!r}; use mixed_float16 (GPUs) or "
            f"mixed_bfloat16 (TPUs, recent CPUs/GPUs), or float32"
        )
    return name
