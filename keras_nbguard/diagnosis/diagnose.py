"""Diagnosis in words: the cause of a slower or fatter run, with the number behind it and one
thing to do, from the runs' records alone (pure: no model, no TensorFlow) — and, when shown,
the earlier runs' models checked against those still alive now.

The causes are in ``causes_across.py`` (a label's runs) and ``causes_within.py`` (one run);
what a finding is, the one trend and every threshold, in ``findings.py``. A label's causes within
a run are read over its ``RECENT`` runs, each finding naming its run (``mlp #3``): a cause shown
under run #1 is still there after run #2 — unless run #2 did the same work without it (it
traced and did not retrace, it fit without the slow callback): then it is fixed. Per label and
kind the latest run's finding is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from keras_nbguard.diagnosis.causes_across import across_runs, memory_note
from keras_nbguard.diagnosis.causes_within import stale_finding, within_run
from keras_nbguard.diagnosis.findings import (
    MIN_RUNS,
    RECENT,
    WINDOW,
    Finding,
    Findings,
    Trend,
    name_of,
)
from keras_nbguard.records.run import HeldModels, RunRecord

__all__ = ["MIN_RUNS", "Finding", "Findings", "Trend", "diagnose", "present", "summary_lines"]

# label -> the run numbers of its earlier runs' models alive now (the kernel's registry)
StaleNow = Callable[[str], tuple[int, ...]]


def diagnose(
    records: Sequence[RunRecord], stale_now: StaleNow | None = None, recent: int = RECENT
) -> Findings:
    """Findings for ``records`` (one kernel's runs, oldest first; any labels), most important
    first. ``stale_now``: which earlier runs' models of a label are alive at this moment; None
    takes the records' word (as they were when each run ended). ``recent``: the latest runs of
    each label whose own causes are read."""
    findings: list[Finding] = []
    notes: list[str] = []
    by_label: dict[str, list[RunRecord]] = {}
    for record in records:
        by_label.setdefault(record.label, []).append(record)
    for runs in by_label.values():
        findings += _label_findings(runs[-WINDOW:], stale_now, recent)
        if runs[-1].memory_note:  # the latest summary's rss trend row: no finding says it
            notes.append(f"{name_of(runs[-1])}: RSS {runs[-1].memory_note}")
    return Findings(sorted(findings, key=lambda f: -f.weight), notes)


def _label_findings(
    runs: list[RunRecord], stale_now: StaleNow | None, recent: int
) -> list[Finding]:
    found = [f for run in runs[-recent:] for f in within_run(run) if f.kind != "stale_models"]
    found += across_runs(runs)
    order = {name_of(r): i for i, r in enumerate(runs)} if found else {}
    kept: dict[str, tuple[int, Finding]] = {}
    for finding in found:
        at = max((order.get(name, -1) for name in finding.runs), default=-1)
        if any(_clears(later, finding.kind) for later in runs[at + 1 :]):
            continue  # a later run did the same work without it: fixed, or gone
        if finding.kind not in kept or at >= kept[finding.kind][0]:
            kept[finding.kind] = (at, finding)  # per kind, the latest run's
    findings = [f for _, f in kept.values()]
    stale = _stale(runs[-1], stale_now)
    if stale is not None:
        findings.append(stale)
    # a cause of an earlier run that the latest one no longer shows comes after the present ones
    latest = name_of(runs[-1])
    return [
        f if latest in f.runs else dataclasses.replace(f, weight=f.weight / 2) for f in findings
    ]


def _clears(run: RunRecord, kind: str) -> bool:
    """Whether ``run`` (a later run of the label, without a finding of ``kind``) did the work
    that showed the cause before — then the cause is fixed, or gone. A run that traced nothing
    (its functions cached) says nothing about retracing: the earlier finding stands."""
    if run.status != "ok":
        return False
    if kind == "retracing":
        return bool(run.traces)
    if kind in ("callbacks", "checkpoint_io", "input_pipeline", "epoch_slowdown"):
        return bool(run.fits)
    if kind == "gpu_growth_not_set":
        return run.gpu.known
    return True


def _stale(run: RunRecord, stale_now: StaleNow | None) -> Finding | None:
    """The latest run's stale models, less those no longer alive (freed, deleted, restarted)."""
    held = run.stale_models
    if held is None or not held.count or stale_now is None:
        return stale_finding(run, held)
    alive = set(stale_now(run.label))
    runs = tuple(n for n in held.runs if n in alive) if held.runs else tuple(sorted(alive))
    if not runs:
        return None
    if runs != held.runs:  # some of them went: how many are left is known, not where
        held = HeldModels(len(runs), runs, None, (), held.command)
    return stale_finding(run, held)


def present(session: Any, label: str | None = None) -> Findings:
    """What the kernel has now: the findings of this kernel's runs (since the last reset;
    ``label``'s only when given), its earlier runs' models checked against those still alive at
    this moment — a freed model's finding is gone, and a restarted kernel shows none of the
    models of the kernel before it."""
    return diagnose(session.runs(label, this_kernel=True), stale_now=alive_stale(session))


def alive_stale(session: Any) -> StaleNow:
    """label -> the run numbers whose models of that label are stale and alive now, from the
    session's registry of models (weak references, looked at when called)."""
    live = session.live
    if not live.tracked:  # no run handed over a model in this kernel: none can be stale
        return lambda label: ()
    registry = live.registry

    def alive(label: str) -> tuple[int, ...]:
        found = set()
        for model in registry.of_label(label):
            run = registry.last_run(model)
            if run is not None and registry.is_stale(model):
                found.add(run.run_number)
        return tuple(sorted(found))

    return alive


def with_findings(
    record: RunRecord, earlier: Sequence[RunRecord], warn: Callable[[str], object]
) -> RunRecord:
    """``record`` with the top findings about its label after it (``earlier``: the label's runs
    before it in this kernel; only the latest ``WINDOW`` are looked at)."""
    try:
        runs = [*earlier[-(WINDOW - 1) :], record]
        lines = summary_lines(runs)
        # (a run with Keras: a trivial cell's runs are spared the second look at the trend; an
        # isolated run's RSS is its own process's, which --isolate throws away)
        kept_here = record.cleared and not record.isolated
        note = memory_note(runs) if kept_here and not _names_growth(lines) else None
        if lines == record.findings and note == record.memory_note:
            return record
        return record.replaced(findings=lines, memory_note=note)
    except Exception as exc:  # a bug of ours must not lose the run
        warn(f"the run was not diagnosed: {type(exc).__name__}: {exc}")
        return record


def _names_growth(lines: Sequence[str]) -> bool:
    return any(line.startswith("state_growth:") for line in lines)


def summary_lines(runs: Sequence[RunRecord], count: int = 2) -> tuple[str, ...]:
    """The top findings about ``runs[-1]`` (of its label), a line each, for its run summary (not
    the stale models: the summary has its own line for them; not an earlier run's own cause)."""
    latest = name_of(runs[-1])
    findings = [
        f
        for f in diagnose(runs, recent=1)  # an earlier run's own causes: not here
        if f.kind != "stale_models" and latest in f.runs
    ]
    return tuple(f"{f.kind}: {f.message} — %nbguard diagnose" for f in findings[:count])
