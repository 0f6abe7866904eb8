"""The kernel's one dashboard: made on the first ``dashboard()``, the same widget after, and
kept across ``%reload_ext`` (the new session is followed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from keras_nbguard.board.compact import CompactLine
from keras_nbguard.board.side_panel import forget, remember
from keras_nbguard.board.widget import Dashboard

if TYPE_CHECKING:
    from keras_nbguard.session.core import Session

_last: Dashboard | None = None  # the kernel's one widget, kept across %reload_ext


def dashboard(session: Session | None = None, *, mode: str | None = None) -> Dashboard:
    """The kernel's dashboard (made on first call): display it, or end a cell with it.

    ``mode`` "widget" or "static" overrides the frontend detection (see ``widget_frontend``).
    """
    global _last
    from keras_nbguard.session.core import get_session

    session = session or get_session()
    board = getattr(session, "dashboard", None) or _last
    if board is None or (mode is not None and board.mode != mode):
        if board is not None:
            board.detach()
        board = _last = Dashboard(session, mode)
    elif board.session is not session:
        board.attach(session)  # a new Session after %reload_ext: the same widget
    return board


def follow(session: Session) -> None:
    """After ``%reload_ext``: the dashboard already shown (if any) follows the new session."""
    if _last is not None:
        _last.attach(session)


_compact: CompactLine | None = None  # the kernel's one-line view (--compact)


def close() -> None:
    """Forget the kernel's dashboard and one-line view, their hooks and listeners removed: the
    next ``dashboard()`` makes a new one. Not at ``%unload_ext`` (the widget outlives a reload);
    for a caller that wants the kernel as new (the test fixtures)."""
    global _last, _compact
    if _last is not None:
        _last.detach()
        _last = None
    if _compact is not None:
        _compact.close()
        _compact = None


def show(session: Session, *, side: bool = False, compact: bool = False) -> None:
    """``%nbguard dashboard``: the dashboard under the cell, in a JupyterLab side panel
    (``side``), or as one line (``compact``)."""
    global _compact
    from IPython.display import display

    if compact:
        if _compact is None or _compact.session is not session:
            if _compact is not None:
                _compact.close()
            _compact = CompactLine(session)
        display(_compact)
        return
    board = dashboard(session)
    if not side:
        forget(session.notebook)  # asked for under the cell: no panel at the next kernel
        display(board)
        return
    try:
        from sidecar import Sidecar
    except ImportError:
        raise UsageError(
            "--side needs the sidecar package: pip install 'keras_nbguard[side]', "
            "then reload the JupyterLab page"
        ) from None
    if board.widget is None:
        raise UsageError(f"--side needs a widget frontend (JupyterLab); here: {board.reason}")
    # beside the notebook, half the main area: the right sidebar (250 px) is too narrow to plot
    with Sidecar(title="keras_nbguard", anchor="split-right"):
        display(board.widget)
    remember(session.notebook)  # the notebook's next kernel opens it again (side_panel.py)
