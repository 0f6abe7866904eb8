"""The dashboard's reset buttons (ipywidgets), each calling ``click(action)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (short label: fits a 540 px output area in one row, what it does: the tooltip, action)
BUTTONS = (
    ("Clear session", "Clear Keras session: keras.utils.clear_session() and gc", "clear_session"),
    (
        "Free flagged",
        "Free flagged models: delete the stale models listed below (never the current run's)",
        "free",
    ),
    (
        "Clear Out[ ]",
        "Clear output cache: Out[n], _, __ and ___ let go of what cells returned",
        "clear_output_cache",
    ),
    (
        "Reset history",
        "Reset history: hide the runs so far (the database keeps them; "
        "%nbguard reset --undo shows them again)",
        "reset_history",
    ),
)


def make_buttons(out: Any, click: Callable[[str, Any], None]) -> dict[str, Any]:
    """One button per action; a failing click shows its traceback in ``out`` (an Output)."""
    import ipywidgets as w

    buttons = {}
    for text, tip, action in BUTTONS:
        button = w.Button(description=text, tooltip=tip, layout=w.Layout(width="auto"))
        button.on_click(lambda b, a=action: out.capture()(click)(a, b))
        # ipykernel 7.4 routes a comm's frontend messages to the subshell that last sent on it:
        # for a button, the main shell that created it, so a click would wait for the running
        # cell. A click expects no reply: let the frontend's subshell stand.
        if hasattr(button.comm, "_reply_subshell_for"):
            button.comm._reply_subshell_for = lambda _data, default: default
        buttons[action] = button
    return buttons
