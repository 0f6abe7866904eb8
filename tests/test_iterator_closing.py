"""A run's tf.data iterators are deleted on a thread of their own (real TensorFlow, a real shell).

TensorFlow's own wait while deleting an autotuned iterator comes in some runs only; a dataset from
a generator stands in for it deterministically: deleting its iterator closes the generator, whose
``finally`` here waits until the test lets it go on."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import run

from keras_nbguard.collectors import iterator_closing

GENERATOR_DATA = """
import threading
import numpy as np
import tensorflow as tf
let_go, closed = threading.Event(), []
def batches():
    try:
        while True:
            yield np.ones((8, 4), "float32"), np.ones((8, 1), "float32")
    finally:  # runs when TensorFlow deletes the iterator that drew from it
        let_go.wait(30)
        closed.append(threading.current_thread().name)
spec = (tf.TensorSpec((8, 4)), tf.TensorSpec((8, 1)))
data = tf.data.Dataset.from_generator(batches, output_signature=spec)
net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
net.compile("sgd", "mse")
"""


def closed_after_the_cell(shell, body: str) -> list[str]:
    """Runs ``body`` as a run's cell after GENERATOR_DATA; the generators closed by the time it
    ended must be none (bare, the cell would have waited 30 s in each deletion, then closed it).
    Returns those closed once the test lets them go on, and the closer's thread is through."""
    assert run(shell, GENERATOR_DATA).success
    body += "closed_by_the_end = list(closed)\n"
    assert run(shell, "%%kerasrun --label closing --quiet\n" + body).success
    assert shell.user_ns["closed_by_the_end"] == []
    before = iterator_closing.closer().closed
    shell.user_ns["let_go"].set()
    assert iterator_closing.closer().wait(30)
    assert iterator_closing.closer().closed > before  # deleted there, all the same
    return shell.user_ns["closed"]


def test_a_fit_returns_without_waiting_for_its_data_to_be_deleted(keras_shell):
    fit = "net.fit(data, steps_per_epoch=3, epochs=2, verbose=0)\n"
    assert len(closed_after_the_cell(keras_shell, fit)) == 1  # the one iterator of that fit
    owned = sys.modules[iterator_closing.ITERATOR_MODULE].OwnedIterator
    assert "__del__" not in vars(owned)  # only while a run's cell runs


def test_a_training_loop_of_ones_own_goes_on_without_waiting_for_each_epochs_data(keras_shell):
    loop = (
        "for epoch in range(2):  # the guide's loop: a new iterator each epoch\n"
        "    for step, batch in enumerate(data):\n"
        "        if step == 2:\n"
        "            break  # (a generator drawn to its end would be closed by TensorFlow)\n"
    )
    assert len(closed_after_the_cell(keras_shell, loop)) == 2


def test_a_pipeline_caching_to_a_file_is_deleted_where_it_dies(keras_shell, tmp_path):
    """Its unfinished cache's lock goes with it: the next epoch's iterator, made at once, would
    find it held. Here the closer's thread is kept busy meanwhile, as TensorFlow's wait would."""
    assert run(keras_shell, GENERATOR_DATA).success
    keras_shell.user_ns["cache_path"] = str(tmp_path / "cache")
    cell = (
        "%%kerasrun --label cache-file --quiet\n"
        "busy = iter(data); next(busy); del busy  # on the closer's thread until let_go\n"
        "cached = tf.data.Dataset.range(100).cache(cache_path)\n"
        "for epoch in range(2):\n"
        "    for step, value in enumerate(cached):\n"
        "        if step == 3:\n"
        "            break\n"
    )
    try:
        result = run(keras_shell, cell)
    finally:
        keras_shell.user_ns["let_go"].set()
        assert iterator_closing.closer().wait(30)
    assert result.success, result.error_in_exec  # bare too: AlreadyExistsError if it waited


def test_outside_a_run_an_iterator_is_deleted_where_it_dies(keras_shell):
    assert run(keras_shell, GENERATOR_DATA + "let_go.set()\n").success
    assert run(
        keras_shell, "it = iter(data); next(it); del it\nclosed_at_del = list(closed)"
    ).success
    assert len(keras_shell.user_ns["closed_at_del"]) == 1  # at `del`, as TensorFlow does it


@pytest.mark.slow
def test_the_interpreter_waits_at_exit_for_an_iterator_still_being_deleted(tmp_path):
    """A process that ends right after a fit still lets go of its data whole, without crashing:
    the deletion finishes before the interpreter tears TensorFlow down."""
    marker = tmp_path / "closed"
    script = textwrap.dedent(
        f"""
        import os, time
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import numpy as np, tensorflow as tf, keras, keras_nbguard
        def batches():
            try:
                while True:
                    yield np.ones((8, 4), "float32"), np.ones((8, 1), "float32")
            finally:
                time.sleep(1.0)
                open({str(marker)!r}, "w").write("closed")
        spec = (tf.TensorSpec((8, 4)), tf.TensorSpec((8, 1)))
        data = tf.data.Dataset.from_generator(batches, output_signature=spec)
        net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        net.compile("sgd", "mse")
        with keras_nbguard.track("exit", clear=False):
            net.fit(data, steps_per_epoch=2, epochs=1, verbose=0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert marker.read_text() == "closed"
