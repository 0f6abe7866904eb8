"""What an isolated run brings back into the kernel: the names its cell bound (Keras models
loaded from the Keras format, everything else unpickled), its last value, and how much came
back (``Transfer``). A model comes back once: a History that held it holds the loaded one.
What the names held before the run is let go before the new values load (``_make_room``)."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import sys
import tempfile
import time
import types
import weakref
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from keras_nbguard.isolation import changed_state, random_state, registrations
from keras_nbguard.isolation.child import FUNCTIONS, LAST
from keras_nbguard.isolation.lenient_load import rebuilt_leniently
from keras_nbguard.isolation.loaded_weights import (
    moved_into_tensorflows_memory,
    optimizer_unbuilt_again,
)
from keras_nbguard.isolation.nested_models import rejoin
from keras_nbguard.isolation.parent import ChildResult
from keras_nbguard.isolation.receiving import keras_scope
from keras_nbguard.isolation.run import IsolatedRun, Transfer
from keras_nbguard.isolation.unloadable import refusing_only_base_keys, why_not_loaded
from keras_nbguard.prepare import kept_state, layer_names
from keras_nbguard.prepare.deepclean import clear_kernel_cache
from keras_nbguard.prepare.lookup_tables import freed_with_their_objects

IPYTHONS = frozenset({"In", "Out", "exit", "quit", "get_ipython"})  # IPython's names, not yours
# what a result holds that is loaded here, then let go
LOADED = ("outputs", "value", "state", "metric_state")


def received(
    done: ChildResult,
    run: IsolatedRun | None = None,
    namespace: MutableMapping[str, Any] | None = None,
    release: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """The names the cell bound in the child, and its last value under ``LAST`` (a value that
    can't travel is shown as IPython would show it; a History holds the model that came back
    under its name). What fails to load is named in the run's "not sent back" instead of
    failing the cell. ``namespace``: where the names will be bound; what they hold there is let
    go first, and ``release`` then cuts what still keeps those models only as a cache does (a
    History in ``Out[n]``, the value of a cell ending in ``model.fit(...)``)."""

    began = time.perf_counter()
    result = done.result or {}
    kept_state.take_on(result.get("keras") or {}, settings=False)  # names made there stay unique
    outputs: dict[str, Any] = dict(result.get("outputs", {}))
    functions = _functions(outputs.pop(FUNCTIONS, None))
    earlier = _make_room(namespace, outputs, release) if namespace is not None else {}
    bound: dict[str, Any] = {LAST: None}
    # the classes the cell defined (a CustomModel), and what it registered: a model of them
    # loads here only with them (Could not locate class 'CustomModel')
    classes = _classes_back(outputs, result.get("classes", ()))
    registered = registrations.take_on(result.get("registered"), replace=False)
    functions = {
        **functions,
        **classes,
        **{name: obj for objects in registered.values() for name, obj in objects.items()},
    }
    models: dict[str, Any] = {}
    back = Transfer(names=len(classes), nbytes=sum(len(outputs[name][1]) for name in classes))
    bound.update(classes)
    failed: dict[str, str] = {}
    # The nodes of Keras' graph the loads make are the run's, as they would be had it run
    # here: a layer that outlives the run (an encoder the cell keeps) lets go of them later.
    watch = run.creations if run is not None else None
    if watch is not None:
        watch.install()
    try:
        back.kept_apart = _load_models(outputs, functions, models, failed, back, bound)
    finally:
        if watch is not None:
            watch.uninstall()
    back.trained = [key for key in result.get("trained_back", ()) if key in models]
    bound.update((key, models[key]) for key in _linked(outputs) if key in bound)
    if models:
        clear_kernel_cache()  # the loads' variable kernels, kept for good otherwise
    for key, sent in outputs.items():
        if sent[0] == "keras" or key in classes:
            continue
        try:
            value = _loads(sent[1], models)
        except Exception as exc:
            failed[key] = f"could not be unpickled here: {exc}"
            continue
        if key == LAST:  # the cell's value, not a name
            back.value = True
            back.nbytes += len(sent[1])
        elif not isinstance(value, types.ModuleType):  # a module is the notebook's own: no data
            back.names += 1
            back.nbytes += len(sent[1])
        if len(sent) > 2 and sent[2] in models:
            _attach(value, models[sent[2]])
        bound[key] = value
    if result.get("value_of") in bound:  # the cell's value is one of its names' (child.py)
        bound[LAST] = bound[result["value_of"]]
        back.value = True
    elif result.get("value") is not None:
        bound[LAST] = _loads(result["value"])
        back.value = True
        back.nbytes += len(result["value"])
    elif result.get("bundle"):
        from IPython.display import publish_display_data

        publish_display_data(result["bundle"])
    placed = {key: bound.pop(key) for key in list(bound) if changed_state.is_path(key)}
    half_built = (  # the notebook's own layer built alike: its holders see it
        _built_alike(namespace, result.get("built_here") or (), earlier, bound, placed)
        if namespace is not None
        else {}
    )
    for key, first in (result.get("same_as") or {}).items():
        if first in placed:
            placed[key] = placed[first]
    if namespace is not None:  # a layer built there in a list or dict: into its place here
        failed.update(changed_state.put_in_place(namespace, placed))
    else:  # a sweep's point: its names are kept apart, the notebook's containers untouched
        failed.update(dict.fromkeys(placed, "built there: a sweep leaves the notebook's as it was"))
    for key in failed:
        _restore(namespace, key, earlier.get(key), failed)
    failed.update(half_built)  # (not restored: the name holds the copy, which loaded)
    failed.update(changed_state.counts_back(bound, result.get("metric_state") or {}))
    states = result.get("state") or {}
    if namespace is not None and states:  # a metric, a layer: changed in place, as plainly
        unset = changed_state.take_on(namespace, states)
        failed.update(unset)
        back.in_place = [name for name in states if name not in unset]
        back.nbytes += sum(value.nbytes for _, values in states.values() for value in values)
    if done.result is not None:  # the pickles: let them go once loaded
        done.result = {k: v for k, v in result.items() if k not in LOADED}
    back.seconds = time.perf_counter() - began
    if namespace is not None:  # one run, as a plain one: the next draws on from its streams
        random_state.take_on(result.get("random"))  # after the loads: they drew on ours
    if run is not None:
        run.back = back
        run.returned = tuple(weakref.ref(model) for model in models.values())
        held = _replaced_but_held(namespace, earlier, models) if namespace is not None else ()
        if held:
            run.notes += held
        # their names are the label's: a run here next skips those it keeps (the encoder the
        # cell made once) and takes the others again
        layer_names.made_in_another_process(run.label, models.values())
        if failed:
            run.not_sent = {**(run.not_sent or {}), **failed}
    return bound


def _classes_back(outputs: dict[str, Any], names: Any) -> dict[str, type]:
    """The classes among ``outputs`` (``names``: the child says which), unpickled first."""
    found = {}
    for name in names:
        sent = outputs.get(name)
        if sent is not None and sent[0] == "value":
            with contextlib.suppress(Exception):
                value = _loads(sent[1])
                if isinstance(value, type):
                    found[name] = value
    return found


def _load_models(
    outputs: dict[str, Any],
    functions: dict[str, Any],
    models: dict[str, Any],
    failed: dict[str, str],
    back: Transfer,
    bound: dict[str, Any],
) -> dict[str, str]:
    """Load the models that came back into ``models`` (and ``bound``, under their names), what
    failed into ``failed``; a model that is another's layer in the cell becomes that layer
    again. Returns the names kept apart from the model they were a layer of, and why."""
    for key, sent in outputs.items():
        if sent[0] != "keras":
            continue
        try:
            models[key] = _load_model(sent[1], sent[2], functions)
        except Exception as exc:
            loaded = _loaded_leniently(sent[1], sent[2], functions)
            if loaded is None:
                why = why_not_loaded(exc, sent[2], {**_notebook_classes(), **functions})
                failed[key] = f"a Keras model that could not be loaded here: {why}"
                continue
            models[key], back.rebuilt[key] = loaded
        back.models += 1
        back.nbytes += len(sent[2])
        if key.isidentifier():  # not "hist.model": a History's model, sent on its own
            bound[key] = models[key]
    linked = _linked(outputs)
    # a loss defined in the notebook, or one the child sent
    with keras_scope({**_notebook_classes(), **functions} if linked else {}):
        return rejoin(models, linked)  # model: end_to_end_model's layer, as in the cell


def _loaded_leniently(
    package: str, data: bytes, functions: dict[str, Any]
) -> tuple[Any, list[str]] | None:
    """The model loaded with the notebook's classes whose ``__init__`` takes no ``**kwargs``
    rebuilt as ``lenient_load`` does, and their names; None where that is not the only reason
    Keras failed, or the load fails again."""
    refusing = refusing_only_base_keys(data, {**_notebook_classes(), **functions})
    if not refusing:
        return None
    try:
        with rebuilt_leniently(refusing):
            return _load_model(package, data, functions), sorted(c.__name__ for c in refusing)
    except Exception:  # the first failure's words say why
        return None


def _linked(outputs: dict[str, Any]) -> dict[str, Any]:
    """The models that were a layer of another model in the cell: name -> that link."""
    return {key: sent[3] for key, sent in outputs.items() if sent[0] == "keras" and len(sent) > 3}


def _make_room(
    namespace: MutableMapping[str, Any],
    outputs: dict[str, Any],
    release: Callable[[], object] | None = None,
) -> dict[str, weakref.ref[Any]]:
    """Let go of what the names coming back hold now, before their new values load: a model
    loaded while the last run's copy still lives needs room for both, and TensorFlow's CPU
    allocator (oneDNN's pool) keeps the larger footprint for good and a little more each time
    (Keras' text example: the kernel grew 3 MiB a run, 0.5 with room made; docs/benchmarks.md).
    A History of the last run goes too (it holds the last model). A value no weak reference can
    follow (a list, a number) stays bound until it is replaced, as before. Returns weak
    references to what was let go, for a name whose new value fails to load."""
    gone: dict[str, weakref.ref[Any]] = {}
    for key in outputs:
        if not key.isidentifier() or key not in namespace:  # "hist.model": not a name
            continue
        try:
            gone[key] = weakref.ref(namespace[key])
        except TypeError:
            continue
        del namespace[key]
    if gone:
        if release is not None:  # what only caches hold now goes too (the next run's start
            release()  # reports it: session/live_models.py)
        gc.collect()  # a model sits in cycles: freed by a collection
    return gone


def _replaced_but_held(
    namespace: Mapping[str, Any], earlier: dict[str, weakref.ref[Any]], models: dict[str, Any]
) -> tuple[str, ...]:
    """A model that came back is a new object: where the one its name held before still lives
    under other names (``alias = model``, ``models = [model]``), those names see the model as it
    was before the run, where a plain run trains that very object. Said, with those names (a
    user's walkthrough found `alias` untrained and nothing saying why)."""
    notes = []
    for key in models:
        old = earlier[key]() if key in earlier else None
        if old is None or old is models[key]:
            continue
        yours = [(n, v) for n, v in list(namespace.items()) if n not in IPYTHONS and n[:1] != "_"]
        holders = [name for name, value in yours if value is old]
        holders += [
            f"{name}[{index!r}]"
            for name, value in yours
            if isinstance(value, (list, tuple, dict))
            for index, item in (value.items() if isinstance(value, dict) else enumerate(value))
            if item is old
        ]
        if holders:
            shown = ", ".join(holders[:3]) + (" …" if len(holders) > 3 else "")
            notes.append(
                f"{key} came back as a new object: {shown} still hold the one from before "
                f"the run, as it was (a plain run changes that very model)"
            )
    return tuple(notes)


def _built_alike(
    namespace: MutableMapping[str, Any],
    keys: Any,
    earlier: dict[str, weakref.ref[Any]],
    bound: dict[str, Any],
    placed: dict[str, Any],
) -> dict[str, str]:
    """Each layer first built there (a name's, or one at a path in a list or dict) that came
    back: the notebook's own object, if something still holds it, built as it was there and
    given its weights, stands in for the copy (``changed_state.built_like``), the cell's value
    too. Returns why, by key, where the notebook's was built but could not take the weights."""
    here = changed_state.objects_at(namespace, [k for k in keys if changed_state.is_path(k)])
    half_built = {}
    for key in keys:
        came = placed if changed_state.is_path(key) else bound
        ref = earlier.get(key)
        own = here.get(key) if changed_state.is_path(key) else (ref() if ref else None)
        if key not in came or own is None:
            continue
        copy = came[key]
        why = changed_state.built_like(own, copy)
        if why == "":
            came[key] = own
            if bound.get(LAST) is copy:  # a cell ending in the layer: Out[n] is the name's
                bound[LAST] = own
        elif why is not None:
            half_built[key] = (
                f"built here as there, but {why}: the notebook's own layer, where else it is "
                f"held, is built and untrained; {key} holds the copy that came back"
            )
    return half_built


def _restore(
    namespace: MutableMapping[str, Any] | None,
    key: str,
    earlier: weakref.ref[Any] | None,
    failed: dict[str, str],
) -> None:
    """A name whose new value failed to load keeps its earlier one where something else kept
    that alive; otherwise the name is gone, and its "not sent back" line says why."""
    if namespace is None:
        return
    if earlier is None:
        if key.isidentifier() and key not in namespace:  # the cell bound it first
            failed[key] += "; the name is not defined here"
        return
    value = earlier()
    if value is not None:
        namespace[key] = value
        failed[key] += "; the name keeps its value from before the run"
    else:
        failed[key] += "; its value from before the run was let go to make room: unbound now"


def _attach(callback: Any, model: Any) -> None:
    """Give a History (any Keras callback) back the model it was sent without."""
    setter = getattr(callback, "set_model", None)
    if callable(setter):
        setter(model)
    else:
        callback.model = model


@contextlib.contextmanager
def _banners_kept_out() -> Iterator[None]:
    """The kernel's first import of the framework (to load a model that came back) has
    TensorFlow write its start-up log lines to fd 2, which a notebook shows in a pink box: they
    go to a scratch file instead (Python's own errors still reach the cell: an exception)."""
    if "tensorflow" in sys.modules:
        yield
        return
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _load_model(package: str, data: bytes, functions: dict[str, Any] | None = None) -> Any:
    """A model the child saved in the Keras format (bytes: the child may be on another machine),
    its custom objects found among the notebook's names and the ``functions`` the child sent.
    Not in Keras' safe mode: the file is the notebook's own cell's, saved by the process the
    kernel started for it, and safe mode refused a ``Lambda(lambda t: ...)`` layer, so the model
    stayed there (Keras unpickles models without it, for the same reason). Its lookup tables (a
    TextVectorization's vocabulary) go when it goes: loaded every run, they were kept once a run
    (prepare/lookup_tables.py)."""
    custom = {**_notebook_classes(), **(functions or {})}
    with _banners_kept_out():
        if package == "tf_keras":
            import tf_keras
        else:
            import keras
    with tempfile.TemporaryDirectory() as folder, freed_with_their_objects():
        path = os.path.join(folder, "model.keras")
        with open(path, "wb") as out:
            out.write(data)
        if package == "tf_keras":
            import tf_keras

            with keras_scope(custom):
                model = tf_keras.models.load_model(path, safe_mode=False)
        else:
            import keras

            with keras_scope(custom):  # (its transport's warnings kept out)
                model = keras.saving.load_model(path, safe_mode=False)
    optimizer_unbuilt_again(model)
    moved_into_tensorflows_memory(model)
    return model


_LOADED: dict[str, Any] = {}  # while a pickle loads: the models that came back, by key


def model_sent_apart(key: str) -> Any:
    """In a pickle from the child: the model it sent on its own (``child._model_keys``), the one
    loaded here, so that ``best_model is models[0]`` still holds."""
    try:
        return _LOADED[key]
    except KeyError:
        raise pickle.UnpicklingError(f"the model it holds ({key}) did not load here") from None


def _loads(data: bytes, models: dict[str, Any] | None = None) -> Any:
    """A pickle from the child: Keras objects in it (a History's model) made of the notebook's
    classes are loaded with them; ``models``: those loaded already, by key."""
    import cloudpickle

    _LOADED.update(models or {})
    try:
        with keras_scope(_notebook_classes()):
            return cloudpickle.loads(data)
    finally:
        _LOADED.clear()


def _functions(sent: Any) -> dict[str, Any]:
    """The functions the child sent beside its models (``child._send_functions``), by name."""
    import cloudpickle

    found = {}
    for name, data in (sent[1] if sent else {}).items():
        with contextlib.suppress(Exception):
            found[name] = cloudpickle.loads(data)
    return found


def _notebook_classes() -> dict[str, type]:
    from IPython import get_ipython

    from keras_nbguard.isolation.sending import custom_objects

    shell = get_ipython()
    return custom_objects(shell.user_ns) if shell is not None else {}  # functions too
