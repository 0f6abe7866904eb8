"""Diagnosis in words: the cause of a slower or fatter run, with the number behind it and one
thing to do, from the runs' records alone (pure: no model, no TensorFlow).

The causes are in ``causes_across.py`` (a label's runs) and ``causes_within.py`` (one run);
what a finding is, and every threshold, in ``findings.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .causes_across import across_runs
from .causes_within import within_run
from .findings import MIN_RUNS, WINDOW, Finding, Findings, Trend
from .records import RunRecord

__all__ = ["MIN_RUNS", "Finding", "Findings", "Trend", "diagnose", "summary_lines"]


def diagnose(records: Sequence[RunRecord]) -> Findings:
    """Findings for ``records`` (one kernel's runs, oldest first; any labels), most important
    first."""
    findings: list[Finding] = []
    by_label: dict[str, list[RunRecord]] = {}
    for record in records:
        by_label.setdefault(record.label, []).append(record)
    for runs in by_label.values():
        runs = runs[-WINDOW:]
        findings += across_runs(runs)
        findings += within_run(runs[-1])
    return Findings(sorted(findings, key=lambda f: -f.weight))


def with_findings(
    record: RunRecord, earlier: Sequence[RunRecord], warn: Callable[[str], object]
) -> RunRecord:
    """``record`` with the top findings about its label after it (``earlier``: the label's runs
    before it in this kernel)."""
    try:
        return dataclasses.replace(record, findings=summary_lines([*earlier, record]))
    except Exception as exc:  # a bug of ours must not lose the run
        warn(f"the run was not diagnosed: {type(exc).__name__}: {exc}")
        return record


def summary_lines(runs: Sequence[RunRecord], count: int = 2) -> tuple[str, ...]:
    """The top findings about the label of ``runs[-1]``, a line each, for its run summary (not
    the stale models: the summary has its own line for them)."""
    findings = [f for f in diagnose(runs) if f.kind != "stale_models"][:count]
    return tuple(f"{f.kind}: {f.message} — %nbguard diagnose" for f in findings)
