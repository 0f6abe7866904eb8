"""Why a run's figure is unknown, in a few words: what the "n/a" of a table, a comparison or a
summary stands for. One place, so every view gives the same reason for the same gap."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records' own formatting asks here too, and run.py imports it
    from keras_nbguard.records.run import RunRecord

FIRST_RUN = "first run of its label"
RSS_UNREADABLE = "RSS unreadable"


def fit_unknown(record: RunRecord) -> str:
    if not record.fits:
        return record.fit_reason or "no fit"
    if not any(fit.reached_training for fit in record.fits):  # as the run's summary says it
        return f"{stopped_or_failed(record)} before its first epoch ended"
    return "not timed"


def epoch_unknown(record: RunRecord) -> str:
    """Why there is no mean epoch after the first (which traces): no fit, a fit that ended
    before its first epoch did, or fits of one epoch."""
    if not any(fit.reached_training for fit in record.fits):
        return fit_unknown(record)
    # keras.io's transfer learning fits twice, an epoch each: "one epoch" read as a miscount
    return (
        "one epoch" if len(record.fits) == 1 else f"each of its {len(record.fits)} fits one epoch"
    )


def fit_cut_short(record: RunRecord) -> str | None:
    """ "fit stopped part way" (the stop button) or "fit failed part way", where a fit of the run
    did not end; None where every fit ended. Its time is no whole fit's to compare."""
    if all(fit.completed for fit in record.fits):
        return None
    return f"fit {stopped_or_failed(record)} part way"


def stopped_or_failed(record: RunRecord) -> str:
    return "stopped" if record.status == "interrupted" else "failed"


def delta_fit_unknown(record: RunRecord) -> str:
    if record.previous_run is None:
        return FIRST_RUN
    if record.delta_fit_note and record.delta_fit_seconds is None:
        return record.delta_fit_note
    if record.fit_seconds is None:
        return fit_unknown(record)
    return "no fit in the run before"


def delta_rss_unknown(record: RunRecord) -> str:
    if record.previous_run is None:
        return FIRST_RUN
    if record.delta_rss_note:
        return record.delta_rss_note
    if record.rss_elsewhere:
        ran = "this run" if record.isolated else f"#{record.previous_run}"
        return f"{ran} ran isolated: its RSS is another process's"
    return RSS_UNREADABLE


def gpu_unknown(record: RunRecord) -> str:
    return record.gpu.reason or "GPU memory not read"


def traces_unknown(record: RunRecord) -> str:
    return record.trace_reason or "not counted"
