"""A sweep as one table that fills in as its points end (``%%kerasrun --sweep``): a row per point
(params, status, fit, RSS peak, the top finding), a progress bar with points done / running /
left and a time estimate, the fastest point marked. Each point's full summary is one step away
(``%nbguard runs``). A display id, not a widget: every frontend shows it, nbconvert's HTML too.

The isolation package drives it: ``table = SweepTable(label, points)``, ``table.show()``, then
``table.started(params)`` and ``table.finished(params, record)`` (or ``status=`` when no record
came back) from any thread, ``table.tick()`` while points run (their times and the estimate
move), ``table.close()`` at the end.
"""

from __future__ import annotations

import html
import math
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from keras_nbguard.records.formatting import fmt_bytes, fmt_params, fmt_seconds
from keras_nbguard.records.run import RunRecord

ROWS = 40  # rows shown: the running points, then the latest ended; the rest summed up
PERIOD = 0.25  # seconds between redraws while points end quickly


def _key(params: dict[str, Any]) -> str:
    return fmt_params(params)


class SweepTable:
    def __init__(self, label: str, points: Sequence[dict[str, Any]]) -> None:
        self.label = label
        self._order = [_key(p) for p in points]
        self._state: dict[str, tuple[str, RunRecord | None, float | None]] = {
            k: ("waiting", None, None) for k in self._order
        }
        self._ended: list[str] = []  # in the order they ended
        self._took: list[float] = []  # each ended point's time, start to end
        self._begun = time.monotonic()
        self._lock = threading.Lock()
        self._display_id: str | None = None
        self._last_draw = 0.0

    # -- what the sweep tells it ------------------------------------------------------------
    def started(self, params: dict[str, Any]) -> None:
        with self._lock:
            self._state[_key(params)] = ("running", None, time.monotonic())
        self._redraw()

    def finished(
        self, params: dict[str, Any], record: RunRecord | None = None, status: str | None = None
    ) -> None:
        key = _key(params)
        with self._lock:
            since = self._state.get(key, ("", None, None))[2]
            self._state[key] = (status or (record.status if record else "n/a"), record, since)
            self._ended.append(key)
            if since is not None:
                self._took.append(time.monotonic() - since)
        self._redraw(force=True)

    def tick(self) -> None:
        """Nothing started or ended: redrawn at most every PERIOD for the running points' times
        and the time left, which move with the clock."""
        self._redraw()

    def close(self, stopped: bool = False) -> None:
        """``stopped``: the stop button ended the sweep; a point still shown running was
        stopped with it (its run is recorded interrupted)."""
        if stopped:
            with self._lock:
                for key, (status, record, since) in list(self._state.items()):
                    if status == "running":
                        self._state[key] = ("interrupted", record, since)
                        self._ended.append(key)
        self._redraw(force=True)

    # -- drawing ------------------------------------------------------------------------------
    def show(self) -> None:
        from IPython.display import display

        self._display_id = uuid.uuid4().hex
        display(self.bundle(), raw=True, display_id=self._display_id)

    def _redraw(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._display_id is None or (not force and now - self._last_draw < PERIOD):
            return
        self._last_draw = now
        from IPython.display import update_display

        update_display(self.bundle(), raw=True, display_id=self._display_id)

    def counts(self) -> tuple[int, int, int]:
        states = [s for s, _, _ in self._state.values()]
        running = states.count("running")
        left = states.count("waiting")
        return len(states) - running - left, running, left

    def estimate(self) -> float | None:
        """Seconds left (None: no point timed yet): what the running points have left of the
        time an ended point took on average, then the points left, as many at once as run now.
        (The sweep's time over the points ended grew with the clock while the last one ran: a
        walkthrough read 5.0, 6.0, then 7.0 s left, 4 s apart.)"""
        _, _, left = self.counts()
        if not self._took:
            return None
        pace = sum(self._took) / len(self._took)
        now = time.monotonic()
        running = [
            max(0.0, pace - (now - since))
            for status, _, since in self._state.values()
            if status == "running" and since is not None
        ]
        waves = math.ceil(left / max(1, len(running)))
        return max(running, default=0.0) + waves * pace

    def best(self) -> str | None:
        """The fastest point that ended ok (by fit time, else wall time)."""
        ok = [
            (r.fit_seconds if r.fit_seconds is not None else r.wall_seconds, k)
            for k, (s, r, _) in self._state.items()
            if r is not None and s == "ok"
        ]
        ok = [(t, k) for t, k in ok if t is not None]
        return min(ok)[1] if ok else None

    def rows(self) -> list[tuple[str, ...]]:
        """(mark, params, status, fit, RSS peak, top finding) for the rows shown."""
        with self._lock:
            running = [k for k in self._order if self._state[k][0] == "running"]
            keys = running + list(reversed(self._ended))
            keys = keys[:ROWS]
            best = self.best()
            out: list[tuple[str, ...]] = []
            for k in keys:
                status, record, since = self._state[k]
                if record is None:
                    # running: the time since its process started (its fit is not known yet)
                    if status == "running" and since is not None:
                        took, peak = f"{fmt_seconds(time.monotonic() - since)} since start", ""
                    else:
                        took, peak = "n/a", ""
                    out.append(("", k, status, took, peak, ""))
                    continue
                top = record.findings[0].split(" — ")[0] if record.findings else ""
                out.append(
                    (
                        "★" if k == best else "",
                        k,
                        status,
                        # a cell that fits nothing: said, not a bare n/a
                        fmt_seconds(record.fit_seconds)
                        if record.fit_seconds is not None
                        else "no fit",
                        fmt_bytes(record.rss_peak),
                        top,
                    )
                )
            return out

    def summary(self) -> str:
        done, running, left = self.counts()
        eta = self.estimate()
        when = f", about {fmt_seconds(eta)} left" if eta is not None and (running or left) else ""
        return (
            f"sweep {self.label}: {done} done, {running} running, {left} left of "
            f"{len(self._order)}{when}"
        )

    def bundle(self) -> dict[str, str]:
        done, running, left = self.counts()
        total = max(1, len(self._order))
        rows = self.rows()
        more = len(self._order) - len(rows) - left
        head = ("", "params", "status", "fit", "RSS peak", "top finding")
        cells = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        bar = (
            f"<div style='display:flex;height:8px;max-width:420px;background:#eee'>"
            f"<div style='width:{100 * done / total:.1f}%;background:#2e7d32'></div>"
            f"<div style='width:{100 * running / total:.1f}%;background:#90caf9'></div></div>"
        )
        note = (
            f"<div style='color:#777'>… {more} more ended: %nbguard runs --label "
            f"{html.escape(self.label)}</div>"
            if more > 0
            else ""
        )
        star = (  # none ended yet: no star to explain
            "★ the fastest fit (the shortest run where none fit); "
            if any(r[0] for r in rows)
            else ""
        )
        markup = (
            f"<div class='nbguard-sweep'><div><b>{html.escape(self.summary())}</b></div>"
            f"{bar}<table><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>{cells}"
            f"</table>{note}<div style='color:#777;font-size:85%'>{star}each "
            f"point's full summary: %nbguard runs</div></div>"
        )
        lines = [self.summary()] + ["  ".join(c for c in row if c) for row in rows]
        return {"text/html": markup, "text/plain": "\n".join(lines)}

    def _repr_html_(self) -> str:
        return self.bundle()["text/html"]

    def __repr__(self) -> str:
        return self.bundle()["text/plain"]
