"""Freeing stale Keras models in a real IPython shell: names, caches, tracebacks, containers."""

from __future__ import annotations

import dataclasses
import sys
import weakref

import psutil
import pytest
from helpers import run

from keras_nbguard.models import ModelRegistry
from keras_nbguard.models.freeing import free


def made_by_runs(shell, *runs: tuple[str, int, list[str]]) -> ModelRegistry:
    """A registry as tracked runs would fill it: (label, run number, names of models built)."""
    registry = ModelRegistry()
    for label, number, names in runs:
        registry.note_run(label, number, [shell.user_ns[n] for n in names])
    return registry


def refs(shell, *names: str) -> list[weakref.ref]:
    return [weakref.ref(shell.user_ns[n]) for n in names]


def test_unbinds_stale_names_and_keeps_current_ones(ip):
    run(ip, "old = tiny('old')\nmodel = tiny('new')\nlr = 0.1\ndata = [1, 2]")
    registry = made_by_runs(ip, ("mlp", 1, ["old"]), ("mlp", 2, ["model"]))
    old, new = refs(ip, "old", "model")
    report = free(ip, registry)
    assert old() is None and new() is not None
    assert [leak.model_name for leak in report.freed] == ["old"]
    assert "del old" in report.released and report.kept == () and report.skipped_current == 1
    assert ip.user_ns["lr"] == 0.1 and ip.user_ns["data"] == [1, 2]  # nothing else touched
    assert report.rss_before and report.rss_after and report.cleared_session


def test_purges_the_output_cache_and_underscores(ip):
    n = run(ip, "tiny('fitted').fit(x, y, epochs=1, verbose=0)").execution_count
    run(ip, "6 * 7")  # an output that holds no model stays
    ref = weakref.ref(ip.user_ns[f"_{n}"].model)
    report = free(ip)  # held only by IPython's caches: stale whatever its run
    assert ref() is None, report.lines()
    assert n not in ip.user_ns["Out"] and f"_{n}" not in ip.user_ns
    assert ip.user_ns["Out"][n + 1] == 42
    assert f"del Out[{n}]" in report.released
    assert run(ip, "1 + 1").result == 2 and ip.user_ns["_"] == 2  # IPython still updates `_`


def test_clears_the_last_traceback(ip):
    run(
        ip,
        "keep = []\ndef boom():\n    m = tiny('in_traceback')\n    keep.append(1)\n"
        "    raise ValueError('boom')\n",
    )
    assert not run(ip, "boom()").success
    report = free(ip)
    assert [leak.model_name for leak in report.freed] == ["in_traceback"], report.lines()
    assert not hasattr(sys, "last_traceback") and "del sys.last_traceback" in report.released
    assert ip.user_ns["keep"] == [1]


@pytest.mark.slow
def test_user_containers_are_reported_not_changed_unless_asked(ip):
    run(
        ip,
        "models = [tiny('in_list')]\nresults = {'r': {'model': tiny('in_dict')}}\n"
        "class T: pass\nt = T()\nt.best = tiny('in_attr')\nbag = {tiny('in_set')}\n"
        "def make(m):\n    return lambda: m\ncb = make(tiny('in_closure'))\n"
        "def f(m=tiny('in_default')): pass",
    )
    names = ["in_list", "in_dict", "in_attr", "in_set", "in_closure", "in_default"]
    ns = ip.user_ns
    registry = ModelRegistry()
    registry.note_run(
        "mlp",
        1,
        [
            ns["models"][0],
            ns["results"]["r"]["model"],
            ns["t"].best,
            *ns["bag"],
            ns["cb"].__closure__[0].cell_contents,
            ns["f"].__defaults__[0],
        ],
    )
    registry.note_run("mlp", 2)
    report = free(ip, registry)
    assert report.freed == () and {leak.model_name for leak in report.kept} == set(names)
    kept = {leak.model_name: leak.paths for leak in report.kept}
    assert kept["in_list"] == ("models[0]",) and kept["in_dict"] == ('results["r"]["model"]',)
    assert ip.user_ns["models"][0] is not None and len(ip.user_ns["bag"]) == 1
    assert "containers=True" in "\n".join(report.lines())
    # nothing freed: the RSS figure beside it is not a model's (the dashboard's "Free flagged"
    # read "freed 0 model(s) (RSS 934.2 MiB → 904.1 MiB)")
    assert report.counts() == (
        f"no model freed, {len(names)} still held; any RSS drop is memory the collection and "
        "the clear gave back"
    )
    assert free(ip, ModelRegistry()).counts().startswith("no model freed (none flagged); ")

    report = free(ip, registry, containers=True)
    assert {leak.model_name for leak in report.freed} == set(names), report.lines()
    assert ip.user_ns["models"] == [None] and ip.user_ns["results"] == {"r": {"model": None}}
    assert ip.user_ns["t"].best is None and ip.user_ns["bag"] == set()
    assert ip.user_ns["cb"]() is None and ip.user_ns["f"].__defaults__ == (None,)
    assert "models[0] = None" in report.released
    # under the dashboard's button: what it unbound or replaced, not "freed 6 model(s)" alone
    # (a walkthrough found `kept` gone by its NameError)
    assert report.briefly().startswith(f"freed {len(names)} model(s) (")
    assert report.briefly().endswith(" …)") and report.released[0] in report.briefly()
    # a model awaiting a collection (no path) that the button's collection took is not said as
    # freed by it: "freed 2 model(s)" beside one flagged model
    garbage = dataclasses.replace(report.freed[0], paths=(), path="")
    one = dataclasses.replace(report, freed=(report.freed[0], garbage))
    assert one.counts() == "freed 1 model(s), and the collection took 1 more that nothing held"
    assert one.briefly().startswith("freed 1 model(s) (") and one.briefly().endswith(
        "…), and the collection took 1 more that nothing held"
    )
    only = dataclasses.replace(report, freed=(garbage,), released=())
    assert only.counts().startswith("no model of yours freed, and the collection took 1 more")


@pytest.mark.slow
def test_all_frees_current_models_too(ip):
    run(ip, "model = tiny('current')")
    registry = made_by_runs(ip, ("mlp", 1, ["model"]))
    (ref,) = refs(ip, "model")
    assert free(ip, registry).skipped_current == 1 and ref() is not None
    report = free(ip, registry, include_current=True)
    assert ref() is None and "model" not in ip.user_ns and report.skipped_current == 0


def test_keeps_the_dtype_policy(ip):
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        run(ip, "_ = tiny('policy')")
        assert free(ip).cleared_session
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_rss_drops_after_freeing_a_large_model(ip):
    run(
        ip,
        "big = keras.Sequential([keras.Input((5000,)), keras.layers.Dense(5000),"
        " keras.layers.Dense(5000)], name='big')",
    )  # 2 x 25M float32 weights: ~200 MiB
    registry = made_by_runs(ip, ("big", 1, ["big"]), ("big", 2, []))
    rss = psutil.Process().memory_info().rss
    report = free(ip, registry)
    (leak,) = report.freed
    assert leak.weight_bytes == 4 * (5000 * 5000 + 5000) * 2
    assert report.rss_freed > 150 * 2**20, report.lines()
    assert rss - psutil.Process().memory_info().rss > 150 * 2**20


@pytest.mark.slow
def test_a_plain_namespace_works_without_ipython():
    import keras

    ns = {"m": keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)], name="plain")}
    ref = weakref.ref(ns["m"])
    assert free(ns).skipped_current == 1
    report = free(ns, include_current=True)
    assert ref() is None and report.released == ("del m",)
