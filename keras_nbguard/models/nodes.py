"""Keras' node graph, where a layer built in one cell keeps the models of later cells alive.

Calling a layer on a symbolic tensor makes a ``Node`` (Keras 3: ``keras/src/ops/node.py``; Keras 2:
``tf_keras/src/engine/node.py``) that appends itself to the called layer's ``_inbound_nodes`` and
to the ``_outbound_nodes`` of every layer that made one of its inputs. The node holds the call's
input and output tensors and the called layer (``node.operation``, Keras 2 ``node.layer``), so a
``TextVectorization`` adapted in a setup cell and called on each run's ``keras.Input`` keeps every
run's graph, and a model called inside that graph, alive; a base model called on new inputs keeps
each run's head layers. A tensor names its node only by index: ``t._keras_history`` is (layer,
node_index, tensor_index), and a Functional model lists its nodes by key (``id(op)_ib-<index>``,
Keras 2 ``<name>_ib-<index>`` in ``_network_nodes``). Cutting a node out of a layer's
``_inbound_nodes`` therefore moves the later nodes down, and their tensors' histories and the
keys of the models that contain them are moved with them here.

Only this module (and its tests) knows these private parts; nothing here imports Keras.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

_NODE_MODULES = ("keras.src.ops.node", "tf_keras.src.engine.node")
_KEYS = ("_nodes", "_network_nodes")  # Keras 3 / Keras 2: a Functional model's node keys


def node_types() -> tuple[type, ...]:
    """The Node class of each Keras imported (empty: none is)."""
    found = (getattr(sys.modules.get(name), "Node", None) for name in _NODE_MODULES)
    return tuple(c for c in found if isinstance(c, type))


def is_node(obj: Any, types: tuple[type, ...] | None = None) -> bool:
    kinds = node_types() if types is None else types
    return bool(kinds) and isinstance(obj, kinds)


def operation_of(node: Any) -> Any:
    """The layer (or model) the call was made on."""
    op = getattr(node, "operation", None)
    return op if op is not None else getattr(node, "layer", None)


def input_tensors(node: Any) -> list[Any]:
    arguments = getattr(node, "arguments", None)
    if arguments is not None:  # Keras 3
        return list(getattr(arguments, "keras_tensors", ()))
    return list(getattr(node, "_keras_inputs", ()) or ())  # Keras 2


def output_tensors(node: Any) -> list[Any]:
    return [t for t in _flatten(getattr(node, "outputs", ())) if hasattr(t, "_keras_history")]


def upstream_ops(node: Any) -> list[Any]:
    """The layers whose ``_outbound_nodes`` hold ``node``."""
    ops = (_history(t)[0] for t in input_tensors(node))
    return list({id(op): op for op in ops if op is not None}.values())


def graph_nodes(model: Any) -> list[Any]:
    """The nodes of a Functional model's graph (a Sequential's inner Functional's); [] for a
    subclassed model, which keeps no graph."""
    for owner in (model, getattr(model, "_functional", None)):
        by_depth = getattr(owner, "_nodes_by_depth", None) if owner is not None else None
        if isinstance(by_depth, dict):
            return [n for nodes in list(by_depth.values()) for n in nodes]
    return []


def node_lists(node: Any) -> list[tuple[Any, list[Any]]]:
    """(layer, its node list) for each list that holds ``node``: the called layer's
    ``_inbound_nodes`` and the ``_outbound_nodes`` of the layers that made its inputs."""
    out = []
    for layer, kind in [
        (operation_of(node), "inbound"),
        *((up, "outbound") for up in upstream_ops(node)),
    ]:
        nodes = _list(layer, kind) if layer is not None else None
        if nodes is not None and any(n is node for n in nodes):
            out.append((layer, nodes))
    return out


def nested_graph_nodes(model: Any) -> Iterator[Any]:
    """``graph_nodes`` of ``model`` and of every model called inside its graph, each once: what
    keeping ``model`` working needs."""
    seen: set[int] = set()
    todo = [model]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for node in graph_nodes(current):
            yield node
            op = operation_of(node)
            if op is not None and id(op) not in seen and graph_nodes(op):
                todo.append(op)


def direction(layer: Any, node: Any) -> str | None:
    """How ``layer`` holds ``node``: "outbound", "inbound" or None."""
    for kind in ("outbound", "inbound"):
        nodes = _list(layer, kind)
        if nodes is not None and any(n is node for n in nodes):
            return kind
    return None


def ancestors(tensors: Iterable[Any], limit: int = 10_000) -> set[int]:
    """ids of the nodes that made ``tensors`` and of every node upstream of them: what a model
    built later from those tensors will need."""
    seen: set[int] = set()
    todo = [t for t in tensors if hasattr(t, "_keras_history")]
    while todo and len(seen) < limit:
        node = _node_of(todo.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(input_tensors(node))
    return seen


@dataclass
class Cut:
    """What ``cut`` took out: how many nodes, from which layers (the layer, its Keras name), how
    many nodes moved down."""

    nodes: int = 0
    layers: list[tuple[Any, str]] = field(default_factory=list)
    moved: int = 0


def cut(nodes: list[Any]) -> Cut:
    """Take ``nodes`` out of every layer's ``_inbound_nodes`` / ``_outbound_nodes``. The nodes
    behind a cut one in ``_inbound_nodes`` move down: their output tensors' histories and the node
    keys of every live model that contains them move with them (one heap scan finds the models;
    a run cutting only its predecessors' nodes, the last ones of each list, needs none)."""
    done = Cut()
    gone = {id(n) for n in nodes}
    if not gone:
        return done
    named: dict[int, tuple[Any, str]] = {}
    inbound: dict[int, Any] = {}
    for node in nodes:
        op = operation_of(node)
        if op is not None:
            inbound[id(op)] = op
        for up in upstream_ops(node):
            before = _list(up, "outbound")
            if before is not None and any(id(n) in gone for n in before):
                before[:] = [n for n in before if id(n) not in gone]
                named[id(up)] = (up, str(getattr(up, "name", type(up).__name__)))
    moved: list[tuple[Any, Any, int, int]] = []  # (node, op, old index, new index)
    for op in inbound.values():
        before = _list(op, "inbound")
        if before is None:
            continue
        kept = [n for n in before if id(n) not in gone]
        if len(kept) == len(before):
            continue
        old = {id(n): i for i, n in enumerate(before)}
        before[:] = kept
        named[id(op)] = (op, str(getattr(op, "name", type(op).__name__)))
        for new_index, node in enumerate(kept):
            if old[id(node)] != new_index:
                moved.append((node, op, old[id(node)], new_index))
    done.nodes = len(gone)
    done.layers = list(named.values())
    if moved:
        _renumber(moved, every_functional())
        done.moved = len(moved)
    return done


def every_functional() -> list[Any]:
    """Every live Keras model that keeps node keys (one heap scan: used only when a cut moved
    nodes down, which a run cutting its own predecessors never does)."""
    from keras_nbguard.models.frameworks import all_subclasses, model_classes

    classes = [c for base in model_classes() for c in all_subclasses(base)]
    ids = {id(c) for c in classes}
    found = gc.get_referrers(*classes) if classes else []
    return [m for m in found if id(type(m)) in ids and any(hasattr(m, k) for k in _KEYS)]


# -- private parts --------------------------------------------------------------------------------
def _renumber(moved: list[tuple[Any, Any, int, int]], models: Iterable[Any]) -> None:
    for node, op, old_index, new_index in moved:
        for tensor in output_tensors(node):
            history: Any = getattr(tensor, "_keras_history", None)  # a KerasHistory namedtuple
            if _history(tensor)[0] is op and history[1] == old_index:
                tensor._keras_history = type(history)(op, new_index, history[2])
    where = {id(node): (op, old_index, new_index) for node, op, old_index, new_index in moved}
    for model in models:
        for name in _KEYS:
            keys = getattr(model, name, None)
            if isinstance(keys, set):
                break
        else:
            continue
        mine = [where[id(n)] for n in graph_nodes(model) if id(n) in where]
        keys.difference_update(_key(op, old, name) for op, old, _ in mine)  # all out, then in:
        keys.update(_key(op, new, name) for op, _, new in mine)  # 2->1 and 1->0 may share a key


def _key(op: Any, index: int, name: str) -> str:
    if name == "_nodes":  # keras/src/ops/function.py: make_node_key
        return f"{id(op)}_ib-{index}"
    return f"{op.name}_ib-{index}"  # tf_keras/src/engine/functional.py: _make_node_key


def _list(layer: Any, kind: str) -> list[Any] | None:
    try:
        value = getattr(layer, f"_{kind}_nodes", None)
    except Exception:
        return None
    return value if isinstance(value, list) else None


def _history(tensor: Any) -> tuple[Any, int, int]:
    history = getattr(tensor, "_keras_history", None)
    if isinstance(history, tuple) and len(history) == 3:
        return history
    return (None, -1, -1)


def _node_of(tensor: Any) -> Any:
    op, index, _ = _history(tensor)
    nodes = _list(op, "inbound") if op is not None else None
    return nodes[index] if nodes is not None and 0 <= index < len(nodes) else None


def _flatten(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)) and not hasattr(value, "_keras_history"):
        for item in value:
            yield from _flatten(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _flatten(item)
    else:
        yield value
