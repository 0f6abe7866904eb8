"""Two runs side by side: every figure, the change from the first to the second, and the findings
that differ (``%nbguard compare mlp:3 mlp:7``, or two labels' last runs)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from keras_nbguard.records import unknowns
from keras_nbguard.records.formatting import NA, fmt_bytes, fmt_seconds
from keras_nbguard.records.run import RunRecord

# "mlp:5" (an editor colours "mlp#5" as a comment), "mlp#5" and "mlp #5" as summaries write it
SPEC = re.compile(r"^(?P<label>.*?)\s*[#:](?P<number>\d+)$")
NUMBER = re.compile(r"^[#:]?(?P<number>\d+)$")  # "3", "#3": a run of the latest run's label
ELLIPSIS = "…"  # where a default label (a cell's first line) was cut


def find_run(records: Sequence[RunRecord], spec: str) -> RunRecord:
    """The run ``spec`` names: ``label:n`` (or ``label#n``, ``label #n``), or a label's last run;
    ``n`` or ``#n`` alone: run n of the latest run's label. A label that is itself the whole spec
    ("cnn:3" used as a label) is taken as the label; one that starts a single label stands for
    it (``gan:3`` for the default label ``gan = GAN(discriminator=discriminator, …``)."""
    spec = spec.strip()
    labels = list(dict.fromkeys(r.label for r in records))
    match = None if spec in labels else SPEC.match(spec) or NUMBER.match(spec)
    typed = spec if match is None else match.groupdict().get("label")
    implicit = not typed  # a number alone, "#3" too: the latest run's label
    if implicit and not records:
        raise ValueError(f"no run yet to take run {spec!r} of")
    label = _whole_label(typed or records[-1].label, labels)
    runs = [r for r in records if r.label == label]
    if match is None:
        return runs[-1]
    number = int(match.group("number"))
    for record in runs:
        if record.run_number == number:
            return record
    numbers = ", ".join(f"#{r.run_number}" for r in runs)
    others = [
        other
        for other in labels
        if other != label and any(r.run_number == number for r in records if r.label == other)
    ]
    elsewhere = (  # "compare 1 3" meant another label's runs, most likely
        f"; a number alone is a run of the latest run's label: for #{number} of "
        f"{others[-1]!r}, type {_spec(others[-1], number, labels)}"
        if implicit and others
        else ""
    )
    raise ValueError(f"{label!r} has no run #{number} (it has {numbers}){elsewhere}")


def _spec(label: str, number: int, labels: list[str]) -> str:
    """How to type run ``number`` of ``label``: its first word where no other label starts so
    (a default label is a cell's first line, cut), the whole label, quoted, where it has spaces."""
    whole = label.rstrip(ELLIPSIS).rstrip()
    word = re.match(r"[\w.]*", whole)
    start = word.group() if word else ""
    if start and sum(other.startswith(start) for other in labels) == 1:
        return f"{start}:{number}"
    return f"'{whole}:{number}'" if " " in whole else f"{whole}:{number}"


def _whole_label(given: str, labels: list[str]) -> str:
    """The label ``given`` names: itself, or the one label it starts (a default label ends in an
    ellipsis nobody types); a clear error otherwise."""
    if given in labels:
        return given
    typed = given.rstrip(ELLIPSIS).rstrip()
    starting = [label for label in labels if typed and label.startswith(typed)]
    if len(starting) == 1:
        return starting[0]
    known = ", ".join(sorted(repr(label) for label in labels)) or "none yet"
    if starting:
        raise ValueError(
            f"{given!r} starts {len(starting)} labels ({', '.join(map(repr, starting))}): "
            f"type more of the one you mean"
        )
    raise ValueError(
        f"no run labelled {given!r} (labels: {known}); name a run as 'label:3' (the start of a "
        f"label will do), '3' for run 3 of the latest label, or a label for its last run"
    )


def compare_runs(records: Sequence[RunRecord], specs: Sequence[str]) -> Comparison:
    if len(specs) != 2:
        raise ValueError(
            "%nbguard compare takes two runs: %nbguard compare mlp:3 mlp:7 (or two "
            "labels, for their last runs; quote a label with spaces)"
        )
    return Comparison(find_run(records, specs[0]), find_run(records, specs[1]))


Value = Callable[[RunRecord], float | None]
Show = Callable[[float | None, bool], str]
Why = Callable[[RunRecord], str]  # why a run's figure is unknown, in a few words
Figure = tuple[str, Value, Show, Why]


def _seconds(value: float | None, signed: bool = False) -> str:
    return fmt_seconds(value, signed=signed)


def _bytes(value: float | None, signed: bool = False) -> str:
    return fmt_bytes(None if value is None else int(value), signed=signed)


def _count(value: float | None, signed: bool = False) -> str:
    return NA if value is None else f"{value:+.0f}" if signed else f"{value:.0f}"


def _mean_epoch(record: RunRecord) -> float | None:
    epochs = [s for fit in record.fits for s in fit.epoch_seconds[1:]]  # the first one traces
    return sum(epochs) / len(epochs) if epochs else None


def _callbacks(record: RunRecord) -> float | None:
    values = [f.callback_seconds for f in record.fits if f.callback_seconds is not None]
    return sum(values) if values else None


def _ours(record: RunRecord) -> float | None:
    return sum(seconds for _, seconds in record.own_time) if record.own_time else None


def _said(reason: str) -> Why:
    return lambda record: reason


FIGURES: tuple[Figure, ...] = (
    ("wall", lambda r: r.wall_seconds, _seconds, _said("not recorded")),
    ("fit", lambda r: r.fit_seconds, _seconds, unknowns.fit_unknown),
    # beside the fit: its time over 2 epochs against 4 is other work, not a change of pace
    ("epochs", lambda r: r.epochs_run if r.fits else None, _count, unknowns.fit_unknown),
    # the first epoch traces: a fit of one epoch has none after it
    ("epoch (mean, after the first)", _mean_epoch, _seconds, unknowns.epoch_unknown),
    ("your callbacks", _callbacks, _seconds, unknowns.fit_unknown),
    # the summary's own row: our time before and after the cell (a part under 0.5 ms is left out)
    ("ours", _ours, _seconds, _said("every part under 0.5 ms, or not recorded")),
    ("rss before", lambda r: r.rss_before, _bytes, _said("unreadable")),
    ("rss after", lambda r: r.rss_after, _bytes, _said("unreadable")),
    ("rss peak", lambda r: r.rss_peak, _bytes, _said("unreadable")),
    ("gpu peak", lambda r: r.gpu.tf_peak, _bytes, unknowns.gpu_unknown),
    ("tf.function traces", lambda r: r.traces, _count, unknowns.traces_unknown),
    ("tf.data traces", lambda r: r.dataset_traces, _count, _said("not counted")),
)


# figures of the process a run ran in: an isolated run's are its child's
PROCESS_FIGURES = frozenset({"rss before", "rss after", "rss peak", "gpu peak"})
# figures of whole fits: a fit stopped or failed part way has only a part of them
WHOLE_FIT_FIGURES = frozenset({"fit", "your callbacks"})
# figures of whole cells: a cell stopped or failed part way ran only a part of its code
WHOLE_CELL_FIGURES = frozenset({"wall"})
PAD = ' style="padding: 0.2em 0.6em"'  # each cell of the HTML table


@dataclass(frozen=True)
class Comparison:
    first: RunRecord
    second: RunRecord

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(figure, first, second, change); "n/a (why)" where a side is unknown, and the change
        then "n/a" (the side says why)."""
        rows = [("status", self.first.status, self.second.status, "")]
        apart = self._one_isolated()
        cut_short = self._fit_cut_short()
        cell_cut_short = self._cell_cut_short()
        for name, value, show, why in FIGURES:
            a, b = value(self.first), value(self.second)
            change = show(b - a, True) if a is not None and b is not None else NA
            if apart and name in PROCESS_FIGURES:
                change = f"{NA} ({apart})"
            if cut_short and name in WHOLE_FIT_FIGURES and a is not None and b is not None:
                change = f"{NA} ({cut_short})"  # as the summary's Δ fit says
            if cell_cut_short and name in WHOLE_CELL_FIGURES and a is not None and b is not None:
                change = f"{NA} ({cell_cut_short})"
            if name == "fit" and not change.startswith(NA) and (epochs := self._other_epochs()):
                change = f"{change} ({epochs})"
            rows.append(
                (
                    name,
                    show(a, False) if a is not None else f"{NA} ({why(self.first)})",
                    show(b, False) if b is not None else f"{NA} ({why(self.second)})",
                    change,
                )
            )
        return rows

    def _other_epochs(self) -> str | None:
        """``#2 ran 3 epochs, #5 4``: where the two runs' fits ran other epochs."""
        a, b = self.first.epochs_run, self.second.epochs_run
        if a == b or not self.first.fits or not self.second.fits:
            return None
        ran = f"ran {a} epoch{'s' if a != 1 else ''}"
        return f"{self._name(self.first)} {ran}, {self._name(self.second)} {b}"

    def _fit_cut_short(self) -> str | None:
        """Why two runs' fit times can't be compared: a fit of one of them did not end."""
        for record in (self.first, self.second):
            if reason := unknowns.fit_cut_short(record):
                return f"{self._name(record)}'s {reason}"
        return None

    def _cell_cut_short(self) -> str | None:
        """Why two runs' wall times can't be compared: a cell of them did not run to its end."""
        for record in (self.first, self.second):
            if record.status != "ok":
                return f"{self._name(record)} {unknowns.stopped_or_failed(record)} part way"
        return None

    def _one_isolated(self) -> str | None:
        """Why two runs' memory can't be compared: one ran isolated, the other in the kernel."""
        if bool(self.first.isolated) == bool(self.second.isolated):
            return None
        isolated = self.first if self.first.isolated else self.second
        return f"{self._name(isolated)} ran isolated: another process's"

    def _name(self, record: RunRecord) -> str:
        """``#3`` beside a run of the same label; ``'err2' #1`` beside another label's (comparing
        `err #1` with `err2 #1`, "#1 failed part way" said neither which)."""
        if self.first.label == self.second.label:
            return f"#{record.run_number}"
        return f"{record.label!r} #{record.run_number}"

    def findings(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The findings each run's summary had that the other's did not, by kind (the texts
        name their own run, so two runs with the same cause never match word for word)."""
        a, b = self.first.findings, self.second.findings
        kinds_a, kinds_b = {_kind(f) for f in a}, {_kind(f) for f in b}
        return (
            tuple(f for f in a if _kind(f) not in kinds_b),
            tuple(f for f in b if _kind(f) not in kinds_a),
        )

    def _names(self) -> tuple[str, str]:
        return (
            f"{self.first.label} #{self.first.run_number}",
            f"{self.second.label} #{self.second.run_number}",
        )

    def text(self) -> str:
        first, second = self._names()
        table = [("", first, second, "change"), *self.rows()]
        widths = [max(len(row[i]) for row in table) for i in range(4)]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in table
        ]
        only_first, only_second = self.findings()
        lines += [f"only {first}: {f}" for f in only_first]
        lines += [f"only {second}: {f}" for f in only_second]
        return "\n".join(lines)

    def _repr_pretty_(self, p: object, cycle: bool) -> None:
        p.text(self.text())  # type: ignore[attr-defined]

    def _repr_html_(self) -> str:
        first, second = self._names()
        # padded here: in the dashboard's picker (a widget, no notebook styles) the two runs'
        # names ran together ("…False #4 base_model.trainable = False #5 change")
        head = "".join(f"<th{PAD}>{html.escape(c)}</th>" for c in ("", first, second, "change"))
        body = "".join(
            "<tr>" + "".join(f"<td{_padded(c)}>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows()
        )
        only_first, only_second = self.findings()
        notes = "".join(
            f"<li>only {html.escape(name)}: {html.escape(f)}</li>"
            for name, found in ((first, only_first), (second, only_second))
            for f in found
        )
        return f"<table><tr>{head}</tr>{body}</table>" + (f"<ul>{notes}</ul>" if notes else "")


def _padded(cell: str) -> str:
    """A cell's style: a figure stays on one line ("+4.2 / MiB" wrapped at 1200 px); a long
    "n/a (why)" may wrap."""
    return PAD if len(cell) > NOWRAP_UP_TO else PAD[:-1] + '; white-space: nowrap"'


NOWRAP_UP_TO = 16  # characters: "-1,021.2 MiB", "+140 ms"


def _kind(finding_line: str) -> str:
    return finding_line.split(":", 1)[0]
