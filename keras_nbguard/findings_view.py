"""The dashboard's findings section: the kernel's causes in words, as HTML and as text."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from .findings import Finding
from .records import RunRecord

SHOWN = 5


def current_findings(records: Sequence[RunRecord], warn: Callable[[str], object]) -> list[Finding]:
    """``diagnose()`` of the kernel's runs; none (and a warning) if it fails: a bug of ours must
    not take the dashboard down."""
    from .diagnosis import diagnose  # not at %load_ext

    try:
        return list(diagnose(records))
    except Exception as exc:
        warn(f"the dashboard's findings could not be made: {type(exc).__name__}: {exc}")
        return []


def findings_html(findings: Sequence[Finding], records: int) -> str:
    if not records:
        return ""
    if not findings:
        return "<div class='nbguard-findings'><b>Findings</b>: none, nothing stands out</div>"
    items = "".join(
        f"<li><b>{html.escape(f.kind)}</b>: {html.escape(f.message)}<br>"
        f"<i>→ {html.escape(f.advice)}</i></li>"
        for f in findings[:SHOWN]
    )
    more = (
        f"<div>{len(findings) - SHOWN} more: <code>%nbguard diagnose</code></div>"
        if len(findings) > SHOWN
        else ""
    )
    return f"<div class='nbguard-findings'><b>Findings</b><ul>{items}</ul>{more}</div>"


def findings_text(findings: Sequence[Finding]) -> list[str]:
    return [f"finding: {f.text()}" for f in findings[:SHOWN]]
