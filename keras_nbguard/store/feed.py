"""A run written to the store as it goes: its start, its RSS samples (thinned, peaks kept), its
epochs and its record. The feed follows the Session's events for the run's length, and hands
samples over at least every ``FLUSH_SECONDS``, so a kernel killed mid-run leaves its run with its
last samples.

The run's start row waits for the first of those hand-overs, or for the run's end, written with
it on the cell's thread as the run ends (writer.py; after the cell's reply in a kernel: the
session's ``later``): a short run costs one write, and no wake of the writer thread. A kernel
killed in a run's first ``FLUSH_SECONDS`` leaves no row."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from keras_nbguard.store.history_db import start_row

if TYPE_CHECKING:
    from keras_nbguard.records.events import Events
    from keras_nbguard.records.run import RunKey, RunRecord
    from keras_nbguard.store.history_db import Store
    from keras_nbguard.store.writer import StartRow

FLUSH_SECONDS = 0.25  # a kernel killed 0.7 s into a run still leaves 0.5 s of its samples
SAMPLE_STEP = 0.1  # seconds between stored RSS samples at first (the record keeps its own series)
LEVEL_ROWS = 600  # stored samples at one step before the step doubles: a 6-hour run keeps ~5,400


class StartedRun(Protocol):
    """What the store keeps of a run as it starts (a ``Run`` has these)."""

    @property
    def id(self) -> str: ...
    @property
    def key(self) -> RunKey | None: ...
    @property
    def label(self) -> str: ...
    @property
    def run_number(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def rss_at_start(self) -> int | None: ...


def follow(store: Store, events: Events, run_id: str) -> RunFeed:
    """Hand the run's samples and epochs to the store as they come, until ``record_end``."""
    feed = RunFeed(store, run_id)
    events.subscribe("sample", feed.on_sample)
    events.subscribe("sampled", feed.on_batch_end)
    events.subscribe("epoch", feed.on_epoch)
    return feed


def record_start(
    store: Store, feed: RunFeed, run: StartedRun, warn: Callable[[str], object]
) -> None:
    """The run's start row, held by its feed until the feed's first write (see above)."""
    if run.key is None:
        return
    try:
        feed.hold_start(
            start_row(run.id, run.key, run.label, run.run_number, run.started_at, run.rss_at_start)
        )
    except Exception as exc:
        warn(f"run history: the run start was not stored ({exc})")


def record_end(
    store: Store,
    events: Events,
    feed: RunFeed,
    record: RunRecord | None,
    warn: Callable[[str], object],
) -> None:
    """Stop following the run and store its record (None: none could be made; the stored run
    keeps its start and samples)."""
    events.unsubscribe("sample", feed.on_sample)
    events.unsubscribe("sampled", feed.on_batch_end)
    events.unsubscribe("epoch", feed.on_epoch)
    try:
        last_samples = feed.close()
        store.run_finished(feed.run_id, record, last_samples, start=feed.unwritten_start())
    except Exception as exc:
        warn(f"run history: the run's result was not stored ({exc})")


class RunFeed:
    """Feeds one run's RSS series to the store: one sample per step (the largest seen in that
    step, so spikes survive), handed to the writer at most every ``FLUSH_SECONDS``. The step
    starts at ``SAMPLE_STEP`` and doubles after every ``LEVEL_ROWS`` rows, so a long run keeps a
    few thousand rows (the start in detail), and every reader of them stays bounded."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store = store
        self.run_id = run_id
        self._pending: list[tuple[float, int]] = []
        self._window: tuple[float, int] | None = None
        self._last_flush = time.monotonic()
        self._step, self._rows = SAMPLE_STEP, 0
        self._start: StartRow | None = None  # the run's start row, until a first write takes it
        self._start_lock = threading.Lock()  # samples come on the sampler thread

    def hold_start(self, row: StartRow) -> None:
        self._start = row

    def unwritten_start(self) -> StartRow | None:
        """The held start row, once: whoever writes first for the run writes it first."""
        with self._start_lock:
            start, self._start = self._start, None
        return start

    def on_sample(self, t: float, rss: int) -> None:  # called on the sampler thread
        window = self._window
        if window is None or t - window[0] >= self._step:
            if window is not None:
                self._pending.append(window)
                self._rows += 1
                if self._rows % LEVEL_ROWS == 0:
                    self._step *= 2
            self._window = (t, rss)
        elif rss > window[1]:
            self._window = (window[0], rss)
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self._hand_over()

    def on_batch_end(self) -> None:
        """The samples drained from the helper come a batch at a time: the last of a batch
        must not wait for the next batch to be handed over (a kill can come first)."""
        if self._pending:
            self._hand_over()

    def on_epoch(self, epoch: int, seconds: float) -> None:
        self._store.add_epoch(self.run_id, epoch, seconds, start=self.unwritten_start())

    def close(self) -> list[tuple[float, int]]:
        """The samples not handed over yet: the caller writes them with the run's end."""
        if self._window is not None:
            self._pending.append(self._window)
            self._window = None
        pending, self._pending = self._pending, []
        return pending

    def _hand_over(self) -> None:
        pending, self._pending = self._pending, []
        self._last_flush = time.monotonic()
        self._store.add_samples(self.run_id, pending, start=self.unwritten_start())
