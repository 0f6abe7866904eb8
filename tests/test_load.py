"""Loading, reloading and unloading the extension; what loading costs and imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import keras_nbguard

FRESH_KERNEL = textwrap.dedent("""
    import json, os, sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "keras_nbguard")
    after_load = {m: m in sys.modules for m in ("tensorflow", "keras", "pynvml", "plotly",
                                                "ipywidgets")}
    growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    # The first run imports Keras itself: its fit must still be timed.
    result = shell.run_cell('''%%kerasrun --label first --quiet
    import numpy as np, keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.ones((32, 4)), np.ones((32, 1)), epochs=2, verbose=0)
    ''')
    import keras_nbguard
    record = keras_nbguard.runs("first")[0]
    print(json.dumps({"after_load": after_load, "growth": growth, "ok": result.success,
                      "epochs": [f.epochs for f in record.fits], "traces": record.traces,
                      "cleared": record.cleared}))
""")


def run_fresh(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_FORCE_GPU_ALLOW_GROWTH"}
    env.update(env_extra, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(
        [sys.executable, "-c", FRESH_KERNEL],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_load_imports_no_tensorflow_and_a_first_run_that_imports_keras_is_timed():
    report = run_fresh({})
    assert report["after_load"] == {
        "tensorflow": False,
        "keras": False,
        "pynvml": False,
        "plotly": False,
        "ipywidgets": False,
    }
    assert report["growth"] == "true"
    assert report["ok"] and report["epochs"] == [2] and report["traces"] >= 1
    assert report["cleared"] is False  # nothing to clear before Keras existed


@pytest.mark.slow
def test_users_own_growth_setting_is_kept():
    assert run_fresh({"TF_FORCE_GPU_ALLOW_GROWTH": "false"})["growth"] == "false"


def our_pre_run_cell_callbacks(shell) -> int:
    return sum(
        getattr(cb, "__qualname__", "").startswith("KerasMagics.")
        for cb in shell.events.callbacks["pre_run_cell"]
    )


def test_reload_three_times_leaves_exactly_one_of_each(shell):
    for _ in range(3):
        shell.run_line_magic("reload_ext", "keras_nbguard")
    assert our_pre_run_cell_callbacks(shell) == 1
    assert "kerasrun" in shell.magics_manager.magics["cell"]
    assert shell.run_cell("%%kerasrun --quiet --label r\nz = 1\n").success
    assert len(keras_nbguard.runs("r")) == 1


def test_unload_removes_every_hook(shell):
    import keras

    shell.run_line_magic("unload_ext", "keras_nbguard")
    try:
        assert our_pre_run_cell_callbacks(shell) == 0
        assert "kerasrun" not in shell.magics_manager.magics["cell"]
        assert "nbguard" not in shell.magics_manager.magics["line"]
        assert "fit" not in keras.Model.__dict__
        assert not [f for f in sys.meta_path if type(f).__name__ == "ImportWatch"]
    finally:
        shell.run_line_magic("load_ext", "keras_nbguard")


def test_unload_and_load_ten_times_leaves_no_thread_and_no_file_open(shell):
    import threading

    import psutil

    process = psutil.Process()

    def cycle() -> None:
        shell.run_line_magic("unload_ext", "keras_nbguard")
        shell.run_line_magic("load_ext", "keras_nbguard")
        assert shell.run_cell("%%kerasrun --quiet --label cycle\nz = 1\n").success

    cycle()  # whatever a first run starts once (IPython's own threads, imports)
    threads, fds = threading.active_count(), process.num_fds()

    def writers() -> set[threading.Thread]:  # other tests' stores may still have theirs
        return {t for t in threading.enumerate() if t.name == "keras-nbguard-store"}

    before = writers()
    for _ in range(10):
        cycle()
    assert threading.active_count() <= threads
    assert process.num_fds() <= fds
    after = writers()
    # at most the session's own, anew (none when its runs were written on the cell's thread)
    assert len(after - before) <= 1 and len(after) <= len(before)
    assert [r.run_number for r in keras_nbguard.runs("cycle")] == list(range(1, 12))
