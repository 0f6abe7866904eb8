"""Run records as flat rows: a CSV or JSON file, or a pandas DataFrame. Stdlib only (pandas on
demand).

One row per run, one column per figure (``run_row``, ``columns``: one definition for every
format). An unknown figure is an empty CSV cell (``null`` in JSON, ``None`` / NaN in a frame),
never 0, so a spreadsheet average is not dragged down by figures nobody measured. The file name's
ending chooses the format: ``.csv`` or ``.json`` (``FORMATS``); any other is refused.

A file is only ever created, never silently replaced: an existing one needs ``force``, and a
notebook, a SQLite database (the run history above all) or a ``protected`` path not even then.
The module is ``exporting`` so that it never shadows the package's ``export()`` function.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from keras_nbguard.records.run import RunRecord
from keras_nbguard.store.dbfile import SQLITE_MAGIC

COLUMNS = (
    "notebook",
    "kernel_id",
    "pid",
    "cell_id",
    "label",
    "run_number",
    "status",
    "started_at",
    "wall_seconds",
    "prepare_seconds",
    "fit_seconds",
    "fits",
    "epochs",
    "epoch_seconds",
    "rss_before",
    "rss_after",
    "rss_peak",
    "rss_delta",
    "delta_fit_seconds",
    "delta_rss_after",
    "gpu_tf_peak",
    "gpu_tf_current",
    "gpu_nvml_used",
    "gpu_nvml_process_used",
    "gpu_note",
    "traces",
    "dataset_traces",
    "dataset_trace_seconds",
    "framework_traces",
    "cleared",
    "deep_clean_entries",
    "error",
    "keras",
    "inference_seconds",
    "isolated",
)  # then a ``param_<name>`` column for each name a --sweep set (grouping by them is one call)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def run_row(record: RunRecord) -> dict[str, Any]:
    """One record as ``COLUMNS``: bytes in bytes, seconds in seconds, times in ISO 8601 (UTC)."""
    epochs = [s for fit in record.fits for s in fit.epoch_seconds]
    clean = record.deep_clean
    return {
        "notebook": record.notebook,
        "kernel_id": record.kernel_id,
        "pid": record.pid,
        "cell_id": record.cell_id,
        "label": record.label,
        "run_number": record.run_number,
        "status": record.status,
        "started_at": datetime.fromtimestamp(record.started_at, UTC).isoformat(),
        "wall_seconds": record.wall_seconds,
        "prepare_seconds": record.prepare_seconds,
        "fit_seconds": record.fit_seconds,
        "fits": len(record.fits),
        "epochs": len(epochs) if record.fits else None,
        # one cell, so the row stays a row; ";" keeps it clear of CSV's own separator
        "epoch_seconds": ";".join(f"{s:.6g}" for s in epochs) or None,
        "rss_before": record.rss_before,
        "rss_after": record.rss_after,
        "rss_peak": record.rss_peak,
        "rss_delta": record.rss_delta,
        "delta_fit_seconds": record.delta_fit_seconds,
        "delta_rss_after": record.delta_rss_after,
        "gpu_tf_peak": record.gpu.tf_peak,
        "gpu_tf_current": record.gpu.tf_current,
        "gpu_nvml_used": record.gpu.nvml_used,
        "gpu_nvml_process_used": record.gpu.nvml_process_used,
        "gpu_note": record.gpu.reason,
        "traces": record.traces,
        "dataset_traces": record.dataset_traces,
        "dataset_trace_seconds": record.dataset_trace_seconds,
        "framework_traces": record.framework_traces,
        "cleared": record.cleared,
        "deep_clean_entries": clean.entries if clean is not None and clean.available else None,
        "error": record.error,
        "keras": record.keras,
        "inference_seconds": sum(c.seconds for c in record.inference) if record.inference else None,
        "isolated": bool(record.isolated),
        **{f"param_{name}": value for name, value in (record.params or {}).items()},
    }


def columns(records: Sequence[RunRecord]) -> list[str]:
    """``COLUMNS``, then the sweep parameters' columns in the order first seen."""
    params = dict.fromkeys(f"param_{n}" for r in records for n in (r.params or {}))
    return [*COLUMNS, *params]


def write_runs(
    records: Sequence[RunRecord],
    path: str | os.PathLike[str],
    *,
    force: bool = False,
    protected: Iterable[str] = (),
) -> int:
    """Write ``records`` to the new file ``path``, as CSV or JSON by its ending (``.csv``,
    ``.json``); returns how many runs were written.

    ``force``: replace an existing file (whole, once the new one is written). Never a notebook,
    a SQLite database or one of ``protected``. Raises ``ValueError`` in the user's terms when
    the file can't or mustn't be written (another ending included)."""
    target = os.fspath(path)
    write = _check_target(target, force, protected)
    try:
        if os.path.exists(target):  # force: written beside it, then put in its place at once
            _replace(records, target, write)
        else:
            with open(target, "x", newline="", encoding="utf-8", errors="backslashreplace") as out:
                write(records, out)
    except FileExistsError as exc:  # made by someone else since the check
        raise ValueError(
            f"can't export to {target}: it exists already; add --force (force=True) to replace it"
        ) from exc
    except OSError as exc:
        raise ValueError(f"can't export to {target}: {exc.strerror or exc}") from exc
    except UnicodeError as exc:
        raise ValueError(f"can't export to {target!r}: no file can have that name ({exc})") from exc
    return len(records)


def _check_target(target: str, force: bool, protected: Iterable[str]) -> Writer:
    """The writer of ``target``'s format, once it may be written; else ``ValueError``."""
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise ValueError(f"can't export to {target}: folder {folder} does not exist")
    if os.path.isdir(target):
        raise ValueError(
            f"can't export to {target}: it is a folder; give a file name such as "
            f"{os.path.join(target, 'runs.csv')}"
        )
    real = os.path.realpath(target)  # a link to the notebook is the notebook
    if real.lower().endswith(".ipynb") or target.lower().endswith(".ipynb"):
        raise ValueError(
            f"won't export to {target}: it is a notebook; give a .csv or .json file name"
        )
    if real in {os.path.realpath(p) for p in protected}:
        raise ValueError(
            f"won't export to {target}: it is the run history database (or one of "
            f"its files); give a .csv or .json file name"
        )
    exists = os.path.exists(target)
    if exists and _is_sqlite(real):
        raise ValueError(
            f"won't export to {target}: it is a SQLite database (a run history?); "
            f"give a .csv or .json file name"
        )
    write = _writer(target)
    if exists and not force:
        raise ValueError(
            f"won't export to {target}: it exists already; add --force (force=True) to replace it"
        )
    return write


def _writer(target: str) -> Writer:
    """The format ``target``'s ending names (``runs.CSV`` too); another ending is a mistake: a
    CSV file named ``runs.json`` (or ``runs.xlsx``) would mislead whoever opens it."""
    stem, ending = os.path.splitext(target)
    write = FORMATS.get(ending.lower())
    if write is None:
        which = f"not {ending}" if ending else "and this name has no ending"
        raise ValueError(
            f"can't export to {target}: export writes .csv (CSV) or .json (JSON) files, {which}; "
            f"give a file name such as {stem}.csv or {stem}.json"
        )
    return write


def _is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _replace(records: Sequence[RunRecord], target: str, write: Writer) -> None:
    real = os.path.realpath(target)
    suffix = os.path.splitext(real)[1]
    fd, temp = tempfile.mkstemp(prefix=".export-", suffix=suffix, dir=os.path.dirname(real))
    try:
        with open(fd, "w", newline="", encoding="utf-8", errors="backslashreplace") as out:
            write(records, out)
        os.chmod(temp, os.stat(real).st_mode & 0o777)
        os.replace(temp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _write_csv(records: Sequence[RunRecord], out: Any) -> None:
    writer = csv.DictWriter(out, fieldnames=columns(records))
    writer.writeheader()
    for record in records:
        writer.writerow({k: _cell(v) for k, v in run_row(record).items()})


def _cell(value: Any) -> Any:
    """A CSV cell: empty when unknown; a text that a spreadsheet would run as a formula (it
    starts with =, +, -, @, a tab or a carriage return: OWASP's list) gets a leading ``'``, so a
    label like ``=HYPERLINK(...)`` is shown, not run. Numbers are written as they are."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _write_json(records: Sequence[RunRecord], out: Any) -> None:
    """A JSON array, one object a run (one a line), with the CSV's columns: numbers as numbers
    (the epochs' seconds a list of them), an unknown figure ``null``, a sweep parameter a run
    did not set ``null``. Text is kept as it is (no leading ``'``: JSON is not opened as a
    spreadsheet)."""
    names = columns(records)
    out.write("[")
    for i, record in enumerate(records):
        row = run_row(record)
        values = {name: _json_value(row.get(name)) for name in names}
        # a list in JSON, not the CSV cell's "1.82;0.97" (a walkthrough read it as one string)
        epochs = [s for fit in record.fits for s in fit.epoch_seconds]
        values["epoch_seconds"] = [_json_value(s) for s in epochs] or None
        out.write(("\n" if i == 0 else ",\n") + json.dumps(values, ensure_ascii=False, default=str))
    out.write("\n]\n" if records else "]\n")


def _json_value(value: Any) -> Any:
    """``None`` for a figure JSON can't hold as a number (NaN, infinity): unknown, never 0."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


Writer = Callable[[Sequence[RunRecord], Any], None]
FORMATS: dict[str, Writer] = {".csv": _write_csv, ".json": _write_json}


def runs_frame(records: Sequence[RunRecord]) -> Any:
    """The records as a pandas DataFrame (``started_at`` as timestamps, unknown figures NaN)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            "runs_frame() needs pandas, which is not installed here: "
            "pip install pandas (or use %nbguard export runs.csv)"
        ) from None
    frame = pd.DataFrame([run_row(r) for r in records], columns=columns(records))
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    return frame
