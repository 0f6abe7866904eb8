"""One-click resets: what each does, as plain functions the Session runs (now, or after a run)."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

from keras_nbguard.prepare.before_run import clear_every_keras
from keras_nbguard.records.formatting import fmt_bytes


@dataclass(frozen=True)
class ActionReport:
    """What a reset did: ``status`` is "done", "queued" (a run is going) or "failed"."""

    action: str
    status: str
    message: str
    rss_before: int | None = None
    rss_after: int | None = None

    def text(self) -> str:
        if self.status != "done":
            return f"{self.action}: {self.message}"
        return (
            f"{self.action}: {self.message} (RSS {fmt_bytes(self.rss_before)} → "
            f"{fmt_bytes(self.rss_after)})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())


def clear_keras_session() -> str:
    cleared, problems = clear_every_keras()  # mixed precision survives the button too
    if not cleared:
        gc.collect()
        return "Keras is not imported; ran gc"
    return "cleared the Keras session and ran gc" + "".join(f"; {p}" for p in problems)


def clear_output_cache(shell: Any) -> str:
    """Forget Out[n], _n, _, __, ___ (a History there keeps its model alive)."""
    if shell is None:
        return "no IPython shell: there is no output cache"
    numbers = list(shell.user_ns.get("Out", {}))
    # IPython's own %reset out (flush: Out, _N, _, __, ___, then gc) leaves the copies it keeps
    # in user_ns_hidden, which hold a History too: those go first, so flush's gc frees it all
    hidden = shell.user_ns_hidden
    for key in ("_", "__", "___", *(f"_{n}" for n in numbers)):
        if key in hidden:
            hidden[key] = ""
    shell.displayhook.flush()
    return f"cleared {len(numbers)} cached output(s)"
