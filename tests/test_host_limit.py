"""``--host-limit``: a run that adds more than the cap to the kernel's RSS is stopped as out of
memory, on a real shell, with real memory."""

from __future__ import annotations

import signal
import threading

import pytest
from helpers import run

import keras_nbguard
from keras_nbguard.collectors.host_limit import SIGNAL

GROW = """%%kerasrun --label grow --quiet --host-limit {limit}
import time
blocks = []
for _ in range(40):
    blocks.append(np.ones(2**20 // 8 * 4))  # 4 MiB, touched
    time.sleep(0.02)
"""


def test_a_run_past_the_cap_is_stopped_as_out_of_memory(keras_shell):
    result = run(keras_shell, GROW.format(limit=40))
    record = keras_nbguard.runs("grow")[-1]
    assert record.status == "oom" and type(result.error_in_exec).__name__ == "HostMemoryLimit"
    assert "passed --host-limit 40 MiB: the run was stopped" in record.error
    added = len(keras_shell.user_ns["blocks"]) * 4
    assert added < 40 * 4  # stopped soon after the cap: not at the loop's end (160 MiB)
    assert record.rss_peak - record.rss_before >= 40 * 2**20
    assert signal.getsignal(SIGNAL) == signal.SIG_DFL  # put back


def test_a_run_within_the_cap_is_untouched_and_the_cap_is_per_run(keras_shell):
    run(keras_shell, "held = [np.ones(2**20 // 8 * 64)]")  # 64 MiB the kernel keeps
    assert run(keras_shell, GROW.format(limit=400)).success
    assert run(keras_shell, GROW.format(limit=400)).success  # over its own start, again
    assert [r.status for r in keras_nbguard.runs("grow")] == ["ok", "ok"]
    with pytest.raises(Exception, match="--host-limit takes a positive number of MiB, not 0"):
        keras_shell.run_cell_magic("kerasrun", "--host-limit 0", "pass")


@pytest.mark.filterwarnings("ignore::keras_nbguard.NbguardWarning")  # said in the record
def test_a_run_off_the_main_thread_is_warned_not_capped(keras_shell):
    records = []

    def tracked() -> None:
        with keras_nbguard.track("thread", host_limit_mb=1) as run_:
            run_.hold = bytearray(8 * 2**20)
        records.append(run_.record)

    worker = threading.Thread(target=tracked)
    worker.start()
    worker.join()
    (record,) = records
    assert record.status == "ok"
    assert "--host-limit is not enforced: the run is not on the main thread" in record.warnings
