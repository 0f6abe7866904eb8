"""How each name an isolated cell reads reaches the new process, chosen per kind in the order
that keeps its meaning: a large numpy array through shared memory; a Keras object (model,
adapted ``TextVectorization``, sub-model) by Keras' own serialization, weights, vocabulary and
the notebook's custom classes with it; a tf.data pipeline by replaying the statements of the
earlier cell that built it (``replay.py``), else by ``tf.data``'s save/load (which materializes
it: finite and small only); anything else pickled (cloudpickle), else replayed. A name that can
go no way is a ``ValueError`` in the user's terms, before any process starts.

The kernel packs (``pack_inputs``), the child unpacks (``receiving.py``); a value sent under two
names, or read by a replayed statement too, is made once in the child."""

from __future__ import annotations

import io
import os
import secrets
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..formatting import fmt_size

SHARED_BYTES = 1 << 20  # numpy arrays from this size travel through shared memory
TFDATA_BYTES = 256 << 20  # the most a tf.data pipeline may weigh, saved (it is materialized)


class Unsendable(Exception):
    """One way a value could not take, and why."""


@dataclass
class Sent:
    """What goes to the child: ``inputs`` (name -> packet) and the way each name took."""

    inputs: dict[str, Any] = field(default_factory=dict)
    ways: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str | None:
        """``x_train (pickle 2.1 MiB), vectorize_layer (keras 0.3 MiB), train_ds (replayed
        In[4] lines 7-8), 2 modules (np, tf)``: which way each name took."""
        if not self.ways:
            return None
        modules = [name for name, way in self.ways.items() if way == "module"]
        parts = [f"{name} ({way})" for name, way in self.ways.items() if way != "module"]
        if len(modules) == 1:
            parts.append(f"{modules[0]} (module)")
        elif modules:
            parts.append(f"{len(modules)} modules ({', '.join(modules)})")
        return ", ".join(parts)

    @property
    def note(self) -> str | None:
        """The run's word on it, among the isolated line's notes."""
        summary = self.summary()
        return None if summary is None else f"the names sent: {summary}"


def pack_inputs(
    names: Iterable[str],
    namespace: Mapping[str, Any],
    explicit: bool,
    shared: list[Any] | None,
    in_place: Iterable[str] = (),
    current: str = "",
) -> Sent:
    """Each name the user's namespace has, packed the way its kind allows (``shared`` None:
    children elsewhere, a Ray cluster: no shared memory; segments made are appended to it for
    the caller to unlink after the run). ``in_place``: names the cell changes (a writable copy);
    ``current``: the cell's source (not replayed). ``ValueError`` for a name that can go no
    way, or one given with ``--inputs`` that does not exist."""
    from .names import is_builtin

    packer = _Packer(namespace, shared, current)
    sent = Sent()
    chosen: list[tuple[str, Any]] = []
    changed = set(in_place)
    for name in names:
        if name not in namespace:
            if explicit:
                raise ValueError(f"--inputs: {name!r} is not defined in the notebook")
            continue  # read before it is bound in the cell, or a name of the child's own
        value = namespace[name]
        if not explicit and (
            name.startswith("_")  # IPython's _, __, _i3: not the user's
            or is_builtin(name, namespace)
            or type(value).__module__.startswith("IPython")  # get_ipython, In's exit: its own
        ):
            continue
        try:
            packet, way = packer.resolve(name, packer.end, writable=name in changed)
        except Unsendable as exc:
            raise ValueError(
                f"--isolate can't send {name!r} ({type(value).__name__}) to the new process: "
                f"{exc}. Make it inside the cell, or leave it out with --inputs"
            ) from None
        sent.inputs[name] = packet
        chosen.append((name, way))
    sent.ways = {name: way if isinstance(way, str) else way.describe() for name, way in chosen}
    return sent


class _Packer:
    def __init__(self, namespace: Mapping[str, Any], shared: list[Any] | None, current: str):
        self.namespace, self.shared, self.current = namespace, shared, current
        self.token = secrets.token_hex(6)
        self.packets: dict[tuple[int, str], tuple[Any, str]] = {}
        self.units: dict[int, Any] = {}
        self.count = 0
        self._history: Any = None

    @property
    def history(self) -> Any:
        if self._history is None:
            from .replay import History

            self._history = History(self.namespace, self.current)
        return self._history

    @property
    def end(self) -> tuple[int, int]:
        return self.history.end

    def resolve(
        self, name: str, point: tuple[int, int], writable: bool = False, into: Any = None
    ) -> tuple[Any, Any]:
        """(packet, way) for ``name`` as a statement before ``point`` saw it: the notebook's
        value when nothing bound it since, else (or when it can't travel) by replaying the
        statement that bound it. Packet None: replayed within ``into``, the same unit."""
        history = self.history
        at = history.binding(name, point)
        reasons: list[str] = []
        if at == history.binding(name, history.end) and name in self.namespace:
            value = self.namespace[name]
            for way in self._ways(value, writable):
                if way == "replay" and _this_process_own(value):
                    reasons.append(f"replay: {_OWN_WORDS}")
                    continue
                try:
                    if way == "replay":
                        return self._replay(name, at, point, into, type(value).__name__)
                    return self._by_value(value, way)
                except Unsendable as exc:
                    reasons.append(f"{way}: {exc}")
            raise Unsendable("; ".join(reasons))
        if at is None:
            raise Unsendable("no value: no earlier cell binds it")
        return self._replay(name, at, point, into)

    def _ways(self, value: Any, writable: bool) -> list[str]:
        if isinstance(value, types.ModuleType):
            return ["module"]
        if self.shared is not None and not writable and _shareable(value):
            return ["shared memory"]
        if _is_dataset(value):
            return ["replay", "tf.data"]
        if keras_package(value):
            return ["keras", "replay"]
        return ["pickle", "replay"]

    def _by_value(self, value: Any, way: str) -> tuple[Any, str]:
        known = self.packets.get((id(value), way))
        if known is not None:
            return known
        import cloudpickle

        key = f"{self.token}:{id(value)}:{way}"
        size: int
        if way == "shared memory":
            from .shm import pack_array  # room checked first: a full /dev/shm is SIGBUS

            packet: Any = pack_array(key, value, self.shared)  # type: ignore[arg-type]
            size = value.nbytes
        elif way == "keras":
            data, custom = _keras_bytes(value, self.namespace)
            packet = ("keras", key, keras_package(value), data, custom, type(value).__name__)
            size = len(data)
        elif way == "tf.data":
            data = _dataset_zip(value)
            packet, size = ("tfdata", key, data), len(data)
        else:
            try:
                data = cloudpickle.dumps(value)
            except Exception as exc:
                raise Unsendable(f"it can't be pickled ({_short(exc)})") from None
            packet, size = ("value", key, data), len(data)
        label = "module" if way == "module" else f"{way} {fmt_size(size)}"
        self.packets[(id(value), way)] = (packet, label)  # the namespace keeps value (its id)
        return packet, label

    def _replay(
        self, name: str, at: Any, point: tuple[int, int], into: Any, kind: str | None = None
    ) -> tuple[Any, Any]:
        """Replay the statement ``at`` that bound ``name`` (with those that changed it since),
        in ``into`` when it is of the same cell, else in a unit of its cell. ``kind``: the type
        the notebook's value has (the child checks that the replay made the same)."""
        from .replay import MAX_CELLS, Unit

        if at is None:
            raise Unsendable("no earlier cell of this notebook binds it")
        history = self.history
        cell = at[0]
        unit = into if into is not None and into.cell == cell else self.units.get(cell)
        new = unit is None
        if unit is None:
            if len(self.units) >= MAX_CELLS:
                raise Unsendable(f"replaying it needs more than {MAX_CELLS} earlier cells")
            unit = Unit(key=f"{self.token}:In[{cell}]", cell=cell)
            self.units[cell] = unit
        saved = dict(unit.statements), {i: dict(b) for i, b in unit.binds.items()}, self.count
        until = point if point[0] == cell else (cell, 1 << 30)
        try:
            for index in [at[1], *history.changes(name, at, until)]:
                self._include(unit, index)
        except Unsendable as exc:
            unit.statements, unit.binds, self.count = saved
            if new:
                del self.units[cell]
            raise Unsendable(f"replaying In[{cell}] would need {exc}") from None
        if unit is into:
            return None, None
        return ("replay", f"{unit.key}:{name}", name, unit, kind), _Way(unit)

    def _include(self, unit: Any, index: int) -> None:
        from .names import is_builtin
        from .replay import MAX_STATEMENTS

        if index in unit.statements:
            return
        if self.count >= MAX_STATEMENTS:
            raise Unsendable(f"more than {MAX_STATEMENTS} statements to replay")
        statement = self.history.statement((unit.cell, index))
        unit.statements[index] = statement.source
        self.count += 1
        for read in statement.reads:
            at = self.history.binding(read, (unit.cell, index))
            if read.startswith("__") or (
                at is None and (read not in self.namespace or is_builtin(read, self.namespace))
            ):
                continue  # a builtin, or a name the cell binds itself before it reads it
            try:
                packet, _ = self.resolve(
                    read, (unit.cell, index), writable=read in statement.changes, into=unit
                )
            except Unsendable as exc:
                raise Unsendable(f"{read!r}, which can't be sent either ({exc})") from None
            if packet is not None:
                unit.binds.setdefault(index, {})[read] = packet


class _Way:
    """"replayed In[4] lines 7-8", told once the unit has all its statements."""

    def __init__(self, unit: Any) -> None:
        self.unit = unit

    def describe(self) -> str:
        lines = sorted(n for s in self.unit.statements.values() for n in range(*_span(s)))
        span = f"line {lines[0]}" if len(lines) == 1 else f"lines {_ranges(lines)}"
        return f"replayed {self.unit.label} {span}"


def _span(source: str) -> tuple[int, int]:
    """The lines of the cell a statement's source (kept at its place) covers, end excluded."""
    first = len(source) - len(source.lstrip("\n")) + 1
    return first, first + source.strip("\n").count("\n") + 1


def _ranges(numbers: list[int]) -> str:
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def _shareable(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return (
        numpy is not None
        and type(value) is numpy.ndarray
        and value.nbytes >= SHARED_BYTES
        and not value.dtype.hasobject
    )


# what only means something in this process: a replay would make another one (or truncate a file)
_OWN_MODULES = frozenset(
    {"_io", "io", "socket", "_socket", "ssl", "subprocess", "_thread", "threading"}
    | {"multiprocessing", "sqlite3", "select", "selectors", "asyncio", "queue"}
)
_OWN_WORDS = (
    "it is this kernel's own (a file, socket, lock, thread or process): a replay would make "
    "another one"
)


def _this_process_own(value: Any) -> bool:
    return (type(value).__module__ or "").split(".")[0] in _OWN_MODULES


def _is_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    data = getattr(tf, "data", None)
    return data is not None and isinstance(value, data.Dataset)


def keras_package(value: Any) -> str | None:
    """"keras" or "tf_keras" for an object of Keras' own classes (or a subclass of them)."""
    return keras_package_of(type(value))


def _keras_bytes(value: Any, namespace: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """Keras' own serialization (its pickling writes the Keras format: config, weights,
    vocabularies), with the notebook's classes it is made of, to be found when the child loads
    it (they are not importable there)."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(value)
    except Exception as exc:
        raise Unsendable(f"Keras could not save it ({_short(exc)})") from None
    classes: dict[str, Any] = {}
    flatten = getattr(value, "_flatten_layers", None)
    parts = list(flatten()) if callable(flatten) else []
    for cls in {type(part) for part in [value, *parts]}:
        for base in cls.__mro__:
            if base.__module__ == "__main__":
                classes[base.__name__] = base
    for name, obj in notebook_classes(namespace).items():
        classes.setdefault(name, obj)
    try:
        custom = cloudpickle.dumps(classes)
    except Exception as exc:
        raise Unsendable(f"its classes can't be pickled ({_short(exc)})") from None
    return data, custom


def notebook_classes(namespace: Mapping[str, Any]) -> dict[str, type]:
    """The Keras classes the notebook defines (a custom layer, a GAN): what Keras must be given
    to load a model made of them, in the child or back in the kernel."""
    return {
        name: obj
        for name, obj in list(namespace.items())
        if isinstance(obj, type) and obj.__module__ == "__main__" and keras_package_of(obj)
    }


def keras_package_of(cls: type) -> str | None:
    for base in cls.__mro__:
        root = (base.__module__ or "").split(".")[0]
        if root in ("keras", "tf_keras"):
            return root
    return None


def _dataset_zip(dataset: Any) -> bytes:
    """The pipeline's elements, saved by ``tf.data`` and zipped (it runs the pipeline here)."""
    import tempfile
    import zipfile

    import tensorflow as tf

    length = int(dataset.cardinality())
    if length == tf.data.INFINITE_CARDINALITY:
        raise Unsendable("it repeats forever, so it can't be saved")
    if length == tf.data.UNKNOWN_CARDINALITY:
        raise Unsendable("tf.data can't tell its length (it may never end), so it isn't saved")
    for first in dataset.take(1):
        each = sum(int(t.numpy().nbytes) for t in tf.nest.flatten(first))
        if each * length > TFDATA_BYTES:
            raise Unsendable(
                f"saved, it would be about {fmt_size(each * length)} "
                f"(over {fmt_size(TFDATA_BYTES)})"
            )
    with tempfile.TemporaryDirectory() as folder:
        dataset.save(os.path.join(folder, "data"))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
            for root, _, files in os.walk(folder):
                for file in files:
                    path = os.path.join(root, file)
                    archive.write(path, os.path.relpath(path, folder))
    return out.getvalue()
