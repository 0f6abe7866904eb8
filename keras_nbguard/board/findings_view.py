"""The dashboard's findings section: the kernel's causes in words, as HTML and as text."""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from typing import Any

from keras_nbguard.diagnosis.findings import Finding
from keras_nbguard.records.formatting import html_code

SHOWN = 5


def current_findings(session: Any, warn: Callable[[str], object] | None = None) -> list[Finding]:
    """The kernel's findings as they stand now (``diagnosis.present``: this kernel's runs, the
    earlier runs' models that are still alive), made afresh at each call; none (and a warning)
    if that fails: a bug of ours must not take the dashboard down.

    ``session``: the Session. (Given a list of records, as before, only those of this process
    are diagnosed and no model is called stale: whether one is alive, only the session knows.)"""
    from keras_nbguard.diagnosis.diagnose import diagnose, present  # not at %load_ext

    warn = warn or getattr(session, "warn_once", None) or (lambda text: None)
    try:
        if hasattr(session, "live"):
            return present(session)  # a list, with the rss trend notes
        mine = [r for r in session if r.pid in (None, os.getpid())]
        return [f for f in diagnose(mine) if f.kind != "stale_models"]
    except Exception as exc:
        warn(f"the dashboard's findings could not be made: {type(exc).__name__}: {exc}")
        return []


def findings_html(findings: Sequence[Finding], records: int) -> str:
    if not records:
        return ""
    notes = "".join(f"<div><i>note</i>: {html_code(note)}</div>" for note in _notes(findings))
    if not findings:
        return f"<div class='nbguard-findings'><b>Findings</b>: {none_found(notes)}{notes}</div>"
    items = "".join(
        f"<li><b>{html.escape(f.kind)}</b>: {html_code(f.message)}<br>"
        f"<i>→ {html_code(f.advice)}</i></li>"
        for f in findings[:SHOWN]
    )
    more = (
        f"<div>{len(findings) - SHOWN} more: <code>%nbguard diagnose</code></div>"
        if len(findings) > SHOWN
        else ""
    )
    return f"<div class='nbguard-findings'><b>Findings</b><ul>{items}</ul>{more}{notes}</div>"


def none_found(notes: object) -> str:
    """No finding, said so that a note under it (memory the framework keeps) does not contradict
    it: "nothing stands out" above "RSS +2.5 MiB a run left" read as a contradiction."""
    return "none in your code" if notes else "none, nothing stands out"


def findings_text(findings: Sequence[Finding]) -> list[str]:
    return [f"finding: {f.text()}" for f in findings[:SHOWN]] + [
        f"note: {note}" for note in _notes(findings)
    ]


def _notes(findings: Sequence[Finding]) -> tuple[str, ...]:
    """The rss trend notes ``diagnosis.present`` adds (none on a plain list of findings)."""
    return getattr(findings, "notes", ())
