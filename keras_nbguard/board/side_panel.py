"""The dashboard's side panel across kernel restarts.

``%nbguard dashboard --side`` marks its notebook; when a new kernel of that notebook loads the
extension, the panel opens again with the new kernel's dashboard (the old panel, whose kernel is
gone, says so: see ``board_markup.RESTARTED``). The marks are a small JSON file beside the run
history. Stdlib only: this runs at every ``%load_ext``, and imports the widgets only when a panel
comes back.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keras_nbguard.session.core import Session

KEEP_DAYS = 30  # a mark older than this is dropped: the notebook was left long ago


def marks_path() -> str:
    from keras_nbguard.store.history_db import default_path

    return os.path.join(os.path.dirname(os.path.abspath(default_path())), "side_panels.json")


def _read() -> dict[str, float]:
    try:
        with open(marks_path(), encoding="utf-8") as file:
            marks = json.load(file)
    except (OSError, ValueError):
        return {}
    if not isinstance(marks, dict):
        return {}
    old = time.time() - KEEP_DAYS * 86400
    return {k: v for k, v in marks.items() if isinstance(v, (int, float)) and v >= old}


def _write(marks: dict[str, float]) -> None:
    path = marks_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(marks, file)
    os.replace(partial, path)  # another kernel reading it sees the old file or the new one


def remember(notebook: str) -> None:
    """The notebook's dashboard is in a side panel: its next kernel opens one again."""
    with contextlib.suppress(OSError):
        _write({**_read(), notebook: time.time()})


def forget(notebook: str) -> None:
    marks = _read()
    if marks.pop(notebook, None) is not None:
        with contextlib.suppress(OSError):
            _write(marks)


def wanted(notebook: str) -> bool:
    return notebook in _read()


def reopen(session: Session) -> None:
    """At ``%load_ext`` in a new kernel: the side panel the notebook had comes back."""
    try:
        if not wanted(session.notebook):
            return
        from keras_nbguard.board.frontend import widget_frontend

        if not widget_frontend(session.shell)[0]:
            return  # no widget frontend now (nbconvert, a terminal): the mark stays
        from keras_nbguard.board.kernel_board import show

        show(session, side=True)
    except Exception as exc:  # a panel we could not open must never break %load_ext
        session.warn_once(
            f"the dashboard's side panel did not come back: {type(exc).__name__}: {exc}"
        )
