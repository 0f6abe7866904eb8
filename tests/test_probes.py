"""Live Keras models and the paths that hold them, in a real IPython shell with real Keras."""

from __future__ import annotations

import dataclasses
import gc
import subprocess
import sys
import time
import weakref

import pytest
from helpers import clear_tracebacks, fresh_shell, run

from keras_nbguard.models import CreationWatch, Leak, LeakReport, ModelRegistry, find_leaks

# Every way a notebook holds a model, each in its own name; built once, probed once.
HOLDERS = """
model = tiny("by_name")
models = [1, 2, 3, tiny("in_list")]
results = {"run1": {"model": None}, "run2": {"model": tiny("in_nested_dict")}}
class Trainer:
    klass = tiny("class_attr")
    def __init__(self):
        self.best = tiny("attribute")
        self._p = tiny("behind_property")
    @property
    def p(self):
        return self._p
    @functools.cached_property
    def cached(self):
        return tiny("cached_property")
trainer = Trainer()
trainer.cached
class Holder:
    pass
h = Holder()
vars(h)  # a materialized instance __dict__
h.m = tiny("instance_dict")
def make_cb(m):
    def cb():
        return m
    return cb
cb = make_cb(tiny("closure"))
import tensorflow as tf
def make_step(m):
    @tf.function  # a custom loop's step made by a factory: TF's Function holds the closure
    def step(x):
        return m(x)
    return step
step = make_step(tiny("tf_function"))
def f(a, m=tiny("default_arg"), *, k=tiny("kw_default")):
    pass
s = {tiny("in_set")}
t = (0, tiny("in_tuple"))
es = keras.callbacks.EarlyStopping()
es.set_model(tiny("callback"))
class Outer(keras.Model):
    def __init__(self):
        super().__init__(name="outer")
        self.blocks = [tiny("inner")]
    def call(self, inputs):
        return self.blocks[0](inputs)
outer = Outer()
usermod = types.ModuleType("usermod")
sys.modules["usermod"] = usermod
usermod.model = tiny("module_attr")
import itertools
opaque = itertools.repeat(tiny("opaque"))
"""

EXPECTED = {
    "by_name": "model",
    "in_list": "models[3]",
    "in_nested_dict": 'results["run2"]["model"]',
    "class_attr": "Trainer.klass",
    "attribute": "trainer.best",
    "behind_property": "trainer._p",
    "cached_property": "trainer.cached",
    "instance_dict": "h.m",
    "closure": "cb.__closure__[0].cell_contents",
    "tf_function": "step.python_function.__closure__[0].cell_contents",
    "default_arg": "f.__defaults__[0]",
    "kw_default": 'f.__kwdefaults__["k"]',
    "in_set": "s{…}",
    "in_tuple": "t[1]",
    "callback": "es.model",
    "inner": "outer.blocks[0]",
    "module_attr": "usermod.model",
    "opaque": "opaque — a repeat that holds it internally (no expression reaches it)",
}


def by_name(report: LeakReport, name: str) -> Leak:
    found = [leak for leak in (*report.leaks, *report.unreachable) if leak.model_name == name]
    assert len(found) == 1, (name, report.lines())
    return found[0]


@pytest.fixture(scope="module")
def holders_report():
    """One namespace holding models every way above, plus IPython's own holders; probed once."""
    shell = fresh_shell()
    try:
        assert run(shell, HOLDERS).success
        fit = run(shell, 'tiny("in_output_cache").fit(x, y, epochs=1, verbose=0)')
        assert fit.success
        assert run(shell, 'history = tiny("by_history").fit(x, y, epochs=1, verbose=0)').success
        run(shell, "def boom():\n    m = tiny('in_traceback')\n    raise ValueError('boom')\n")
        assert not run(shell, "boom()").success
        gc.disable()  # keep the dropped model alive (its own cycles) until the probe has run
        try:
            assert run(shell, "doomed = tiny('unreachable')\ndel doomed").success
            report = find_leaks(shell=shell)
        finally:
            gc.enable()
        return report, fit.execution_count
    finally:
        shell.reset(new_session=False)
        clear_tracebacks()
        sys.modules.pop("usermod", None)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_holder_kind_is_named_as_typed(holders_report, name):
    report, _ = holders_report
    leak = by_name(report, name)
    assert leak.path == EXPECTED[name], leak.paths
    assert leak.paths[0] == leak.path and leak.class_name == "Sequential"


def test_output_cache_and_history_paths(holders_report):
    report, n = holders_report
    cached = by_name(report, "in_output_cache")
    assert {f"Out[{n}].model", f"_{n}.model"} <= set(cached.paths)
    assert cached.stale and "IPython's caches" in cached.reason  # no name of the user holds it
    assert by_name(report, "by_history").path == "history.model"


def test_last_traceback_frames(holders_report):
    report, _ = holders_report
    leak = by_name(report, "in_traceback")
    assert leak.path.startswith("sys.last_traceback.tb_next")
    assert leak.path.endswith('.tb_frame.f_locals["m"]')
    assert leak.holder == "local 'm' of boom()" and leak.stale


def test_holders_say_what_they_are(holders_report):
    report, _ = holders_report
    assert by_name(report, "closure").holder == "closure variable 'm' of make_cb.<locals>.cb"
    assert by_name(report, "opaque").holder_type == "repeat"  # not nameable: type and best path
    assert by_name(report, "behind_property").holder_type == "Trainer"
    inner = by_name(report, "inner")
    assert inner.inside == "outer" and inner.holder_type == "TrackedList"


def test_unreachable_models_are_counted_with_a_hint(holders_report):
    report, _ = holders_report
    leak = by_name(report, "unreachable")
    assert leak in report.unreachable and leak.path == "" and leak.paths == ()
    assert "no path from your names" in leak.reason
    assert "Probe" not in leak.reason  # the walk's own object is no holder to tell of
    assert report.hint and "gc" in report.hint


def test_keras_own_nesting_is_not_reported(holders_report):
    report, _ = holders_report
    names = [leak.model_name for leak in (*report.leaks, *report.unreachable)]
    assert not any(name.startswith("functional") for name in names)  # Sequential._functional


def test_sizes_are_counted(ip):
    run(ip, "m = tiny('sized')\nm.optimizer.build(m.trainable_variables)")
    leak = by_name(find_leaks(shell=ip), "sized")
    params = 4 * 2 + 2 + 2 * 1 + 1
    assert leak.params == params and leak.weight_bytes == 4 * params
    assert leak.optimizer_bytes >= 2 * 4 * params  # Adam: two slots per weight, plus counters
    run(ip, "unbuilt = keras.Sequential(name='unbuilt')")
    leak = by_name(find_leaks(shell=ip), "unbuilt")
    assert leak.params is None and leak.weight_bytes is None and leak.optimizer_bytes == 0


def test_optimizers_of_its_own_are_counted(ip):
    # keras.io's GAN: `super().compile()` makes a default optimizer (12 B), the model trains with
    # the `d_optimizer` and `g_optimizer` it keeps (10.8 MiB of Adam state there): all counted
    run(
        ip,
        "m = tiny('own_optimizers')\nm.optimizer.build(m.trainable_variables)\n"
        "m.d_optimizer = keras.optimizers.Adam()\nm.d_optimizer.build(m.trainable_variables)\n"
        "m.more = {'g': keras.optimizers.SGD(momentum=0.9)}\n"
        "m.more['g'].build(m.trainable_variables)",
    )
    model = ip.user_ns["m"]
    leak = by_name(find_leaks(shell=ip), "own_optimizers")

    def state(optimizer):
        return sum(v.numpy().nbytes for v in optimizer.variables)

    momentum = state(model.more["g"])
    assert leak.optimizer_bytes == state(model.optimizer) + state(model.d_optimizer) + momentum
    assert momentum > 4 * leak.params  # its slots counted, not only its counters


def test_current_and_stale_by_run(ip):
    registry = ModelRegistry()
    run(ip, "old = tiny('old')")
    registry.note_run("mlp", 1, [ip.user_ns["old"]])
    run(ip, "model = tiny('new')\nother = tiny('other_label')")
    registry.note_run("mlp", 2, [weakref.ref(ip.user_ns["model"])])
    registry.note_run("cnn", 1, [ip.user_ns["other"]])
    report = find_leaks(ip.user_ns, registry, shell=ip)
    old, new, other = (by_name(report, n) for n in ("old", "new", "other_label"))
    assert old.stale and (old.run_label, old.run_number) == ("mlp", 1)
    assert old.reason == "from run 'mlp' #1; the latest is #2"
    assert not new.stale and (new.run_label, new.run_number) == ("mlp", 2)
    assert not other.stale  # the latest run of its own label
    assert old in report.stale and report.leaks[0].stale  # stale first
    # A later run of the label, numbered #1 again (a history reset): recency, not numbers.
    registry.note_run("mlp", 1)
    renumbered = by_name(find_leaks(ip.user_ns, registry, shell=ip), "new")
    assert renumbered.stale and renumbered.reason == "from run 'mlp' #2; the latest is #1"


def test_a_model_fit_again_by_the_latest_run_is_current(ip):
    registry = ModelRegistry()
    run(ip, "model = tiny('reused')")
    registry.note_run("mlp", 1, [ip.user_ns["model"]])
    registry.note_run("mlp", 2, [ip.user_ns["model"]])  # the next run fit it again
    leak = by_name(find_leaks(shell=ip, registry=registry), "reused")
    assert not leak.stale and leak.run_number == 1 and leak.last_run_number == 2
    # said where the list shows it: made by #1, and #2 trained it (not an old run's model)
    assert leak.run_words() == "'mlp' #1, used by #2"
    assert "'mlp' #1, used by #2)" in "\n".join(find_leaks(shell=ip, registry=registry).lines())
    # used by a run of another label: named; a history reset's #1 again: still a later run
    registry.note_run("train", 5, [ip.user_ns["model"]])
    assert by_name(find_leaks(shell=ip, registry=registry), "reused").run_words() == (
        "'mlp' #1, used by 'train' #5"
    )
    registry.note_run("mlp", 1, [ip.user_ns["model"]])
    assert by_name(find_leaks(shell=ip, registry=registry), "reused").run_words() == (
        "'mlp' #1, used by #1"
    )


def test_leaks_hold_no_model_and_the_registry_is_weak(ip):
    registry = ModelRegistry()
    run(ip, "model = tiny('weak')")
    ref = weakref.ref(ip.user_ns["model"])
    registry.note_run("mlp", 1, [ip.user_ns["model"]])
    report = find_leaks(shell=ip, registry=registry)
    for field in dataclasses.fields(Leak):
        value = getattr(by_name(report, "weak"), field.name)
        assert value is None or isinstance(value, (str, int, bool, tuple))
    assert registry.origin(ref())[:2] == ("mlp", 1)
    del ip.user_ns["model"]
    gc.collect()
    assert ref() is None and len(registry) == 0 and report.lines()  # the report outlives it


def test_creation_watch_attributes_models_a_run_built(ip):
    import keras

    watch = CreationWatch()
    original = keras.Model.__dict__["__new__"]
    watch.install()
    try:
        run(
            ip,
            "a = tiny('built_in_run')\n"
            "inp = keras.Input((3,))\nb = keras.Model(inp, keras.layers.Dense(1)(inp))",
        )
    finally:
        watch.uninstall()
    assert keras.Model.__dict__["__new__"] is original
    built = [r() for r in watch.models]
    assert any(m is ip.user_ns["a"] for m in built)
    assert sum(m is ip.user_ns["b"] for m in built) == 1  # Model(inputs, outputs): once
    run(ip, "c = tiny('after_run')")
    assert not any(r() is ip.user_ns["c"] for r in watch.models)


def test_the_walk_is_bounded(ip):
    run(ip, "deep = [[[[[[[tiny('deep')]]]]]]]")
    report = find_leaks(shell=ip, max_depth=1)
    assert not report.complete and report.notes
    assert by_name(report, "deep") in report.unreachable
    # Unbounded in depth; time enough that a heap grown by the whole suite can't cut it short.
    unbounded = find_leaks(shell=ip, time_limit=60)
    assert by_name(unbounded, "deep").path == "deep[0][0][0][0][0][0][0]"


def test_the_walks_limit_counts_its_own_work_not_the_clock(ip, monkeypatch):
    """On a machine others keep busy the clock runs on while the walk waits for the CPU: with a
    limit on the clock, a walk of 40 ms alone passed its 1 s under load (CI), and the release
    step, which trusts only a complete walk, released nothing."""
    import itertools

    run(ip, "kept = [tiny('kept')]")
    clock = itertools.count(0.0, 10.0)  # each reading of the clock 10 s after the last
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    report = find_leaks(shell=ip)
    monkeypatch.undo()
    assert report.complete and by_name(report, "kept").path == "kept[0]"


def test_a_module_that_came_after_a_walk_ends_the_next_ones_chains(ip):
    # The modules' namespaces are made once and remade when sys.modules changed (roots.py):
    # one imported between two walks is a root of the second, named as you would type it.
    run(ip, "kept = tiny('before_the_module')")
    assert by_name(find_leaks(shell=ip), "before_the_module").path == "kept"
    run(ip, "sys.modules['latecomer'] = types.ModuleType('latecomer')")
    run(ip, "sys.modules['latecomer'].model = tiny('in_latecomer')")
    try:
        leak = by_name(find_leaks(shell=ip), "in_latecomer")
        assert leak.path == "sys.modules['latecomer'].model", leak.paths
        model = weakref.ref(sys.modules["latecomer"].model)
    finally:
        sys.modules.pop("latecomer", None)
    gc.collect()
    assert model() is None  # taken out of sys.modules, the module is not kept alive by the walk


def test_collecting_first_lists_no_garbage_and_names_what_the_frameworks_hold(ip):
    # what %nbguard leaks and keras_nbguard.leaks() ask for: a model the cell rebound (kept by
    # its own cycles until a collection) is not listed; one only a framework object holds is
    run(ip, "metric = keras.metrics.Mean()\nmetric.held = tiny('in_a_metric')")
    gc.disable()  # keep the rebound model's cycles until the walk
    try:
        run(ip, "m = tiny('rebound')\nm.fit(x, y, verbose=0)\nm = tiny('kept')")
        as_is = find_leaks(shell=ip)
        collected = find_leaks(shell=ip, collect=True)
    finally:
        gc.enable()
    assert {leak.model_name for leak in as_is.unreachable} == {"rebound", "in_a_metric"}
    assert "its own cycles" in by_name(as_is, "rebound").reason
    assert as_is.hint is not None and "reference cycles waiting" in as_is.hint
    (held,) = collected.unreachable
    assert held.model_name == "in_a_metric" and collected.collected
    assert held.reason == "no path from your names; held only by framework internals (Mean)"
    assert collected.hint is not None and "alive after a garbage collection" in collected.hint
    assert f"  hint: {collected.hint}" in collected.lines()


def test_reports_render(holders_report):
    report, _ = holders_report
    text = "\n".join(report.lines())
    assert "STALE" in text and "unreachable" in text
    (line,) = [li for li in report.lines() if li.startswith("  unreachable unreachable ")]
    assert "(Sequential, " in line and "made outside %%kerasrun): no path from your names" in line
    assert report._repr_html_().startswith("<pre")
    # JupyterLab's output style broke lines anywhere ("sca / le_layer"): at spaces here
    assert "word-break: normal; overflow-wrap: break-word" in report._repr_html_()
    assert len(report) == len(report.leaks) and list(report) == list(report.leaks)


def test_a_line_shows_the_paths_you_can_type_first_and_three_at_most():
    # the VAE example's encoder: held by the user's name, the VAE and Out[n], and seven more
    # times through Keras' own _compiled_trainable_state, which no expression reaches
    inner = (
        "vae._compiled_trainable_state — a _DictWrapper that holds it (no expression reaches it)"
    )
    paths = ("encoder", inner, inner + " 2", "vae.encoder", "Out[7].model.encoder", "_7.m.encoder")
    leak = Leak(
        *(paths[0], paths, "encoder", "Functional", 10, 4096, 0, None, None, False, "current")
    )
    (line,) = LeakReport((leak,), ()).lines()[1:2]
    assert line.endswith(": encoder, vae.encoder, Out[7].model.encoder and 3 more"), line


def test_the_paths_you_can_type_come_first_at_the_source(ip):
    # keras.io's GAN in the dashboard's list: its discriminator "held by" the GAN's
    # `_compiled_trainable_state — a _DictWrapper … (no expression reaches it)` before
    # `Out[7].model.discriminator`: the list shows the leak finder's order, not the text's
    run(ip, "both = tiny('both')\nimport itertools\nrep = itertools.repeat(both)")
    run(ip, "both")  # Out[n]: not your name, but typed as it is
    paths = by_name(find_leaks(shell=ip), "both").paths
    untypeable = [i for i, p in enumerate(paths) if p.endswith("(no expression reaches it)")]
    typed_out = [i for i, p in enumerate(paths) if p.startswith("Out[")]
    assert paths[0] == "both" and untypeable and typed_out
    assert max(typed_out) < min(untypeable), paths
    del ip.user_ns["both"], ip.user_ns["rep"]


def test_importing_costs_no_keras_and_finds_nothing_without_it():
    code = (
        "import sys; import keras_nbguard.models as p, keras_nbguard.models.freeing\n"
        "assert 'keras' not in sys.modules and 'tensorflow' not in sys.modules\n"
        "r = p.find_leaks({'x': [1]}); assert len(r) == 0 and r.scans == 0\n"
        "assert 'keras' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_holder_of_a_models_weights_is_named_as_you_named_it(ip):
    """keras.io's knowledge distillation: `teacher … all in distiller too`, where Keras'
    `distiller` was the kept old Distiller and yours, `distiller`, Keras' `distiller_1`."""
    run(
        ip,
        "holder_you_named = tiny('distiller_1')\n"
        "part = keras.Model(holder_you_named.inputs, holder_you_named.layers[0].output, "
        "name='part')",
    )
    try:
        report = find_leaks(shell=ip)
        assert by_name(report, "part").weights_in == "holder_you_named"
        assert "weights (all in holder_you_named too)" in "\n".join(report.lines())
    finally:
        del ip.user_ns["holder_you_named"], ip.user_ns["part"]


def test_a_model_made_of_another_ones_layers_says_its_weights_are_that_ones(ip):
    """keras.io's DeepDream: a feature extractor on InceptionV3's layers listed 34.2 MiB beside
    the InceptionV3's 83.2, as if they added up; it says where its weights are."""
    run(
        ip,
        "base = tiny('base')\n"
        "extractor = keras.Model(base.inputs, base.layers[0].output, name='extractor')",
    )
    report = find_leaks(shell=ip)
    extractor, base = by_name(report, "extractor"), by_name(report, "base")
    assert extractor.weights_in == "base" and base.weights_in is None
    assert "weights (all in base too)" in "\n".join(report.lines())
    run(ip, "twin = keras.Model(base.inputs, base.outputs, name='twin')")  # the very same ones
    report = find_leaks(shell=ip)
    assert [by_name(report, n).weights_in for n in ("base", "twin")].count(None) == 1
    del ip.user_ns["extractor"], ip.user_ns["twin"]
    # keras.io's GAN in the dashboard's list (no collection first): the rebound earlier `gan`,
    # awaiting collection, is on the very same layers as the current one; the current one said
    # "all in gan too", as if of itself. It names none; the earlier one names it apart from itself
    gc.collect()
    gc.disable()  # the earlier one stays garbage until the report is made, as between runs
    try:
        run(
            ip,
            "gan = keras.Model(base.inputs, base.outputs, name='gan')\n"
            "object.__setattr__(gan, 'me', (gan,))",  # in a cycle of its own
        )
        run(ip, "gan = keras.Model(base.inputs, base.outputs, name='gan')")
        report = find_leaks(shell=ip)
    finally:
        gc.enable()
    current = [leak for leak in report.leaks if leak.model_name == "gan"]
    earlier = [leak for leak in report.unreachable if leak.model_name == "gan"]
    assert len(current) == len(earlier) == 1
    assert current[0].weights_in is None and earlier[0].weights_in == "another 'gan'"
    del ip.user_ns["gan"], ip.user_ns["base"]
