"""The kernel's one dashboard: made on the first ``dashboard()``, the same widget after, and
kept across ``%reload_ext`` (the new session is followed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .widget import Dashboard

if TYPE_CHECKING:
    from .session import Session

_last: Dashboard | None = None  # the kernel's one widget, kept across %reload_ext


def dashboard(session: Session | None = None, *, mode: str | None = None) -> Dashboard:
    """The kernel's dashboard (made on first call): display it, or end a cell with it.

    ``mode`` "widget" or "static" overrides the frontend detection (see ``widget_frontend``).
    """
    global _last
    from .session import get_session

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
