"""The RSS sampler's thread: shared by consecutive runs, never by two at once."""

from __future__ import annotations

import os
import threading
import time

from keras_nbguard.collectors import process
from keras_nbguard.collectors.process import RssSampler


def sampling_threads() -> int:
    return threading.active_count()


def test_consecutive_runs_share_one_thread_and_each_is_sampled():
    for _ in range(3):  # the first may start the shared thread
        sampler = RssSampler(interval=0.005)
        sampler.start()
        time.sleep(0.1)
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
    time.sleep(0.15)
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
    time.sleep(0.1)
    assert not broken.running  # it gave up on the broken reader, without waiting for stop()
    broken.stop()
    assert broken.error and "gone" in broken.error
    healthy = RssSampler(interval=0.005)
    healthy.start()
    time.sleep(0.1)
    healthy.stop()
    assert len(healthy.samples) >= 5 and healthy.error is None
