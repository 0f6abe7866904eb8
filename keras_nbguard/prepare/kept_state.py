"""What the user has in Keras that our clears keep, as plain cells keep it.

``clear_session()`` drops all of Keras 3's global state, and with it two things a user has:

- **The counters that make input names unique** (``input_layer``, ``input_layer_1``, ...).
  Layers that outlive the clear keep their names: a loaded model's, a setup cell's. After a
  clear a new ``keras.Input`` was named ``input_layer_1`` again, and a model that joined it to a
  loaded model's own ``input_layer_1`` failed: "The name "input_layer_1" is used 2 times in the
  model" (keras.io's lstm_seq2seq inference cell, which runs bare). Keras 2 restarts its
  counters too. Only the inputs' counters are kept: the others restart, skipping the names
  that layers made outside the run have (``layer_names``), so each run's layers and their
  variables take the same names again. Counting those on too (as plain cells do) made every
  variable's handle kernel new, with its name in it, and TensorFlow's kernel cache, which our
  clears keep, grew by them: +0.76 MiB a run of glibc's heap in use on the MNIST convnet
  (+0.03 with them restarting).
- **The user's settings** that live there: ``keras.config``'s ``disable_interactive_logging()``
  (the progress bars came back), ``disable_traceback_filtering()``, ``enable_flash_attention()``;
  ``keras.utils.set_random_seed``'s seed; ``keras.distribution.set_distribution`` (JAX's data
  or model parallelism: a run trained on one device without a word).

(The dtype policy, also reset, is put back by ``before_run.clear_keeping_policy``, which may set
another.) Nothing here may break a clear: a Keras whose internals moved gets them reset, as
before.

An isolated run's fresh process starts with none of it: ``carried`` and ``take_on`` hand the
kernel's counters, settings, dtype policy and backend settings (floatx, epsilon, image data
format) to the child, and the child's counters back (isolation/).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any

from keras_nbguard import backends
from keras_nbguard.backends import DEFAULT_POLICY, Keras
from keras_nbguard.prepare import layer_names

KERAS3_STATE = "keras.src.backend.common.global_state"
COUNTERS = "object_name_uids"  # Keras 3's name counters, by prefix
INPUT_PREFIXES = ("input_layer", "input")  # what an Input is named after (Keras 3, Keras 2)
# the attributes of that state that are the user's settings
KERAS3_KEPT = (
    "interactive_logging",
    "traceback_filtering",
    "flash_attention",
    "global_random_seed",
    "distribution",
)
KERAS2_BACKEND = "tf_keras.src.backend"  # PER_GRAPH_OBJECT_NAME_UIDS, _GRAPH


@contextlib.contextmanager
def kept(keras: Keras, label: str | None = None) -> Iterator[None]:
    """What the user has, as it was before the block (the clear), put back after it; the name
    counters restart skipping the names layers made elsewhere have (``layer_names``): ``label``,
    the run the clear starts (None: ``free()``, the button)."""
    try:
        restore = _saved_keras3(label) if keras.package == "keras" else _saved_keras2(label)
    except Exception:
        restore = None
    try:
        yield
    finally:  # a clear that failed half-way has reset them all the same
        if restore is not None:
            with contextlib.suppress(Exception):
                restore()


def _saved_keras3(label: str | None) -> Any:
    state: Any = sys.modules.get(KERAS3_STATE)
    if state is None:
        return None
    values = {name: state.get_global_attribute(name) for name in KERAS3_KEPT}
    kept = {name: value for name, value in values.items() if value is not None}  # None: unset
    _note_names()
    inputs = _inputs_only(state.get_global_attribute(COUNTERS))

    def restore() -> None:
        for name, value in kept.items():
            state.set_global_attribute(name, value)
        state.set_global_attribute(COUNTERS, layer_names.counters(inputs, label))

    return restore


def forget() -> None:
    """The extension unloaded: Keras' counters are plain ones again, with their counts, and
    the names noted are forgotten (``layer_names``)."""
    with contextlib.suppress(Exception):
        state: Any = sys.modules.get(KERAS3_STATE)
        counters = state.get_global_attribute(COUNTERS) if state is not None else None
        if isinstance(counters, layer_names.SkippingCounters):
            state.set_global_attribute(COUNTERS, collections.defaultdict(int, dict(counters)))
        backend: Any = sys.modules.get(KERAS2_BACKEND)
        uids = backend.PER_GRAPH_OBJECT_NAME_UIDS if backend is not None else {}
        for graph, counters in list(uids.items()):
            if isinstance(counters, layer_names.SkippingCounters):
                uids[graph] = collections.defaultdict(int, dict(counters))
    layer_names.forget()


def adopt_names(label: str) -> None:
    """At the end of ``label``'s clearing run: names on Keras' plain counters are the run's
    (``layer_names.adopt``); ours, noting each name, go on from them."""
    with contextlib.suppress(Exception):
        state: Any = sys.modules.get(KERAS3_STATE)
        counters = state.get_global_attribute(COUNTERS) if state is not None else None
        if counters is not None and not isinstance(counters, layer_names.SkippingCounters):
            state.set_global_attribute(COUNTERS, layer_names.adopt(label, counters))
    with contextlib.suppress(Exception):
        backend: Any = sys.modules.get(KERAS2_BACKEND)
        if backend is not None:
            graph = backend.tf.compat.v1.get_default_graph()
            counters = backend.PER_GRAPH_OBJECT_NAME_UIDS.get(graph)
            if counters is not None and not isinstance(counters, layer_names.SkippingCounters):
                backend.PER_GRAPH_OBJECT_NAME_UIDS[graph] = layer_names.adopt(label, counters)


def _note_names() -> None:
    """The names each Keras' own counters handed out, before any clear: Keras 3's clear on
    TensorFlow resets the default graph, where Keras 2 counts its layers' names. (Never in the
    way of the settings kept: a Keras whose internals moved names as it did before.)"""
    with contextlib.suppress(Exception):
        state: Any = sys.modules.get(KERAS3_STATE)
        if state is not None:
            layer_names.before_clear(state.get_global_attribute(COUNTERS))
    with contextlib.suppress(Exception):
        backend: Any = sys.modules.get(KERAS2_BACKEND)
        if backend is not None:
            graph = backend.tf.compat.v1.get_default_graph()
            layer_names.before_clear(backend.PER_GRAPH_OBJECT_NAME_UIDS.get(graph))


def _inputs_only(counters: Any) -> dict[str, int]:
    return {p: counters[p] for p in INPUT_PREFIXES if counters and counters.get(p)}


def _saved_keras2(label: str | None) -> Any:
    """Keras 2 keys its counters by TensorFlow graph: an ``Input``'s name counts in Keras' own
    eager graph (``get_uid``), which the clear replaces: its inputs' counters go to the new one.
    The other layers' names count in TensorFlow's default graph, which the clear resets too."""
    backend: Any = sys.modules.get(KERAS2_BACKEND)
    if backend is None:
        return None
    _note_names()
    inputs = _inputs_only(_keras2_counters_now(backend))

    def restore() -> None:
        graph = backend.tf.compat.v1.get_default_graph()
        backend.PER_GRAPH_OBJECT_NAME_UIDS[graph] = layer_names.counters({}, label)
        if inputs:
            _count_past(_keras2_counters(backend), inputs)

    return restore


def _keras2_counters_now(backend: Any) -> Any:
    """Keras 2's counters in its eager graph, None while it has none (nothing named yet)."""
    graph = getattr(backend._GRAPH, "graph", None)
    return backend.PER_GRAPH_OBJECT_NAME_UIDS.get(graph) if graph is not None else None


# -- to and from an isolated run's process (isolation/) -------------------------------------------
SETTINGS = ("interactive_logging", "traceback_filtering", "flash_attention", "global_random_seed")
SETTING_DEFAULTS = {"interactive_logging": True, "traceback_filtering": True}  # else None
# keras.backend's module-level settings (both Kerases: floatx(), set_floatx(...)), and defaults
BACKEND_SETTINGS = {"floatx": "float32", "epsilon": 1e-07, "image_data_format": "channels_last"}


def carried() -> dict[str, dict[str, Any]]:
    """Each imported Keras' inputs' name counters (the ones our clear keeps), the names its new
    layers must skip (``layer_names``) and the user's settings, as plain values, for a fresh
    process to name and behave as this one: keras.io's seq2seq inference cell, isolated, joins
    a loaded model's ``input_layer_1`` to new inputs, which a fresh process named so again."""
    _note_names()  # a kernel that never cleared: its names are in Keras' own counters
    found = {}
    for keras in backends.loaded():
        with contextlib.suppress(Exception):
            found[keras.package] = _carried(keras)
    return found


def take_on(state: dict[str, dict[str, Any]], *, settings: bool) -> None:
    """Make names count on past ``state``'s (the higher of each counter); with ``settings``,
    also take its settings and dtype policy (a child, before its cell). A Keras not imported
    here is imported only for settings that differ from its defaults: otherwise nothing made
    here can meet the kernel's names before the cell imports it, and a cell that uses no
    Keras, or imports it itself, pays nothing."""
    for package, carried_state in state.items():
        with contextlib.suppress(Exception):
            if settings and _differs_from_defaults(carried_state):
                importlib.import_module(package)
            keras = next((k for k in backends.loaded() if k.package == package), None)
            if keras is not None:
                _take_on(keras, carried_state, settings)


def _keras2_counters(backend: Any) -> Any:
    """Keras 2's counters in its eager graph, which ``get_graph`` makes when there is none."""
    return backend.PER_GRAPH_OBJECT_NAME_UIDS.setdefault(
        backend.get_graph(), collections.defaultdict(int)
    )


def _carried(keras: Keras) -> dict[str, Any]:
    backend_settings = {
        name: value
        for name, default in BACKEND_SETTINGS.items()
        if (value := getattr(keras.module.backend, name)()) != default
    }  # a setup cell's set_floatx("float64"), set_image_data_format("channels_first")
    if keras.package == "keras":
        state: Any = sys.modules[KERAS3_STATE]
        values = {name: state.get_global_attribute(name) for name in SETTINGS}
        return {
            "uids": _inputs_only(state.get_global_attribute(COUNTERS)),
            "taken": layer_names.all_taken(),
            "settings": {
                name: value
                for name, value in values.items()
                if value is not None and value != SETTING_DEFAULTS.get(name)
            },
            "backend": backend_settings,
            "policy": keras.policy_name(),
        }
    return {
        "uids": _inputs_only(_keras2_counters_now(sys.modules[KERAS2_BACKEND])),
        "taken": layer_names.all_taken(),
        "backend": backend_settings,
        "policy": keras.policy_name(),
    }


def _differs_from_defaults(state: dict[str, Any]) -> bool:
    return bool(state.get("settings") or state.get("backend")) or state.get("policy") not in (
        None,
        DEFAULT_POLICY,
    )


def _take_on(keras: Keras, state: dict[str, Any], settings: bool) -> None:
    if settings:  # a child: its run's new layers skip the names of those sent (layer_names)
        layer_names.NAMES.outside.update(state.get("taken", ()))
    if keras.package == "keras":
        module: Any = sys.modules[KERAS3_STATE]
        counters = module.get_global_attribute(
            COUNTERS, default=collections.defaultdict(int), set_to_default=True
        )
        _count_past(counters, state["uids"])
        if settings:
            for name, value in state["settings"].items():
                module.set_global_attribute(name, value)
    else:
        _count_past(_keras2_counters(sys.modules[KERAS2_BACKEND]), state["uids"])
    if not settings:
        return
    for name, value in state.get("backend", {}).items():
        getattr(keras.module.backend, f"set_{name}")(value)
    policy = state.get("policy")
    if policy and keras.policy_name() != policy:
        keras.set_policy(policy)


def _count_past(counters: Any, other: dict[str, int]) -> None:
    for prefix, count in other.items():  # (past ours: no name is handed out here)
        dict.__setitem__(counters, prefix, max(counters.get(prefix, 0), count))
