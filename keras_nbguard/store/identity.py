"""Who and where a run is: the notebook (or script), the kernel and its process."""

from __future__ import annotations

import os
import re
import sys
import uuid
from functools import cache
from typing import Any

UNNAMED_KERNEL = "<kernel {kernel} without a notebook path, in {cwd}>"
NOTEBOOK_ENV = "KERAS_NBGUARD_NOTEBOOK"  # the notebook's name, for clients that don't tell it
LAUNCHERS = ("ipykernel_launcher.py", os.path.join("ipykernel", "__main__.py"))


def notebook_key(shell: Any = None) -> str:
    """The notebook's path as ``KERAS_NBGUARD_NOTEBOOK`` or Jupyter's session names it, else the
    script, else "<interactive>".

    A kernel started without a session name (nbconvert, nbclient, papermill: none of them tells
    the kernel the notebook's path) is keyed by its own kernel id and folder, so that two
    notebooks executed headless never share run numbers or "vs previous"; not by the path of
    ipykernel's launcher, which says nothing to a reader."""
    for name in (NOTEBOOK_ENV, "JPY_SESSION_NAME"):
        if os.environ.get(name):
            return os.environ[name]
    session = getattr(shell, "user_ns", {}).get("__session__") if shell is not None else None
    if session:
        return str(session)
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else None
    if script and script.endswith(LAUNCHERS):
        return UNNAMED_KERNEL.format(kernel=kernel_id(), cwd=os.getcwd())
    return os.path.abspath(script) if script else "<interactive>"


@cache
def kernel_id() -> str:
    """The Jupyter kernel id from the connection file; a stable id of this process otherwise."""
    try:
        if "ipykernel" not in sys.modules:  # terminal IPython or a script: no kernel id
            raise ImportError
        from ipykernel.connect import get_connection_file

        match = re.search(r"kernel-([\w-]+)\.json$", get_connection_file())
        if match:
            return match.group(1)
    except Exception:  # not running inside an ipykernel
        pass
    return f"process-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@cache
def process_started() -> float:
    import psutil

    return psutil.Process().create_time()
