"""The RSS sampler: samples taken by a helper process (no interpreter lock taken per sample), a
thread that only drains them, shared by consecutive runs and never by two at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
from helpers import wait_until

from keras_nbguard.collectors import process
from keras_nbguard.collectors.process import RssSampler
from keras_nbguard.collectors.rss_watch import DRAIN_SECONDS


def sampling_threads() -> int:
    """The process's OS threads (threading.active_count() misses _thread's)."""
    return len(os.listdir("/proc/self/task"))


def taken(sampler: RssSampler) -> list[tuple[float, int]]:
    """The samples taken so far: those drained, then those still in the helper's ring (read in
    that order, a drain in between can only hide some, never count one twice)."""
    drained = list(sampler.samples)
    watch = sampler._watch
    return drained + (watch.read(sampler._next)[1] if watch is not None else [])


def test_consecutive_runs_share_one_thread_and_each_is_sampled():
    for _ in range(3):  # the first may start the shared thread
        sampler = RssSampler(interval=0.005)
        sampler.start()
        wait_until(lambda: len(taken(sampler)) >= 5)  # noqa: B023 (called before the loop goes on)
        sampler.stop()
        assert len(sampler.samples) >= 5
    threads = sampling_threads()
    for _ in range(20):
        sampler = RssSampler(interval=0.005)
        sampler.start()
        sampler.stop()
    assert sampling_threads() == threads  # no thread per run
    assert process._shared is not None and process._shared.pid == os.getpid()


def test_two_samplers_at_once_are_both_sampled():
    first, second = RssSampler(interval=0.005), RssSampler(interval=0.005)
    first.start()
    second.start()  # the shared thread is busy: this one gets a thread of its own
    wait_until(lambda: len(taken(first)) >= 5 and len(taken(second)) >= 5)
    second.stop()
    first.stop()
    assert len(first.samples) >= 5 and len(second.samples) >= 5
    count = len(first.samples)
    time.sleep(0.05)
    assert len(first.samples) == count  # nothing sampled after stop


def test_a_broken_reader_ends_sampling_with_a_reason_and_the_next_run_is_sampled():
    calls = iter(range(3))

    def flaky() -> int:
        if next(calls, None) is None:
            raise OSError("gone")
        return 100

    broken = RssSampler(read=flaky, interval=0.005)
    broken.start()
    wait_until(lambda: not broken.running)  # it gave up on the broken reader, without stop()
    broken.stop()
    assert broken.error and "gone" in broken.error
    healthy = RssSampler(interval=0.005)
    healthy.start()
    wait_until(lambda: len(taken(healthy)) >= 5)
    healthy.stop()
    assert len(healthy.samples) >= 5 and healthy.error is None


def test_samples_come_from_a_helper_process_and_catch_a_short_peak():
    sampler = RssSampler(interval=0.01)
    sampler.start()
    wait_until(lambda: len(taken(sampler)) >= 10)
    first = taken(sampler)[0][1]
    blob = bytearray(200 * 2**20)  # 200 MiB for a moment, until a sample has seen it
    wait_until(lambda: max(rss for _, rss in taken(sampler)) - first > 150 * 2**20)
    seen = len(taken(sampler))
    del blob
    wait_until(lambda: len(taken(sampler)) >= max(30, seen + 10))  # and some after it
    sampler.stop()
    helper = process._helper()
    assert helper is not None and helper.process.pid != os.getpid()
    assert helper.process.poll() is None  # running
    assert sampler._watch is helper and sampler.lost == 0
    assert len(sampler.samples) >= 30
    first, peak, last = sampler.samples[0][1], sampler.peak, sampler.samples[-1][1]
    assert peak - first > 150 * 2**20 and peak - last > 150 * 2**20
    times = [t for t, _ in sampler.samples]
    assert times == sorted(times) and times[0] < 0.01


def test_the_thread_only_drains_a_few_times_a_second(monkeypatch):
    visits = []
    drain = RssSampler._drain
    monkeypatch.setattr(RssSampler, "_drain", lambda self: visits.append(1) or drain(self))
    sampler = RssSampler(interval=0.005)  # 200 Hz
    began = time.monotonic()
    sampler.start()
    wait_until(lambda: len(taken(sampler)) >= 100 and time.monotonic() - began >= 1.0)
    sampler.stop()
    seconds = time.monotonic() - began  # however long a loaded machine took to get there
    assert len(sampler.samples) >= 100
    assert len(visits) <= seconds / DRAIN_SECONDS + 2  # 4 a second, and the one at stop


def thread_wakeups(native_id: int) -> int:
    """How often the thread has gone to sleep and been woken (its voluntary context switches)."""
    with open(f"/proc/self/task/{native_id}/status") as status:
        line = next(line for line in status if line.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


def test_a_short_run_wakes_no_thread_and_a_long_one_is_drained_as_it_goes():
    sampler = RssSampler(interval=0.005)  # the shared thread and the helper exist after this
    sampler.start()
    time.sleep(0.4)
    sampler.stop()
    thread = process._shared
    assert thread is not None and thread.native_id is not None
    time.sleep(0.1)  # the thread back asleep
    before = thread_wakeups(thread.native_id)
    for _ in range(30):  # runs shorter than DRAIN_SECONDS: the helper never wakes the thread
        short = RssSampler(interval=0.005)
        short.start()
        short.stop()
        assert short._watch is not None and short.samples  # sampled, at its start and stop
        time.sleep(0.01)  # between cells: a woken thread would have gone back to sleep
    time.sleep(0.1)
    assert thread_wakeups(thread.native_id) - before <= 1  # (a late byte of the run before)
    drained = []
    long = RssSampler(interval=0.005)
    long.listeners.append(lambda t, rss: drained.append(t))
    long.start()
    wait_until(lambda: drained and max(drained) > 0.3)  # drained as it went, not only at stop
    during = list(drained)
    long.stop()
    assert thread_wakeups(thread.native_id) > before + 1
    assert max(during) < max(t for t, _ in long.samples)  # and the rest handed over at stop


def test_the_helper_ends_with_its_kernel():
    code = (
        "import time, sys; from keras_nbguard.collectors.process import RssSampler, _helper\n"
        "s = RssSampler(); s.start(); time.sleep(0.2)\n"
        "print(_helper().process.pid, flush=True); time.sleep(60)"
    )
    kernel = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    helper = psutil.Process(int(kernel.stdout.readline()))
    assert helper.is_running()
    kernel.send_signal(signal.SIGKILL)
    kernel.wait()
    helper.wait(timeout=5)  # raises if it outlives its kernel


def test_halving_keeps_every_peak_and_an_odd_last_sample():
    from keras_nbguard.records.downsample import halve

    series = [(0.0, 1), (0.1, 9), (0.2, 2), (0.3, 3), (0.4, 7)]
    assert halve(series) == [(0.1, 9), (0.3, 3), (0.4, 7)]
    assert halve([]) == [] and halve([(0.0, 5)]) == [(0.0, 5)]


def test_a_helper_that_ended_gives_way_to_the_sampling_thread(monkeypatch):
    monkeypatch.setattr(process, "_watch", None)  # a helper of this test's own (the shared
    monkeypatch.setattr(process, "_watch_failed_for", None)  # one comes back afterwards)
    helper = process._helper()
    assert helper is not None
    helper.process.kill()
    helper.process.wait()
    sampler = RssSampler(interval=0.005)
    sampler.start()
    assert sampler._watch is None
    wait_until(lambda: len(taken(sampler)) >= 5)
    sampler.stop()
    assert len(sampler.samples) >= 5  # sampled by the thread
    assert process._helper() is None  # and no new helper is started for every run
