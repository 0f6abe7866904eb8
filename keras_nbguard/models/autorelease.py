"""Earlier runs' models that nobody asked to keep: release them, and say where the rest are held.

A cell ending in ``model.fit(...)`` puts its ``History`` in ``Out[n]``, ``_n`` and ``_``, and the
History holds the model with its graphs: run after run, every model stays alive though the user
kept none of them. ``settle`` looks at the models an earlier run of a label used and releases the
ones held *only* by IPython's caches (``Out[n]``, ``_n``, ``_``/``__``/``___``, the last result),
by the ``.model`` link of a Keras callback (a History keeps ``.history``, ``.params`` and
``.epoch``) or by the last traceback (``sys.last_*``). A model that anything of the user's also
holds — a name, a list, a dict, an attribute, a closure, a default argument, a running frame — is
never touched: it is reported, with its paths, as still alive.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keras_nbguard.models import Chain, Probe, sizes, tentative
from keras_nbguard.models.caches import (
    CACHE_NAMES,
    TRACEBACK_ATTRS,
    clear_tracebacks,
    pop_entry,
    reset_cache_name,
)
from keras_nbguard.models.frameworks import callback_class, instance_dict, is_estimator
from keras_nbguard.models.naming import awkwardness
from keras_nbguard.models.registry import ModelRegistry, RunRef
from keras_nbguard.models.stale_nodes import (
    OUTSIDE,
    NodesCut,
    cut_stale,
    held,
    listed,
    node_link,
    node_words,
    plan,
    untracked,
)
from keras_nbguard.models.weights_freed import FreedWeights
from keras_nbguard.records.run import HeldModels

_OUTPUT_NAME = re.compile(r"_\d+")
_NODE = "node"
WALK_SECONDS = 1.0  # the heap walk's limit, CPU seconds: past it, nothing is released (partial)
Release = Callable[[], None]
Found = tuple[str, int, str, Release]  # (kind, holder id, text, action)


@dataclass
class Settled:
    """What one ``settle`` did: the models released, and those still held by the user; the nodes
    of earlier runs cut out of layers that outlive them (stale_nodes.py)."""

    released: list[tuple[RunRef, int | None, list[str]]] = field(default_factory=list)
    stale: list[tuple[RunRef, int | None, list[str], bool]] = field(default_factory=list)
    # what freeing the stale ones would free: their weights no other live model holds, and their
    # optimizers' state (a Distiller kept by name shares the setup's teacher with the current one)
    stale_weights: FreedWeights | None = None
    nodes: NodesCut | None = None
    weights: FreedWeights | None = None  # the released models' weights, to count those freed
    cuts: list[tentative.Cut] = field(default_factory=list)  # released if the next gc frees them
    # the models the next collection is expected to free: released here, or met by no walk
    going: list[weakref.ref[Any]] = field(default_factory=list)

    def released_note(self, rss_freed: int | None = None) -> HeldModels | None:
        """The released models; their weights count only variables freed: none that a layer of
        yours still holds (the setup cell's ``generator``), and after a full gc, none alive."""
        if not self.released:
            return None
        holders = [h for _, _, hs in self.released for h in hs]
        note = _note(
            [(run, size) for run, size, _ in self.released],
            sorted(dict.fromkeys(holders), key=_path_order),
            rss_freed=rss_freed,
        )
        if self.weights is not None and note.weight_bytes is not None:
            note = dataclasses.replace(
                note,
                weight_bytes=self.weights.freed_bytes(),
                optimizer_bytes=self.weights.freed_optimizer_bytes(),
            )
        return note

    def stale_note(self) -> HeldModels | None:
        if not self.stale:
            return None
        paths = [p for _, _, ps, _ in self.stale for p in ps[:1]]  # each model's best path
        in_containers = any(nested for *_, nested in self.stale)
        command = "%nbguard free --containers" if in_containers else "%nbguard free"
        note = _note([(run, size) for run, size, _, _ in self.stale], paths, command=command)
        if self.stale_weights is None or note.weight_bytes is None:
            return note
        freed = self.stale_weights.freed_bytes()
        return dataclasses.replace(
            note,
            weights_shared=None if freed is None else note.weight_bytes - freed,
            optimizer_bytes=self.stale_weights.freed_optimizer_bytes(),
        )


def settle(
    registry: ModelRegistry,
    label: str,
    shell: Any,
    user_ns: Any,
    *,
    release: bool = True,
    exclude: RunRef | None = None,
    report: bool = True,
) -> Settled:
    """Release the models of ``label``'s earlier runs held only by caches and bookkeeping (unless
    ``release`` is False) and list the others (unless ``report`` is False). ``exclude``: the run
    whose models are current (the run that just ended); before a run, every model of the label
    is from an earlier run."""
    settled = Settled()
    earlier = [m for m in registry.of_label(label) if registry.last_run(m) != exclude]
    setup = _setup_models(earlier, registry, user_ns)
    candidates = _outermost([m for m in earlier if id(m) not in setup])
    del earlier
    nodes = release and listed(registry, label)  # a layer of yours keeps an earlier run's call
    if not nodes and (not candidates or (not report and _all_named(candidates, user_ns))):
        return settled  # the usual cases, and cheap ones: no heap walk
    found = None if nodes else tentative.reach(candidates, user_ns, shell)
    if found is not None:
        settled.going = [weakref.ref(m) for m in candidates if id(m) not in found.met]
        met = [m for m in candidates if id(m) in found.met]
        if not report:  # the models your names bind: yours, and current; nothing to say of them
            met = [m for m in met if not found.named(m, user_ns)]
        if not met:
            return settled  # none within reach (a rebound model is garbage until the next gc)
        if release and all(
            found.through_callbacks_only(m) and not registry.held_unseen(m) for m in met
        ):
            settled.cuts = tentative.cut(met, found, registry, label, user_ns)
            return settled  # the next collection tells which went (tentative.py)
    probe = Probe(user_ns, registry, shell=shell, time_limit=WALK_SECONDS).run()
    try:
        _settle_walked(settled, probe, candidates, registry, label, shell, user_ns, release)
    finally:
        probe.close()
        del candidates
    # no gc here: the models sit in reference cycles (model.history <-> History.model) that the
    # next run's clear collects anyway, right before its deep clean (a full gc is ~0.1 s)
    return settled


def _setup_models(models: list[Any], registry: ModelRegistry, user_ns: Any) -> set[int]:
    """Ids of the models made outside any tracked run that a name of yours binds: a setup
    cell's, which the runs use, whatever the last run reached (report.py, ``_setup_model``)."""
    outside = {id(m) for m in models if not getattr(registry.origin(m), "label", "")}
    if not outside:
        return set()
    return {id(v) for k, v in list(user_ns.items()) if id(v) in outside and not k.startswith("_")}


def _settle_walked(
    settled: Settled,
    probe: Probe,
    candidates: list[Any],
    registry: ModelRegistry,
    label: str,
    shell: Any,
    user_ns: Any,
    release: bool,
) -> None:
    plans: list[tuple[Any, list[Chain], list[Found | None]]] = []
    earlier = {id(m) for m in candidates}
    unreachable = _unreachable(candidates, probe)
    for model in candidates:
        every = probe.chains.get(id(model), [])
        if id(model) in unreachable:
            settled.going.append(weakref.ref(model))
            continue  # garbage that the next gc collects
        # not those inside another model, but those through a kept model's node list
        chains = [c for c in every if c.via is None or _through_a_kept_models_node(c, earlier)]
        found = [_bookkeeping(c, shell, user_ns, registry, _holder(probe, c)) for c in chains]
        plans.append((model, every, found))
    going = {
        id(m)
        for m, every, found in plans
        if release and probe.complete and found and None not in found
    }
    through = {
        id(m): {f[1] for f in found if f is not None and f[0] == _NODE} for m, _, found in plans
    }
    outside = untracked(probe, registry) if release else {}
    for model in probe.models:  # built by cells run without the magic, kept only by a node
        if id(model) in outside:
            plans.append((model, probe.chains[id(model)], [_outside(probe, model, registry)]))
            going.add(id(model))
            through[id(model)] = {id(n) for n in outside[id(model)]}
    nodes: list[tuple[Any, RunRef]] = []
    if release:  # a node goes only if no model that stays has it (stale_nodes.plan)
        extra = [n for found in outside.values() for n in found]
        nodes, going = plan(registry, label, user_ns, held(probe), going, through, outside=extra)
    releases: dict[str, Release] = {}
    weights = FreedWeights(user_ns, going)
    kept = [m for m, _, _ in plans if id(m) not in going and id(m) not in outside]
    if kept:  # what freeing them would free: not what your other models hold
        settled.stale_weights = FreedWeights(user_ns, going | {id(m) for m in kept})
    for model, every, found in plans:
        run = OUTSIDE if id(model) in outside else registry.last_run(model) or RunRef(label, 0)
        size = _size(model)
        if id(model) in going:
            holders: dict[int, str] = {}  # one text per holder: Out[12], not _12 and _ too
            actions = [f for f in found if f is not None]
            for _, holder, text, action in sorted(actions, key=lambda a: _path_order(a[2])):
                releases.setdefault(text, action)
                holders.setdefault(holder, text)
            settled.released.append((run, size, _outermost_paths(list(holders.values()))))
            settled.going.append(weakref.ref(model))
            weights.add(model)
        elif id(model) not in outside:  # one the plan kept: no run's, nothing to report
            paths = [p for p, _ in probe.paths(model)]
            nested = any(len(c.edges) > 1 or c.via is not None for c in every if c.user)
            settled.stale.append((run, size, paths, nested))
            if settled.stale_weights is not None:
                settled.stale_weights.add(model)
    for action in releases.values():
        action()
    settled.nodes = cut_stale(nodes, user_ns)
    settled.weights = weights if settled.released else None


def _unreachable(candidates: list[Any], probe: Probe) -> set[int]:
    """Ids of the models nothing of yours reaches: held by nothing the walk found, or only
    through models that are so themselves (the layer an earlier run made, rebound since, whose
    node list keeps the head it was called with: garbage in one cycle, not stale)."""
    unreachable: set[int] = set()
    grew = True
    while grew:
        grew = False
        for model in candidates:
            if id(model) not in unreachable and all(
                chain.via is not None and id(chain.via) in unreachable
                for chain in probe.chains.get(id(model), [])
            ):
                unreachable.add(id(model))
                grew = True
    return unreachable


def _through_a_kept_models_node(chain: Chain, earlier: set[int]) -> bool:
    """A chain from a model that stays (a setup cell's ``encoder``, no earlier run's) through its
    node lists: Keras' record of a call an earlier run made on it (``head(encoder(inputs))``),
    not that model holding the other as a part of it."""
    return id(chain.via) not in earlier and node_link(chain) is not None


def _outermost_paths(texts: list[str]) -> list[str]:
    """``texts`` less those under another one: ``Out[2].history_ (its History)`` goes with
    ``Out[2] (its SKLearnClassifier)``."""
    paths = [text.partition(" (")[0] for text in texts]
    return [
        text
        for text, path in zip(texts, paths, strict=True)
        if not any(path != other and path.startswith((f"{other}.", f"{other}[")) for other in paths)
    ]


def _holder(probe: Probe, chain: Chain) -> str | None:
    """The path of the model a chain starts at (``encoder``), when it starts at one."""
    if chain.via is None:
        return None
    paths = probe.paths(chain.via)[:1]
    return paths[0][0] if paths else None


def _bookkeeping(
    chain: Chain,
    shell: Any,
    user_ns: Any,
    registry: ModelRegistry | None = None,
    holder: str | None = None,
) -> Found | None:
    """How to release ``chain`` if it belongs to IPython or Keras: (its kind, the holder as an
    id: a History, a node, or 0 for IPython's output caches; its text; the action). None when the
    user holds the model this way. A chain through a node an earlier run made in a layer of
    yours (``vectorize_layer._outbound_nodes[0].operation``) is Keras' bookkeeping: the node is
    cut (stale_nodes.py), the layer kept."""
    link = node_link(chain) if registry is not None else None
    if link is not None and registry is not None:
        made = registry.node_run(link[1])
        if made is not None and registry.latest.get(made[0].label) != made[0]:
            return _NODE, id(link[1]), node_words(chain, registry, holder) or "a node", _nothing
        return None
    found = _cached(chain, shell, user_ns)
    return None if found is None else ("cache", *found)


def _outside(probe: Probe, model: Any, registry: ModelRegistry) -> Found:
    """How a model built outside the runs and held only through a layer's node reads, released
    (stale_nodes.untracked): its first chain's node, in words."""
    chain = probe.chains[id(model)][0]
    link = node_link(chain)
    return _NODE, id(link[1]) if link else 0, node_words(chain, registry) or "a node", _nothing


def _nothing() -> None:
    """A node's release: cut with the others once the models that go are known."""


def _cached(chain: Chain, shell: Any, user_ns: Any) -> tuple[int, str, Release] | None:
    kind, key = chain.root.kind, chain.first_key
    if kind == "traceback" or (kind == "sys" and key in TRACEBACK_ATTRS):
        # first: what a stopped fit's frames hold (its callbacks, ours among them, with their
        # .model) goes with the traceback; naming each callback's link was noise
        def forget_traceback() -> None:
            clear_tracebacks(shell)

        return 1, "the last traceback", forget_traceback
    holder = chain.objs[-2] if len(chain.objs) >= 2 else None
    callback = callback_class()
    last = chain.edges[-1] if chain.edges else None
    if (
        isinstance(holder, callback)
        and last is not None
        and last.kind == "attr"
        and last.key in tentative.MODEL_LINKS
    ):
        text = chain.text()
        text = text[: -len(last.text)] if text.endswith(last.text) else text
        key = last.key

        def unlink() -> None:
            setattr(holder, key, None)

        return id(holder), f"{text} (its {type(holder).__name__})", unlink
    if len(chain.edges) == 2 and is_estimator(holder) and last is not None and last.key == "model_":
        # a cell ending in ``est.fit(X, y)``: the fitted estimator in Out[n], its model in it
        entry = _cache_entry(chain, shell, user_ns)
        return None if entry is None else (0, f"{entry[0]} (its {type(holder).__name__})", entry[1])
    if len(chain.edges) != 1:
        return None
    entry = _cache_entry(chain, shell, user_ns)
    return None if entry is None else (0, *entry)


def _cache_entry(chain: Chain, shell: Any, user_ns: Any) -> tuple[str, Release] | None:
    """The IPython cache entry ``chain`` starts at (``Out[7]``, ``_7``, ``_``, the last result)
    and how to drop it; None when it starts elsewhere."""
    kind, key = chain.root.kind, chain.first_key
    if kind == "out":
        return f"Out[{key}]", lambda: pop_entry(chain.objs[0], key, "", {})
    if kind in ("ns", "hidden", "displayhook") and key in CACHE_NAMES:
        return str(key), lambda: reset_cache_name(shell, user_ns, str(key), {})
    if kind in ("ns", "hidden") and isinstance(key, str) and _OUTPUT_NAME.fullmatch(key):

        def drop_output_name() -> None:
            for names in (user_ns, getattr(shell, "user_ns_hidden", None)):
                pop_entry(names, key, "", {})

        return key, drop_output_name
    if kind == "exec" and key == "result":
        return "the last result", lambda: setattr(chain.objs[0], "result", None)
    return None


def _outermost(models: list[Any]) -> list[Any]:
    """``models`` less those another one keeps as an attribute (Sequential's ``_functional``, a
    sub-model): they go with it."""
    ids = {id(m) for m in models}
    inner = {id(v) for m in models for v in (instance_dict(m) or {}).values() if id(v) in ids}
    return [m for m in models if id(m) not in inner]


def _all_named(models: list[Any], user_ns: Any) -> bool:
    """Whether a name of the user's binds each model itself, or the estimator fitted with it
    (``est.fit(X, y)``: ``est.model_``): then none can be released (the model a re-run cell is
    about to rebind), and the heap walk can be skipped."""
    named = set()
    for key, value in list(user_ns.items()):
        if not key.startswith("_"):
            named.add(id(value))
            if is_estimator(value):
                named.add(id((instance_dict(value) or {}).get("model_")))
    return all(id(m) in named for m in models)


def _size(model: Any) -> int | None:
    """Bytes of its weights, as the leak finder and the dashboard count them."""
    return sizes(model)[1]


def went(cuts: list[tentative.Cut], registry: ModelRegistry) -> HeldModels | None:
    """After a collection: the models of ``cuts`` it freed that no run has said yet, as a note
    (their weights counted once freed). Those it did not free get their links back, and the heap
    walk from now on (which names what holds them)."""
    gone = []
    for cut in cuts:
        if not cut.went():
            registry.mark_held_unseen(cut.model())
        elif not cut.said:
            gone.append(cut)
    return cuts_note(gone)


def cuts_note(cuts: list[tentative.Cut]) -> HeldModels | None:
    """The models of ``cuts``, released, as a note (their weights: those nothing of yours holds,
    and none alive once a full gc has run)."""
    if not cuts:
        return None
    holders = [h for c in cuts for h in c.holders[:1]]
    note = _note([(c.run, c.size) for c in cuts], sorted(dict.fromkeys(holders), key=_path_order))
    if note.weight_bytes is None:
        return note
    counted = {id(c.weights): c.weights for c in cuts}.values()
    return dataclasses.replace(
        note,
        weight_bytes=_sum([w.freed_bytes() for w in counted]),
        optimizer_bytes=_sum([w.freed_optimizer_bytes() for w in counted]),
    )


def _sum(values: list[int | None]) -> int | None:
    """The total; None where one of them is unknown."""
    return None if None in values else sum(v for v in values if v is not None)


def merged(before: HeldModels | None, after: HeldModels | None) -> HeldModels | None:
    """The models released before a run and after it, as one note."""
    if before is None or after is None:
        return before or after
    return HeldModels(
        count=before.count + after.count,
        outside=before.outside + after.outside,
        runs=tuple(sorted({*before.runs, *after.runs})),
        weight_bytes=_sum([before.weight_bytes, after.weight_bytes]),
        paths=tuple(dict.fromkeys((*before.paths, *after.paths))),
        rss_freed=_sum([before.rss_freed, after.rss_freed]),
        optimizer_bytes=_sum([before.optimizer_bytes, after.optimizer_bytes]),
    )


def _note(
    models: list[tuple[RunRef, int | None]],
    paths: list[str],
    *,
    command: str | None = None,
    rss_freed: int | None = None,
) -> HeldModels:
    sized = [size for _, size in models]
    return HeldModels(
        count=len(models),
        outside=sum(run is OUTSIDE for run, _ in models),
        runs=tuple(sorted({run.run_number for run, _ in models if run.run_number})),
        weight_bytes=None if None in sized else sum(s for s in sized if s is not None),
        paths=tuple(paths),
        command=command,
        rss_freed=rss_freed,
    )


def _path_order(path: str) -> tuple[int, int, str]:
    return awkwardness(path), len(path), path
