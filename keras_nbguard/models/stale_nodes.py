"""The nodes of Keras' graph that earlier runs made, and that a layer outliving those runs still
keeps in its node lists (nodes.py): which of them can go, cutting them, and how a path through one
reads in words (``vectorize_layer — its outbound node into end_to_end_model of #3``).

A node can go when no model that stays (one alive and not being released now) has it in its graph
and no tensor bound to your names needs it: the layer keeps working (it still vectorizes, and a
new model built on it trains), only the earlier runs' calls on it are forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from keras_nbguard.models.frameworks import NODE_LISTS
from keras_nbguard.models.naming import Chain
from keras_nbguard.models.nodes import (
    ancestors,
    cut,
    is_node,
    nested_graph_nodes,
    node_lists,
    node_types,
)
from keras_nbguard.models.registry import ModelRegistry, RunRef

WIDE = 1000  # a container of yours with more items than this is not searched for tensors
OUTSIDE = RunRef("", 0)  # what "made" a node no tracked run made: a cell run without the magic


@dataclass
class NodesCut:
    """What ``cut_stale`` did: nodes taken out, the layers they were taken from (your names for
    them where you have one), the runs that made them."""

    nodes: int = 0
    layers: list[str] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)

    others: int = 0  # layers without a name of yours: those of the earlier runs' own models
    outside: bool = False  # some were made by cells run without %%kerasrun

    def text(self) -> str:
        made = [f"run(s) {', '.join(f'#{n}' for n in self.runs)}"] if self.runs else []
        made += ["cells run without %%kerasrun"] if self.outside else []
        where = ", ".join(self.layers) or f"{self.others} layer(s)"
        rest = (
            f" (and {self.others} layer(s) of those runs' models)"
            if self.layers and (self.others)
            else ""
        )
        return f"{self.nodes} node(s) of {' and '.join(made)} from {where}{rest}"


def stale(
    registry: ModelRegistry,
    label: str | None,
    user_ns: Mapping[str, Any],
    kept: Iterable[Any],
    latest: bool = False,
    outside: Iterable[Any] = (),
) -> list[tuple[Any, RunRef]]:
    """The nodes made by runs of ``label`` (every label: None) before its latest run (``latest``:
    also by that one), and the ``outside`` ones (``untracked``), that no model in ``kept``
    contains and no tensor of yours needs."""
    earlier = [*registry.earlier_nodes(label, latest), *((n, OUTSIDE) for n in outside)]
    if not earlier:
        return []
    protected = {id(n) for m in kept for n in nested_graph_nodes(m)}
    protected |= ancestors(_your_tensors(user_ns))
    return [(node, run) for node, run in earlier if id(node) not in protected]


def listed(registry: ModelRegistry, label: str | None) -> bool:
    """Whether a node an earlier run of ``label`` made is still listed by a layer that outlives
    that run: one whose node lists hold nodes of another run too, or of no run (a setup cell's).
    A run's own layers list only that run's nodes: they go with its model, and need no walk."""
    for node, run in registry.earlier_nodes(label):
        for _, nodes in node_lists(node):
            for other in nodes:
                made = registry.node_run(other)
                if made is None or made[0] != run:
                    return True
    return False


def held(probe: Any) -> list[Any]:
    """The models a finished walk found held by something (a name, a cache, another model);
    every model it saw when the walk stopped early (then garbage can't be told apart)."""
    if not probe.complete:
        return list(probe.models)
    return [m for m in probe.models if probe.chains.get(id(m))]


def plan(
    registry: ModelRegistry,
    label: str | None,
    user_ns: Mapping[str, Any],
    models: Iterable[Any],
    going: set[int],
    through: Mapping[int, set[int]],
    latest: bool = False,
    outside: Iterable[Any] = (),
) -> tuple[list[tuple[Any, RunRef]], set[int]]:
    """(the nodes to cut, the models that can go). ``going``: the models about to be released;
    ``through``: id(model) -> the nodes its holding chains go through; ``outside``: nodes no
    run made that may go too (``untracked``). A model held through a node goes only if that node
    can go, and a node can go only if no model that stays has it: ``going`` shrinks until both
    hold."""
    going = set(going)
    everyone = list({id(m): m for m in models}.values())
    outside = list(outside)
    while True:
        kept = [m for m in everyone if id(m) not in going]
        nodes = stale(registry, label, user_ns, kept, latest, outside)
        cuttable = {id(n) for n, _ in nodes}
        blocked = {m for m in going if not through.get(m, set()) <= cuttable}
        if not blocked:
            return nodes, going
        going -= blocked


def held_through_nodes(probe: Any, ids: set[int]) -> dict[int, set[int]]:
    """id(model) -> the nodes its chains go through, for each model of ``ids`` that the walk
    found held only through layers' node lists."""
    out = {}
    for model in probe.models:
        chains = [c for c in probe.chains.get(id(model), []) if c.via is None]
        nodes = _only_through_nodes(chains) if id(model) in ids else None
        if nodes is not None:
            out[id(model)] = {id(n) for n in nodes}
    return out


def _only_through_nodes(chains: list[Chain]) -> list[Any] | None:
    """The nodes ``chains`` go through (each once), when there are chains and every one goes
    through a layer's node list; None otherwise."""
    links = [node_link(c) for c in chains]
    nodes = [link[1] for link in links if link is not None]
    if not chains or len(nodes) < len(links):
        return None
    return list({id(n): n for n in nodes}.values())


def untracked(probe: Any, registry: ModelRegistry | None) -> dict[int, list[Any]]:
    """id(model) -> the nodes it is held through, for each model that no tracked run made or
    used and that a finished walk found held only through layers' node lists, by nodes no run
    made: a cell run without ``%%kerasrun`` (bare, or before the extension was loaded) called it
    on a layer of yours (``outputs = model(vectorize_layer(inputs))``) and rebound its names.
    Nothing of yours reaches it but Keras' record of that call; it is an earlier model, as a
    run's would be."""
    if not probe.complete:
        return {}
    found = {}
    for model in probe.models:
        every = probe.chains.get(id(model), [])
        if not every or id(model) in probe.internal or any(c.via is not None for c in every):
            continue  # unreachable (garbage), or inside another model that may be yours
        if registry is not None and registry.last_run(model) is not None:
            continue  # a run's: the run's own release looks at it
        nodes = _only_through_nodes(every)
        if nodes is None or (
            registry is not None and any(registry.node_run(n) is not None for n in nodes)
        ):
            continue  # a name of yours, or a run's node on the way
        found[id(model)] = nodes
    return found


def cut_stale(nodes: list[tuple[Any, RunRef]], user_ns: Mapping[str, Any]) -> NodesCut | None:
    """Cut ``nodes`` out of every layer's node lists (see nodes.cut)."""
    if not nodes:
        return None
    done = cut([n for n, _ in nodes])
    if not done.nodes:
        return None
    names = {id(v): k for k, v in list(user_ns.items()) if not k.startswith("_")}
    layers = [names[id(layer)] for layer, _ in done.layers if id(layer) in names]
    runs = sorted({run.run_number for _, run in nodes if run.run_number})
    others = len(done.layers) - len(layers)
    outside = any(run is OUTSIDE for _, run in nodes)
    return NodesCut(done.nodes, list(dict.fromkeys(layers)), runs, others, outside)


def node_link(chain: Chain) -> tuple[int, Any] | None:
    """(index in ``chain.objs``, the node) of the first Keras node the chain goes through from a
    layer's node list; None when it goes through none."""
    kinds = node_types()
    if not kinds:
        return None
    for j in range(2, len(chain.objs)):
        if is_node(chain.objs[j], kinds) and chain.edges[j - 2].key in NODE_LISTS:
            return j, chain.objs[j]
    return None


def node_words(
    chain: Chain, registry: ModelRegistry | None, holder: str | None = None
) -> str | None:
    """``vectorize_layer — its outbound node into end_to_end_model of #3``: the layer holding the
    chain's node, as you type it (``holder``: when the chain starts at another model, that model's
    path), which list, the model of the run that made the node and the run; None when the chain
    goes through no node."""
    link = node_link(chain)
    if link is None:
        return None
    j, node = link
    layer = Chain(chain.root, chain.objs[: j - 1], chain.edges[: j - 2], chain.via).text()
    layer = (holder or "") + layer if chain.via is not None else layer
    key = str(chain.edges[j - 2].key)
    kind = "outbound" if "outbound" in key else "inbound"
    made = registry.node_run(node) if registry is not None else None
    if made is None:
        return f"{layer} — its {kind} node (made outside a tracked run)"
    run, into = made
    return f"{layer} — its {kind} node{f' into {into}' if into else ''} of #{run.run_number}"


def _your_tensors(user_ns: Mapping[str, Any]) -> Iterator[Any]:
    """Keras tensors bound to your names, or one level down in a list, tuple or dict."""
    for value in list(user_ns.values()):
        if _is_tensor(value):
            yield value
        elif isinstance(value, (list, tuple)) and len(value) <= WIDE:
            yield from (v for v in value if _is_tensor(v))
        elif isinstance(value, dict) and len(value) <= WIDE:
            yield from (v for v in list(value.values()) if _is_tensor(v))


def _is_tensor(value: Any) -> bool:
    try:  # an object of yours may answer any attribute, or raise
        return not isinstance(value, type) and isinstance(
            getattr(value, "_keras_history", None), tuple
        )
    except Exception:
        return False
