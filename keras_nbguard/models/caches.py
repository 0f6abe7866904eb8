"""What holds a model besides the user's own names: IPython's output cache (``Out``, ``_n``,
``_``/``__``/``___``) and the last exception's frames (``sys.last_*`` and IPython's copies), and
how to let go of each the way IPython itself would."""

from __future__ import annotations

import sys
from typing import Any

CACHE_NAMES = ("_", "__", "___")
TRACEBACK_ATTRS = ("last_type", "last_value", "last_traceback", "last_exc")


def pop_entry(mapping: Any, key: Any, text: str, done: dict[str, None]) -> None:
    if isinstance(mapping, dict) and key in mapping:
        del mapping[key]
        done[f"del {text}"] = None


def reset_cache_name(shell: Any, user_ns: Any, name: str, done: dict[str, None]) -> None:
    """``_``/``__``/``___`` go back to ``""`` in the namespace and the displayhook together (as
    ``%reset out`` does): IPython only keeps updating them while the two agree."""
    hook = getattr(shell, "displayhook", None)
    if hook is not None and hasattr(hook, name):
        setattr(hook, name, "")
    for names in (user_ns, getattr(shell, "user_ns_hidden", None)):
        if isinstance(names, dict) and name in names:
            names[name] = ""
    done[f"{name} = ''"] = None


def clear_tracebacks(shell: Any) -> list[str]:
    """Forget the last exception and its frames: ``sys.last_*`` and IPython's copies of them.
    Returns what was cleared, in the user's terms."""
    done: dict[str, None] = {}
    exc = getattr(sys, "last_value", None)
    for name in TRACEBACK_ATTRS:
        if hasattr(sys, name):
            delattr(sys, name)
            done[f"del sys.{name}"] = None
    tb = getattr(shell, "InteractiveTB", None)
    if tb is not None and getattr(tb, "tb", None) is not None:
        tb.tb = None
        done["get_ipython().InteractiveTB.tb = None"] = None
    result = getattr(shell, "last_execution_result", None)
    if exc is not None and result is not None and getattr(result, "error_in_exec", None) is exc:
        result.error_in_exec = None
        done["get_ipython().last_execution_result.error_in_exec = None"] = None
    return list(done)


def has_traceback(shell: Any) -> bool:
    return (
        any(getattr(sys, name, None) is not None for name in TRACEBACK_ATTRS)
        or getattr(getattr(shell, "InteractiveTB", None), "tb", None) is not None
    )
