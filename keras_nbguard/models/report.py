"""From a finished walk to the ``LeakReport``: each model's best path, size, the run that made it,
and whether it is stale (from an older run of its kind, or held only by caches). ``find_leaks`` is
the entry point."""

from __future__ import annotations

import dataclasses
import gc
import sys
import types
from collections.abc import Mapping
from typing import Any

from keras_nbguard.models.frameworks import instance_dict
from keras_nbguard.models.records import Leak, LeakReport
from keras_nbguard.models.registry import ModelRegistry, RunRef
from keras_nbguard.models.stale_nodes import node_words, untracked
from keras_nbguard.models.walk import Probe

# bytes per element; numpy is asked only for dtypes not listed here
_ITEMSIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint64": 8,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def sizes(model: Any) -> tuple[int | None, int | None, int | None]:
    """(params, weight bytes, optimizer bytes); None where unknown (e.g. an unbuilt model)."""
    try:
        weights = list(model.weights)
        built = bool(getattr(model, "built", True))
    except Exception:
        return None, None, None
    params, nbytes = _count(weights)
    try:
        variables = {id(v): v for o in optimizers(model) for v in list(o.variables)}
        opt_bytes = _count(list(variables.values()))[1]
    except Exception:
        opt_bytes = None
    if not built and not weights:
        return None, None, opt_bytes
    return params, nbytes, opt_bytes


# the optimizers' base classes: Keras 3 (its TF, JAX and torch optimizers), tf_keras and its legacy
_OPTIMIZER_BASES = frozenset({"BaseOptimizer", "Optimizer", "OptimizerV2"})
_OPTIMIZER_PACKAGES = frozenset({"keras", "tf_keras", "tensorflow"})


def optimizers(model: Any) -> list[Any]:
    """Every optimizer the model holds: ``model.optimizer`` and those of its own attributes, or one
    level down in a list or dict of them. keras.io's GAN compiles with a ``d_optimizer`` and a
    ``g_optimizer`` of its own (10.8 MiB of Adam state) beside the 12 B default optimizer
    ``Model.compile`` makes; counting that one only said 12 B."""
    found: dict[int, Any] = {}
    main = getattr(model, "optimizer", None)
    if main is not None:
        found[id(main)] = main
    for value in list((instance_dict(model) or {}).values()):
        for item in _with_items(value):
            if is_optimizer(item):
                found.setdefault(id(item), item)
    return list(found.values())


def _with_items(value: Any, most: int = 64) -> list[Any]:
    """``value``, and its items where it is a short list, tuple or dict (Keras tracks them)."""
    if isinstance(value, dict) and len(value) <= most:
        return [value, *list(value.values())]
    if isinstance(value, (list, tuple)) and len(value) <= most:
        return [value, *value]
    return [value]


def is_optimizer(value: Any) -> bool:
    return any(
        c.__name__ in _OPTIMIZER_BASES and c.__module__.partition(".")[0] in _OPTIMIZER_PACKAGES
        for c in type(value).__mro__
    )


def count_bytes(variables: list[Any]) -> int | None:
    """Bytes of ``variables`` (None: a dtype of unknown size)."""
    return _count(variables)[1]


def _count(variables: list[Any]) -> tuple[int, int | None]:
    params, nbytes = 0, 0
    for v in variables:
        if not hasattr(v, "shape"):
            continue  # not a tensor: Keras 2's VocabWeightHandler, a lookup table's saving hook
        n = 1
        for d in tuple(v.shape):
            n *= int(d)
        params += n
        dtype = str(getattr(v.dtype, "name", v.dtype))
        size = _ITEMSIZE.get(dtype)
        if size is None:
            try:
                size = sys.modules["numpy"].dtype(dtype).itemsize
            except Exception:
                return params, None
        nbytes += n * size
    return params, nbytes


def leaks_of(
    probe: Probe, registry: ModelRegistry | None, collected: bool = False
) -> list[tuple[Any, Leak]]:
    """(model, its Leak) for every model the probe found, Keras' nested models left out.
    ``collected``: garbage was collected right before the probe (the unreachable are no garbage)."""
    outside = untracked(probe, registry)
    pairs = [
        (m, _leak(m, probe, probe.paths(m), registry, id(m) in outside, collected))
        for m in probe.models
        if id(m) not in probe.internal
    ]
    return _shared_weights(pairs)


def _shared_weights(pairs: list[tuple[Any, Leak]]) -> list[tuple[Any, Leak]]:
    """Each leak whose weights all belong to another live model says whose: keras.io's DeepDream
    listed its ``feature_extractor`` (34.2 MiB, a view into InceptionV3's layers) beside the
    InceptionV3 (83.2 MiB), and summed, the sizes said 117 MiB where 83 are. Of two models with
    the very same weights, the stale one says so (keras.io's GAN: an earlier run's ``gan`` on the
    setup cell's two models, as the current one is), else the later one listed. A model awaiting
    collection is no holder of a reachable one's weights."""
    owned: list[frozenset[int]] = []
    for model, _ in pairs:
        try:
            owned.append(frozenset(id(v) for v in model.weights))
        except Exception:  # a model that can't list its weights: shares nothing we can tell
            owned.append(frozenset())
    out = []
    for i, (model, leak) in enumerate(pairs):
        mine = owned[i]
        holder = next(
            (
                other
                for j, (_, other) in enumerate(pairs)
                if j != i
                and mine
                and mine <= owned[j]
                and (other.paths or not leak.paths)
                and (mine < owned[j] or _defers(leak, other, j < i))
            ),
            None,
        )
        if holder is not None:
            leak = dataclasses.replace(leak, weights_in=_other_name(holder, leak))
        out.append((model, leak))
    return out


def _defers(leak: Leak, other: Leak, listed_before: bool) -> bool:
    """Of two models with the very same weights, whether ``leak`` is the one to name the other."""
    rank = (bool(leak.paths), not leak.stale), (bool(other.paths), not other.stale)
    return rank[0] < rank[1] or (rank[0] == rank[1] and listed_before)


def _other_name(holder: Leak, leak: Leak) -> str:
    """What to call ``holder``: the name you bound it to where there is a short one (Keras'
    name misled: `teacher … all in distiller too`, where Keras' `distiller` was the kept old one
    and yours, `distiller`, Keras' `distiller_1`), else its model name, told apart from
    ``leak``'s own where they are the same."""
    path = holder.path
    if path and path not in (leak.path, leak.model_name) and " " not in path:
        if len(path) <= NAMED_HOLDER_CHARS:  # (`gan`, an earlier `gan`'s holder: as below)
            return path
        return holder.model_name
    if holder.run_number is not None:
        return f"{holder.model_name} of #{holder.run_number}"
    return f"another {holder.model_name!r}"


NAMED_HOLDER_CHARS = 40  # a longer path reads worse than the model's name


def build_report(
    probe: Probe, registry: ModelRegistry | None, *, collected: bool = False
) -> LeakReport:
    pairs = leaks_of(probe, registry, collected)
    reachable = sorted(
        (leak for _, leak in pairs if leak.paths), key=lambda leak: (not leak.stale, leak.path)
    )
    unreachable = tuple(leak for _, leak in pairs if not leak.paths)
    notes = (
        ()
        if probe.complete
        else (
            f"the walk stopped after {probe.scans} heap scans (depth {probe.max_depth} or "
            f"{probe.time_limit:g} s of CPU limit): some holders may be missing",
        )
    )
    return LeakReport(
        tuple(reachable),
        unreachable,
        probe.seconds,
        probe.scans,
        probe.complete,
        notes,
        collected,
    )


def _leak(
    model: Any,
    probe: Probe,
    paths: list[tuple[str, bool]],
    registry: ModelRegistry | None,
    through_nodes_only: bool = False,
    collected: bool = False,
) -> Leak:
    origin = registry.origin(model) if registry is not None else None
    last = registry.last_run(model) if registry is not None else None
    used = last or origin
    # stale by recency: a later run of its label happened (run numbers can repeat)
    newest = registry.latest.get(used.label) if registry is not None and used else None
    old = used is not None and newest is not None and newest != used
    user = any(u for _, u in paths)
    if old and _setup_model(origin, paths):
        old = False  # the cell reads it each run: a run that failed before using it is no sign
    if not paths:
        blockers = probe.blockers.get(id(model)) or []
        held = "framework internals" if collected else "its own cycles or framework internals"
        reason = f"no path from your names; held only by {held}" + (
            f" ({', '.join(blockers[:4])})" if blockers else ""
        )
        if not probe.complete:
            reason += "; the walk stopped early"
    elif old and newest is not None and used is not None:
        reason = f"from run {used.label!r} #{used.run_number}; the latest is #{newest.run_number}"
    elif not user:
        reason = "held only by IPython's caches, a traceback or a module, not by your names"
    elif through_nodes_only:  # stale_nodes.untracked
        reason = (
            "held only by Keras' record of a call on a layer of yours (made outside a tracked "
            "run), not by your names"
        )
    elif used is None or _setup_model(origin, paths):
        reason = "bound to your names (made outside a tracked run)"
    else:
        reason = f"made by the latest run of {used.label!r} and bound to your names"
    holder, holder_type, inside = _holder(probe, model, paths[0][0] if paths else "")
    held_as = _held_as(probe, model, paths[0][0] if paths else "", registry)
    params, weight_bytes, optimizer_bytes = sizes(model)
    return Leak(
        path=paths[0][0] if paths else "",
        paths=tuple(p for p, _ in paths),
        model_name=str(getattr(model, "name", "?")),
        class_name=type(model).__name__,
        params=params,
        weight_bytes=weight_bytes,
        optimizer_bytes=optimizer_bytes,
        run_label=origin.label or None if origin else None,  # "": made outside a run
        run_number=origin.run_number or None if origin else None,
        stale=old or not user or through_nodes_only,
        reason=reason,
        holder=holder,
        holder_type=holder_type,
        inside=inside,
        last_run_number=last.run_number if last else None,
        used_by=_used_by(origin, last),
        held_as=held_as,
    )


def _setup_model(origin: RunRef | None, paths: list[tuple[str, bool]]) -> bool:
    """Whether the model was made outside any tracked run and a name of yours binds it: a setup
    cell's, which the runs use (keras.io's knowledge distillation fits `student_scratch` in
    each). A run that failed before reaching it made it read "from #1", and `free` deleted the
    name the next run needed."""
    made_outside = origin is None or not origin.label
    return made_outside and any(user and path.isidentifier() for path, user in paths)


def _used_by(origin: RunRef | None, last: RunRef | None) -> tuple[str, int] | None:
    """The run that last fit, built or reused the model, where another than the one that made
    it: run ids tell runs apart (numbers repeat after a history reset)."""
    if origin is None or last is None or last == origin:
        return None
    return (last.label, last.run_number)


def _held_as(probe: Probe, model: Any, best: str, registry: ModelRegistry | None) -> str | None:
    """The best path in words where it goes through a layer's node list (stale_nodes.py)."""
    for chain in probe.chains.get(id(model), ()):
        via = probe.paths(chain.via)[:1] if chain.via is not None else []
        holder = via[0][0] if via else None
        if chain.via is not None and holder is None:
            continue
        text = (holder or "") + chain.text()
        if text == best:
            return node_words(chain, registry, holder)
    return None


def _holder(probe: Probe, model: Any, best: str) -> tuple[str | None, str | None, str | None]:
    """(what holds the model directly on the best path, its type, the model it lives in)."""
    chains = probe.chains.get(id(model), [])
    inside = None
    if chains and all(c.via is not None for c in chains):
        inside = str(getattr(chains[0].via, "name", "?"))
    chosen = next((c for c in chains if c.via is None and c.text() == best), None)
    chosen = chosen or next((c for c in chains if len(c.objs) >= 2), None)
    if chosen is None or len(chosen.objs) < 2:
        return None, None, inside
    parent, edge = chosen.objs[-2], chosen.edges[-1]
    kind = type(parent).__qualname__
    if edge.kind == "cell" and len(chosen.objs) >= 4:
        func, closure = chosen.objs[-4], chosen.objs[-3]
        if isinstance(func, types.FunctionType) and isinstance(closure, tuple):
            index = next((i for i, c in enumerate(closure) if c is parent), 0)
            names = func.__code__.co_freevars
            var = names[index] if index < len(names) else "?"
            return f"closure variable {var!r} of {func.__qualname__}", "cell", inside
    if edge.kind == "local":
        return f"local {edge.key!r} of {parent.f_code.co_qualname}()", kind, inside
    if chosen.root.kind == "ns" and len(chosen.objs) == 2:
        return "your namespace", kind, inside
    return kind, kind, inside


def find_leaks(
    user_ns: Mapping[str, Any] | None = None,
    registry: ModelRegistry | None = None,
    *,
    shell: Any = None,
    max_depth: int = 12,
    time_limit: float = 1.0,
    max_paths: int = 12,
    collect: bool = False,
) -> LeakReport:
    """Every live Keras model, with every path that holds it, its size and its run.

    ``user_ns`` defaults to ``shell.user_ns``; ``shell`` adds IPython's hidden holders (output
    cache, ``_``, last result, traceback). A model is stale when ``registry`` saw a later run of
    its label than the one that last used it. Never keeps a model alive. ``collect``: collect
    garbage first, so a model a cell rebound (its own cycles keep it until a collection) is not
    listed: what is left unreachable, the frameworks' objects hold.
    """
    if collect:
        gc.collect()
    probe = Probe(
        user_ns,
        registry,
        shell=shell,
        max_depth=max_depth,
        time_limit=time_limit,
        max_paths=max_paths,
    )
    try:
        return build_report(probe.run(), registry, collected=collect)
    finally:
        probe.close()
