"""Will a widget frontend render the dashboard, or does it need its static view?"""

from __future__ import annotations

import os
import sys
from typing import Any

MODE_ENV = "KERAS_NBGUARD_DASHBOARD"  # "widget" or "static" overrides the detection


def current_shell() -> Any:
    """IPython's running shell, if any (without importing IPython)."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def widget_frontend(shell: Any) -> tuple[bool, str]:
    """Whether a widget frontend will render us, and why we think so.

    A kernel cannot ask its client for a widget manager, and nbclient (which renders none) looks
    like any client. So: no ipykernel, no; ipywidgets' control comm opened by a widget manager,
    yes; a kernel started by a Jupyter server (it sets JPY_SESSION_NAME: JupyterLab, Notebook 7),
    VS Code or Colab, yes; else (nbclient, nbconvert, papermill) static. The env var overrides.
    """
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced in ("widget", "static"):
        return forced == "widget", f"{MODE_ENV}={forced}"
    if shell is None or getattr(shell, "kernel", None) is None:
        return False, "no Jupyter kernel (terminal IPython or a script)"
    widgets = sys.modules.get("ipywidgets")
    if widgets is not None and getattr(widgets.Widget, "_control_comm", None) is not None:
        return True, "a widget manager is connected"
    for hint, who in (("JPY_SESSION_NAME", "a Jupyter server"), ("VSCODE_PID", "VS Code")):
        if os.environ.get(hint):
            return True, f"kernel started by {who}"
    if "google.colab" in sys.modules:
        return True, "Colab"
    return False, f"no widget frontend (nbclient/nbconvert?); set {MODE_ENV}=widget to force"
