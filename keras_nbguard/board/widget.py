"""The live dashboard: one per kernel: its figure (``plotting.Chart``: our own front end drawing
with plotly.js from plain rows), reset buttons, findings, referenced models.

The only module that imports ipywidgets, and only once a widget is built: importing it costs the
stdlib. The whole widget is made in the cell that shows it (about 0.3 s: ipywidgets, anywidget,
no plotly in the kernel), so the kernel never works for it after a cell ended. Without a widget
frontend (nbclient/nbconvert, terminal IPython, a script) the dashboard is a static HTML/SVG
summary that a kernel updates by display id (see ``widget_frontend``). The widget holds names,
strings and numbers, never a model.
"""

from __future__ import annotations

import contextlib
import html
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from keras_nbguard.board.buttons import make_buttons
from keras_nbguard.board.compare_picker import ComparePicker
from keras_nbguard.board.figures import figure_data, gpu_note, run_rows, trends
from keras_nbguard.board.findings_view import current_findings, findings_html
from keras_nbguard.board.frontend import current_shell, widget_frontend
from keras_nbguard.board.markup import header_html, lists_html, model_lines, static_view
from keras_nbguard.board.plotting import BOARD_CLASS, CHART_STYLE, make_chart
from keras_nbguard.records.downsample import halve
from keras_nbguard.records.formatting import fmt_bytes
from keras_nbguard.records.run import RunRecord

if TYPE_CHECKING:
    from keras_nbguard.diagnosis.findings import Finding
    from keras_nbguard.prepare.actions import ActionReport
    from keras_nbguard.run.tracking import Run
    from keras_nbguard.session.core import Session

LIVE_PERIOD = 0.25  # seconds between live pushes while a run goes: a few a second
LIVE_STEP = 0.05  # keep an RSS sample every 50 ms of the 100 Hz sampler
LIVE_MAX = 1200  # live points; halved (keeping maxima) beyond


class Dashboard:
    """One per kernel: ``dashboard()`` returns it, displaying it shows the same widget again."""

    def __init__(self, session: Session, mode: str | None = None) -> None:
        self.session = session
        shell = session.shell or current_shell()
        widget, self.reason = (
            widget_frontend(shell) if mode is None else (mode == "widget", f"mode={mode!r}")
        )
        self.mode = "widget" if widget else "static"
        self._lock = threading.RLock()  # every widget mutation, from any thread, holds it
        self._reports: list[str] = []
        self._models: list[str] = []  # the leak finder's lines: text, never a model
        self._findings: list[Finding] = []  # diagnose() of the kernel's runs, at each refresh
        self._run: Run | None = None
        # t, rss, each epoch's seconds, and the fit (1, 2, ...) each epoch belongs to
        self._live: tuple[list[float], list[float], list[float], list[int]] = ([], [], [], [])
        self._last_epoch = -1  # Keras' number of the last epoch seen: a lower one starts a fit
        self._live_title = "no run yet"
        self._last_push = 0.0
        self._display_id: str | None = None
        self._memo: dict[int, Any] = {}  # hover texts of the runs seen (records: pure data)
        self._head = ""
        self._shell: Any = None
        self._cell_running = False  # a cell runs on the main shell (IPython's pre/post_run_cell)
        self._deferred: list[str] = []
        self.chart: Any = None  # the figure (plotting.Chart)
        self.widget: Any = None
        self.picker: ComparePicker | None = None  # two runs side by side, in the widget
        self.buttons: dict[str, Any] = {}
        if widget:
            self._build_widget(shell)
        self.attach(session)
        done = session.runs(this_kernel=True)
        if done:  # made after runs: the live panel shows the last one, as if it had watched it
            self._on_record(done[-1])

    def _subscriptions(self) -> tuple[tuple[str, Any], ...]:
        return (
            ("start", self._on_start),
            ("sample", self._on_sample),
            ("epoch", self._on_epoch),
            ("record", self._on_record),
            ("action", self._on_action),
        )

    # -- wiring to the session ---------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Follow ``session`` (and stop following the previous one, e.g. after %reload_ext)."""
        self.detach()
        self.session = session
        for kind, fn in self._subscriptions():
            session.events.subscribe(kind, fn)
        session.dashboard = self
        self._shell = session.shell or current_shell()
        if hasattr(self._shell, "events"):
            self._shell.events.register("pre_run_cell", self._before_cell)
            self._shell.events.register("post_run_cell", self._after_cell)
        self.refresh()

    def detach(self) -> None:
        for kind, fn in self._subscriptions():
            self.session.events.unsubscribe(kind, fn)
        if getattr(self.session, "dashboard", None) is self:
            self.session.dashboard = None
        for event, fn in (("pre_run_cell", self._before_cell), ("post_run_cell", self._after_cell)):
            with contextlib.suppress(AttributeError, ValueError):
                self._shell.events.unregister(event, fn)

    def _on_start(self, run: Run) -> None:
        # before the run starts: only the live panels change, so no full redraw on its clock
        with self._lock:
            self._run = run
            self._live, self._last_epoch = ([], [], [], []), -1
            self._live_title = f"running: {run.label} #{run.run_number}"
            self._push_live()

    def _on_sample(self, t: float, rss: int) -> None:
        # the sampler thread, ~100 Hz: keep it cheap, never raise, never wait for the lock
        try:
            ts, ys, _, _ = self._live
            if not ts or t - ts[-1] >= LIVE_STEP:
                ts.append(t)
                ys.append(rss / 2**20)
                if len(ts) > LIVE_MAX:
                    kept = halve(list(zip(ts, ys, strict=True)))
                    ts[:], ys[:] = [t for t, _ in kept], [y for _, y in kept]
            now = time.monotonic()
            if now - self._last_push >= LIVE_PERIOD and self._lock.acquire(blocking=False):
                try:
                    self._last_push = now
                    self._push_live()
                finally:
                    self._lock.release()
        except Exception:
            pass  # a figure we could not draw must never stop the sampler

    def _on_epoch(self, epoch: int, seconds: float) -> None:
        # drawn by the sampler's next push; a cell of several fits (k folds, cross-validation,
        # a search) draws each fit's epochs as its own, not as one fit's epochs 1..n
        epochs, fits = self._live[2], self._live[3]
        fits.append(fits[-1] + int(epoch <= self._last_epoch) if fits else 1)  # (before its bar)
        self._last_epoch = epoch
        epochs.append(seconds)

    def _on_record(self, record: RunRecord) -> None:
        self._run = None
        samples = record.rss_samples
        epochs = [s for fit in record.fits for s in fit.epoch_seconds]
        fits = [n for n, fit in enumerate(record.fits, 1) for _ in fit.epoch_seconds]
        with self._lock:
            rss = [v / 2**20 for _, v in samples]
            self._live = ([t for t, _ in samples], rss, epochs, fits)
            self._live_title = f"last run: {record.label} #{record.run_number} ({record.status})"
            if record.isolated:  # the samples are its child's, not this kernel's
                self._live_title += ", the RSS of its own process"
        self.refresh()

    def _on_action(self, report: ActionReport) -> None:
        self._note(report.text(), failed=report.status == "failed")
        if report.action == "reset_history" and report.status == "done":
            with self._lock:  # the live panel and header agree with the emptied charts
                self._live, self._live_title = ([], [], [], []), "history reset: no run since"
        self.refresh()

    def _before_cell(self, info: Any = None) -> None:
        self._cell_running = True

    def _after_cell(self, result: Any = None) -> None:
        self._cell_running = False
        deferred, self._deferred = self._deferred, []
        for action in deferred:  # clicked on a subshell while a cell without a run was going
            self.session.perform(action)
        models = self._scan_models()
        if models != self._models:  # Out[n] is filled after the run's record
            self.refresh(models)

    def _scan_models(self) -> list[str]:
        """The leak finder's paths, stale flags and sizes (no Keras imported: no model; Keras 2
        is ``tf_keras``, where a dashboard read "none" beside two live models)."""
        if "keras" not in sys.modules and "tf_keras" not in sys.modules:
            return []
        try:
            return model_lines(self.session.leaks())
        except Exception as exc:  # a list we could not make must not break the dashboard
            return [f"n/a (the leak finder failed: {type(exc).__name__}: {exc})"]

    # -- buttons -------------------------------------------------------------------------------
    def click(self, action: str, _button: Any = None) -> None:
        """What a button does: the report arrives through the session's action listeners."""
        session = self.session
        if action not in session.actions:
            self._note(f"{action}: not available in this build (no {action!r} action yet)", True)
            self.refresh()
            return
        if (
            self._cell_running
            and session.current is None
            and threading.current_thread() is not threading.main_thread()
        ):
            # a click on a subshell while a cell runs outside any tracked run: that cell may be
            # in a fit the session cannot see, so wait for it as the session waits for a run
            if action not in self._deferred:
                self._deferred.append(action)
            self._note(f"{action}: queued: runs when the running cell ends")
            self.refresh()
            return
        try:
            session.perform(action)
        except Exception as exc:
            self._note(f"{action} failed: {type(exc).__name__}: {exc}", failed=True)
            self.refresh()
            raise  # under Output.capture(): the traceback is shown in the widget

    def _note(self, text: str, failed: bool = False) -> None:
        colour = "#c62828" if failed else "#2e7d32" if "queued" not in text else "#ef6c00"
        line = (
            f"<div style='color:{colour}'>{time.strftime('%H:%M:%S')} "
            f"{html.escape(text)}</div>"
        )  # one entry a line, newest first
        with self._lock:
            self._reports = [line, *self._reports][:6]

    # -- drawing -------------------------------------------------------------------------------
    def refresh(self, models: list[str] | None = None) -> None:
        """Redraw from the session's history (cheap enough to run after every run);
        ``models``: the referenced models when the caller has just scanned them."""
        with self._lock:  # also keeps two threads' redraws in order
            self._models = self._scan_models() if models is None else models
            runs = self.session.runs()  # a list made per call: once per redraw
            self._findings = current_findings(self.session)  # made afresh: the present
            if self.widget is not None:
                self._draw_widget(runs)
            elif self._display_id is not None and getattr(self._shell, "kernel", None):
                from IPython.display import update_display

                data = figure_data(runs, self._memo)
                update_display(self._bundle(data), raw=True, display_id=self._display_id)

    def _advice(self) -> str | None:
        """The batch advice for the last run's model, in one line (None: none was asked for)."""
        advice = self.session.last_run_batch_advice
        return None if advice is None else advice.text().removeprefix("batch advice: ")

    def _bundle(self, data: dict[str, Any] | None = None) -> dict[str, str]:
        return static_view(
            self.session.runs(),
            data or figure_data(self.session.runs()),
            self._reports,
            self._models,
            self._live_title,
            f"static view: {self.reason}",
            self._findings,
            self._advice(),
        )

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if self.widget is not None:  # the same widget again; the static view for other readers
            static = self._bundle()
            display(
                {**static, **self.widget._repr_mimebundle_(), "text/plain": static["text/plain"]},
                raw=True,
            )
            return
        self._display_id = self._display_id or uuid.uuid4().hex
        display(self._bundle(), raw=True, display_id=self._display_id)

    def __repr__(self) -> str:
        return self._bundle()["text/plain"]

    # -- the widget ----------------------------------------------------------------------------
    def _build_widget(self, shell: Any) -> None:
        import ipywidgets as w

        self._out = w.Output()
        self._top, self._bottom = w.HTML(), w.HTML()
        self.buttons = make_buttons(self._out, self.click)
        self.picker = ComparePicker()
        self.chart = make_chart()
        self.widget = w.VBox(
            [
                self._top,
                self.chart,
                w.HBox(list(self.buttons.values()), layout=w.Layout(flex_flow="row wrap")),
                self._bottom,
                self.picker.widget,
                self._out,
                w.HTML(CHART_STYLE),
            ]
        )  # a <style>: shows nothing
        self.widget.add_class(BOARD_CLASS)

    def _draw_widget(self, runs: list[RunRecord]) -> None:
        rows = run_rows(runs, self._memo)
        data = {"failed": sum(row["s"] != "ok" for row in rows), "trends": trends(runs)}
        self.chart.set_rows(rows)
        note = None if any(r.gpu.known for r in runs) or not runs else gpu_note(runs[-1])
        if self.chart.notes.get("gpu") != note:
            self.chart.notes = {"gpu": note}
        self._head = header_html(data, len(runs), "{live}")
        self._push_live()
        if self.picker is not None:
            self.picker.update(runs)
        self._bottom.value = findings_html(self._findings, len(runs)) + lists_html(
            self._reports, self._models, self._advice()
        )

    def _push_live(self) -> None:
        """Draw the run in progress (or the last run): epoch seconds and RSS over time."""
        if self.chart is None:
            return
        ts, ys, epochs, fits = (list(v) for v in self._live)
        live = self._live_title
        if self._run is not None and ts:
            live += f" · {ts[-1]:.1f} s, RSS {fmt_bytes(int(ys[-1] * 2**20))}"
        self.chart.set_live(ts, ys, epochs, live, fits=fits[: len(epochs)])
        self._top.value = self._head.replace("{live}", html.escape(live))
