"""``IsolatedRun``: the kernel's record of a run that happened in a child process. Its wall is
the kernel's (the child's start-up, the cell, and the transfers both ways), told apart in the
record's ``isolated`` line; the models that came back are the run's models."""

from __future__ import annotations

import dataclasses
import gc
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from keras_nbguard.isolation.parent import ChildResult
from keras_nbguard.records.formatting import fmt_size
from keras_nbguard.records.run import GpuReading, RunRecord
from keras_nbguard.records.samples import RssSamples
from keras_nbguard.run.tracking import Run


@dataclass
class Transfer:
    """Names sent to the child, or brought back from it."""

    names: int = 0
    models: int = 0
    nbytes: int = 0
    seconds: float | None = None  # loading what came back
    value: bool = False  # the cell's last value came back too (a History: ``model.fit(...)``)
    kept_apart: dict[str, str] = field(default_factory=dict)  # a model not rejoined, and why
    # sent in and trained there, through another model or a notebook function
    trained: list[str] = field(default_factory=list)
    # sent in, other than models, whose variables changed there: the notebook's took their values
    in_place: list[str] = field(default_factory=list)
    # a model loaded with the notebook's classes Keras can't rebuild (no **kwargs): which
    rebuilt: dict[str, list[str]] = field(default_factory=dict)

    def words(self, verb: str) -> str:
        parts = []
        if self.models:
            parts.append(f"{self.models} model{'s' if self.models > 1 else ''}")
        if self.names:
            parts.append(f"{self.names} name{'s' if self.names > 1 else ''}")
        if self.value:
            parts.append("the cell's value")
        if self.in_place:
            *some, last = self.in_place
            parts.append(f"the state of {', '.join(some) + ' and ' if some else ''}{last}")
        if not parts:
            return f"{verb} nothing"
        took = "" if self.seconds is None else f" in {self.seconds:.2f} s"
        apart = "".join(f" ({name}: {why})" for name, why in self.kept_apart.items())
        if self.trained:
            trained = ", ".join(self.trained)
            it = "them" if len(self.trained) > 1 else "it"
            apart += f" ({trained}: trained there, though the cell does not bind {it})"
        if self.rebuilt:
            which = "; ".join(f"{', '.join(c)} in {name}" for name, c in self.rebuilt.items())
            apart += (
                f" (rebuilt without **kwargs: {which}; the saved values their __init__ does "
                f"not take set after it: keras.models.load_model can't load these classes)"
            )
        # (KiB below a MiB: 18 names of 110 KiB read "0.0 MiB")
        return f"{verb} {' + '.join(parts)} {fmt_size(self.nbytes)}{took}{apart}"


class IsolatedRun(Run):
    """A run whose cell happens in a child process: nothing is prepared or measured in the
    kernel; the record is the child's own, marked isolated (or, if it died, the kernel's view of
    it: its RSS samples and how it ended)."""

    child: ChildResult | None = None
    params: dict[str, Any] | None = None
    not_sent: dict[str, str] | None = None
    sent: Transfer | None = None
    back: Transfer | None = None
    notes: tuple[str, ...] = ()  # the kernel's own: shared memory, a spare not used
    returned: tuple[weakref.ref[Any], ...] = ()  # the models that came back
    elapsed: float | None = None  # the wall, when the run is recorded after it ended (--parallel)

    def start(self) -> None:
        # The models earlier runs brought back live in the kernel, and the links of those only
        # their History held (Out[n], _) were cut after their runs (session/live_models.py):
        # this collection frees them, as an in-process run's does, and settles the cuts.
        if self.services.models_tracked():
            if self.services.models_going():
                self._attempt("collecting garbage", gc.collect)
            self._attempt("releasing earlier runs' models", lambda: self._released(None))
        self._t0 = time.perf_counter()

    @property
    def models(self) -> list[Any]:
        return list(self.returned)

    def stop(self, exc: BaseException | None) -> RunRecord:
        wall = self.elapsed if self.elapsed is not None else time.perf_counter() - self._t0
        child = self.child or ChildResult(exit="the child process did not start")
        record = self._from_child(child, exc)
        key = self.key
        self.record = dataclasses.replace(
            record,
            label=self.label,
            run_number=self.run_number,
            wall_seconds=wall,
            cleared=True,
            notebook=key.notebook if key else None,
            cell_id=key.cell_id if key else None,
            kernel_id=key.kernel_id if key else None,
            pid=key.pid if key else None,
            isolated=self._note(child, record),
            cell_seconds=record.wall_seconds if (child.result or {}).get("record") else None,
            params=self.params,
            findings=(),
            deep_clean=None,
            stale_models=None,
            released_models=None,
        )
        return self.record

    def _from_child(self, child: ChildResult, exc: BaseException | None) -> RunRecord:
        stored = (child.result or {}).get("record")
        if stored is not None:
            return RunRecord.from_dict(stored)
        samples = tuple(child.samples)
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "died"
        if child.exit and child.exit.startswith("interrupted"):
            status = "interrupted"
        if child.result is not None:  # it answered, but ran nothing (a syntax error)
            status = "error"
        return RunRecord(
            label=self.label,
            status=status,
            started_at=self.started_at,
            wall_seconds=child.wall,
            fit_seconds=None,
            fits=(),
            rss_before=samples[0][1] if samples else None,
            rss_after=samples[-1][1] if samples else None,
            rss_peak=max((rss for _, rss in samples), default=None),
            gpu=GpuReading(reason="the isolated process ended before its GPU was read"),
            cleared=True,
            traces=None,
            trace_reason="the isolated process ended first",
            # it may have fitted: it ended before it could say (a syntax error ran nothing)
            fit_reason=None if child.result is not None else "the isolated process ended first",
            error=child.exit or (child.result or {}).get("error"),
            rss_samples=RssSamples(samples),
        )

    def _note(self, child: ChildResult, record: RunRecord) -> str:
        """``fresh process (pid 12): start-up 0.91 s, sent 3 names 2.1 MiB, made there 0.02 s,
        the cell 4.30 s, saved there 0.10 s, back 1 model 0.2 MiB in 0.40 s``: the parts of the
        kernel's wall, then anything else worth a word. "made there": the names made in the
        child (a replay runs its lines, imports too); "saved there": what goes back, saved."""
        start = "n/a" if child.startup is None else f"{child.startup:.2f} s"
        parts = [f"start-up {start}"]
        result = child.result or {}
        if self.sent is not None:
            parts.append(self.sent.words("sent"))
        if result.get("inputs_seconds") is not None:
            parts.append(f"made there {result['inputs_seconds']:.2f} s")
        if result.get("record") is not None:
            parts.append(f"the cell {record.wall_seconds:.2f} s")
        if result.get("outputs_seconds") is not None:
            parts.append(f"saved there {result['outputs_seconds']:.2f} s")
        if self.back is not None:
            parts.append(self.back.words("back"))
        words = f"{child.where} (pid {child.pid}): " + ", ".join(parts)
        extra = [*self.notes, *child.notes]
        if self.not_sent:
            extra.append("not sent back: " + _by_reason(self.not_sent))
        return "; ".join([words, *extra])


def _by_reason(not_sent: dict[str, str]) -> str:
    """``np (a module: …), inputs, x and y (each a symbolic tensor of the cell's Keras graph: it
    stays there)``: names with one reason said together (a Functional model built in the cell
    leaves a symbolic tensor per layer output, and the reason written out eight times hid the
    one name that mattered)."""
    names: dict[str, list[str]] = {}
    for name, why in not_sent.items():
        names.setdefault(why, []).append(name)
    return ", ".join(
        f"{group[0]} ({why})"
        if len(group) == 1
        else f"{', '.join(group[:-1])} and {group[-1]} (each {why})"
        for why, group in names.items()
    )
