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

import re
import secrets
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from keras_nbguard.isolation import registrations
from keras_nbguard.isolation.kinds import (
    OWN_WORDS,
    SHARED_BYTES,
    Unsendable,
    custom_objects,
    dataset_zip,
    functions_keras_names,
    is_dataset,
    keras_bytes,
    keras_package,
    notebook_classes,
    shareable,
    short,
    this_process_own,
)
from keras_nbguard.isolation.notebook_functions import NotebookCode, detached_dumps
from keras_nbguard.records.formatting import fmt_size

if TYPE_CHECKING:
    from keras_nbguard.isolation.saved_datasets import SavedDatasets

__all__ = [
    "SHARED_BYTES",
    "Sent",
    "Unsendable",
    "custom_objects",
    "notebook_classes",
    "pack_inputs",
]


@dataclass
class Sent:
    """What goes to the child: ``inputs`` (name -> packet), the way each name took, and what
    the notebook's functions met in them read and bind of its names (``code``)."""

    inputs: dict[str, Any] = field(default_factory=dict)
    ways: dict[str, str] = field(default_factory=dict)
    code: NotebookCode = field(default_factory=NotebookCode)

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


# An array the cell or the notebook's functions may change: the kernel's segment, but each page
# the child writes becomes its own (the kernel's array stays as it was, as with a copy)
WRITABLE_SHARED = "shared memory, writable"

# The names IPython binds in the notebook (its output cache, input history, dunders); a user's
# own `_helper` is not one of them: never sent, it was a NameError in the isolated run
IPYTHONS_NAMES = re.compile(r"_+|_i+|_i\d+|_\d+|_[iod]h|__\w+__")


def pack_inputs(
    names: Iterable[str],
    namespace: Mapping[str, Any],
    explicit: bool,
    shared: list[Any] | None,
    in_place: Iterable[str] = (),
    current: str = "",
    saved: SavedDatasets | None = None,
    hidden: Mapping[str, Any] | None = None,
) -> Sent:
    """Each name the user's namespace has, packed the way its kind allows (``shared`` None:
    children elsewhere, a Ray cluster: no shared memory; segments made are appended to it for
    the caller to unlink after the run). ``in_place``: names the cell changes (a writable copy);
    ``current``: the cell's source (not replayed); ``saved``: the tf.data pipelines earlier runs
    saved; ``hidden``: IPython's own names (``user_ns_hidden``), which the child's shell has
    too. ``ValueError`` for a name that can go no way, or one given with ``--inputs`` that
    does not exist."""
    from keras_nbguard.isolation.names import is_builtin

    def skipped(name: str) -> bool:
        value = namespace[name]
        return (
            IPYTHONS_NAMES.fullmatch(name) is not None  # _, __, _i3, _3: not the user's
            or is_builtin(name, namespace)
            or type(value).__module__.startswith("IPython")  # get_ipython, In's exit: its own
            # IPython's own `open` (a cell that reads a file sent it, 6.8 KiB), unless rebound
            or (hidden is not None and name in hidden and hidden[name] is value)
        )

    # with --inputs, the names chosen only: the notebook's functions take copies along, as pickled
    packer = _Packer(namespace, shared, current, saved, detaching=not explicit)
    packer.sendable = lambda name: not skipped(name)
    sent = Sent(code=packer.code)
    chosen: list[tuple[str, Any]] = []
    queue = list(dict.fromkeys(names))
    # what the notebook's functions read (met as the names are pickled) goes too, as names of
    # their own; a copy, since a function may change it in place, which no reading of the cell
    # shows
    read_by_functions: set[str] = set()
    # what only the methods of the notebook's Keras classes read (all of them go, for Keras to
    # load any object of them): sent when it can go by value, never rebuilt (a pipeline's cell
    # replayed, or the pipeline saved, for every isolated cell, though none of them is used)
    for_classes_only: set[str] = set()
    for name in queue:  # grows as functions are met
        if name not in namespace:
            if explicit:
                raise ValueError(f"--inputs: {name!r} is not defined in the notebook")
            continue  # read before it is bound in the cell, or a name of the child's own
        value = namespace[name]
        if not explicit and skipped(name):
            continue
        writable = name in in_place or name in read_by_functions
        try:
            packet, way = packer.resolve(
                name, packer.end, writable=writable, rebuild=name not in for_classes_only
            )
        except Unsendable as exc:
            if name in for_classes_only:  # no object of them may be used: not worth a word
                continue
            if name in read_by_functions:  # the cell may bind it before a function reads it
                chosen.append((name, f"not sent, though a function reads it: {exc}"))
                continue
            raise ValueError(
                f"--isolate can't send {name!r} ({type(value).__name__}) to the new process: "
                f"{exc}. Make it inside the cell, or leave it out with --inputs"
            ) from None
        finally:
            for read in [*packer.code.reads, *packer.classes_code.reads]:
                if read not in queue:
                    queue.append(read)
                    read_by_functions.add(read)
                    if read not in packer.code.reads:
                        for_classes_only.add(read)
        sent.inputs[name] = packet
        chosen.append((name, way))
    sent.ways = {name: way if isinstance(way, str) else way.describe() for name, way in chosen}
    _writable_where_functions_read(sent, in_place)
    # made in the child in this order: what runs code as it is made (a Keras load builds the
    # notebook's layers, a replay maps `vectorize_text`) may call the notebook's functions,
    # which read the names made before it there (`keras` in a layer's `__init__`)
    order = sorted(sent.inputs, key=lambda name: _making_order(sent.inputs[name], sent.ways[name]))
    sent.inputs = {name: sent.inputs[name] for name in order}
    return sent


def _writable_where_functions_read(sent: Sent, in_place: Iterable[str]) -> None:
    """An array the cell reads went read-only before the functions that read it were met, and a
    function writing into it failed (``assignment destination is read-only``): copy-on-write,
    as the arrays only they read."""
    from keras_nbguard.isolation import shm

    for name in sent.code.reads:
        way, packet = sent.ways.get(name, ""), sent.inputs.get(name)
        mapped = isinstance(packet, tuple) and packet[:1] in (("shm",), ("file",))
        if name in in_place or not mapped or way.endswith("writable"):
            continue
        sent.inputs[name] = shm.writable(sent.inputs[name])
        sent.ways[name] = f"{way}, writable"


MAKING_ORDER = {"module": 0, "shm": 1, "file": 1, "value": 2, "class": 2, "keras": 3, "tfdata": 3}


def _making_order(packet: Any, way: str) -> int:
    kind = "module" if way == "module" else packet[0] if isinstance(packet, tuple) else "value"
    return MAKING_ORDER.get(kind, 4)  # a replay last


class _Packer:
    def __init__(
        self,
        namespace: Mapping[str, Any],
        shared: list[Any] | None,
        current: str,
        saved: SavedDatasets | None = None,
        detaching: bool = True,
    ):
        self.namespace, self.shared, self.current = namespace, shared, current
        self.saved = saved
        self.token = secrets.token_hex(6)
        self.packets: dict[tuple[int, str], tuple[Any, str]] = {}
        self.units: dict[int, Any] = {}
        self.count = 0
        self._history: Any = None
        # the notebook's functions in what is pickled read the child's names (False: they take
        # copies along), and what they need of the notebook's
        self.detaching = detaching
        self.code = NotebookCode()
        self.classes_code = NotebookCode()  # what the methods of the notebook's Keras classes need
        self.sendable: Callable[[str], bool] = lambda name: True  # IPython's own are not

    @property
    def history(self) -> Any:
        if self._history is None:
            from keras_nbguard.isolation.replay import History

            self._history = History(self.namespace, self.current)
        return self._history

    @property
    def end(self) -> tuple[int, int]:
        return self.history.end

    def resolve(
        self,
        name: str,
        point: tuple[int, int],
        writable: bool = False,
        into: Any = None,
        rebuild: bool = True,
    ) -> tuple[Any, Any]:
        """(packet, way) for ``name`` as a statement before ``point`` saw it: the notebook's
        value when nothing bound it since, else (or when it can't travel) by replaying the
        statement that bound it. Packet None: replayed within ``into``, the same unit. Not
        ``rebuild``: never replayed, nor saved with tf.data (both run the pipeline's work)."""
        history = self.history
        top = point == history.end  # the cell's own reads: the history is read only to replay
        at = None if top else history.binding(name, point)
        reasons: list[str] = []
        if name in self.namespace and (top or at == history.binding(name, history.end)):
            value = self.namespace[name]
            for way in self._ways(value, writable):
                if way in ("replay", "tf.data") and not rebuild:
                    reasons.append(f"{way}: only the notebook's Keras classes read it")
                    continue
                if way == "replay" and this_process_own(value):
                    reasons.append(f"replay: {OWN_WORDS}")
                    continue
                try:
                    if way == "replay":
                        at = history.binding(name, point) if top else at
                        return self._replay(name, at, point, into, type(value).__name__)
                    return self._by_value(value, way)
                except Unsendable as exc:
                    reasons.append(f"{way}: {exc}")
            raise Unsendable("; ".join(reasons))
        if at is None:
            raise Unsendable("no earlier cell of this notebook binds it")
        return self._replay(name, at, point, into)

    def _ways(self, value: Any, writable: bool) -> list[str]:
        if isinstance(value, types.ModuleType):
            return ["module"]
        if self.shared is not None and shareable(value):  # a name changed: the child's pages
            return [WRITABLE_SHARED if writable else "shared memory"]
        if is_dataset(value):
            return ["replay", "tf.data"]
        if keras_package(value):
            return ["keras", "replay"]
        return ["pickle", "replay"]

    def _by_value(self, value: Any, way: str) -> tuple[Any, str]:
        known = self.packets.get((id(value), way))
        if known is not None:
            return known

        key, asked = f"{self.token}:{id(value)}:{way}", way
        size: int
        packet: Any
        again = ""
        if way == WRITABLE_SHARED:  # the same segment, mapped copy-on-write in the child
            from keras_nbguard.isolation.shm import writable

            packet, size = writable(self._by_value(value, "shared memory")[0]), value.nbytes
            way, again = "shared memory", ", writable"
        elif way == "shared memory":
            from keras_nbguard.isolation.shm import (
                pack_array,  # room checked first: a full /dev/shm is SIGBUS
            )

            packet = pack_array(key, value, self.shared)  # type: ignore[arg-type]
            size = value.nbytes
        elif way == "keras":
            data, extra = keras_bytes(value, self.namespace, self.dumps)
            classes = (self.classes, extra)
            packet = ("keras", key, keras_package(value), data, classes, type(value).__name__)
            size = len(data)
        elif way == "tf.data":
            data, earlier = (
                self.saved.zip_of(value, dataset_zip)
                if self.saved is not None
                else (dataset_zip(value), False)
            )
            packet, size = ("tfdata", key, data), len(data)
            again = ", saved by an earlier run" if earlier else ""
        elif self.classes is not None and any(
            value is c for c in notebook_classes(self.namespace).values()
        ):  # the class itself: the very one the child loads the notebook's models with
            name = next(n for n, c in notebook_classes(self.namespace).items() if c is value)
            packet, size = ("class", key, self.classes, name), len(self.classes[1])
            way = "class"  # its size: all the notebook's Keras classes, sent once for the run
        else:
            try:
                data = self.dumps(value)
            except Exception as exc:
                raise Unsendable(f"it can't be pickled ({short(exc)})") from None
            packet, size = ("value", key, data, self.classes), len(data)
        label = "module" if way == "module" else f"{way} {fmt_size(size)}{again}"
        self.packets[(id(value), asked)] = (packet, label)  # the namespace keeps value (its id)
        return packet, label

    def dumps(self, value: Any, code: NotebookCode | None = None) -> bytes:
        """``value`` pickled (cloudpickle), the notebook's functions in it detached (what they
        need noted in ``code``, else the packer's)."""
        if not self.detaching:
            import cloudpickle

            return cloudpickle.dumps(value)
        return detached_dumps(value, self.namespace, code or self.code, self.sendable)

    @cached_property
    def classes(self) -> tuple[str, bytes] | None:
        """The notebook's Keras classes, pickled once for the whole job (key, bytes): what the
        child loads Keras objects with, wherever they are (a model, a list of layers)."""
        classes = notebook_classes(self.namespace)
        found = {
            **functions_keras_names(self.namespace),
            **classes,
            # each also under the name it was registered by (MyLayers>Scale): Keras saves it so
            **{
                name: obj
                for objects in registrations.own().values()
                for name, obj in objects.items()
            },
        }
        if not found:
            return None
        try:
            return (f"{self.token}:classes", self.dumps(found, self.classes_code))
        except Exception:
            return None

    def _replay(
        self, name: str, at: Any, point: tuple[int, int], into: Any, kind: str | None = None
    ) -> tuple[Any, Any]:
        """Replay the statement ``at`` that bound ``name`` (with those that changed it since),
        in ``into`` when it is of the same cell, else in a unit of its cell. ``kind``: the type
        the notebook's value has (the child checks that the replay made the same)."""
        from keras_nbguard.isolation.replay import MAX_CELLS, Unit

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
        from keras_nbguard.isolation.names import is_builtin
        from keras_nbguard.isolation.random_state import drawn_from
        from keras_nbguard.isolation.replay import MAX_STATEMENTS

        if index in unit.statements:
            return
        if self.count >= MAX_STATEMENTS:
            raise Unsendable(f"more than {MAX_STATEMENTS} statements to replay")
        statement = self.history.statement((unit.cell, index))
        stream = drawn_from(statement.source, self.namespace)
        if stream is not None:  # its draws now are not those it made (random_state.py)
            line = _span(statement.source)[0]
            raise Unsendable(
                f"In[{unit.cell}] line {line} draws from {stream}, which has moved on since: "
                f"replayed, it would make other data"
            )
        unit.statements[index] = statement.source
        self.count += 1
        for read in statement.reads:
            # a function's global: the value a call sees now; else the one the statement saw
            point = self.end if read in statement.late else (unit.cell, index)
            at = self.history.binding(read, point)
            if read.startswith("__") or (
                at is None and (read not in self.namespace or is_builtin(read, self.namespace))
            ):
                continue  # a builtin, or a name the cell binds itself before it reads it
            try:
                packet, _ = self.resolve(read, point, writable=read in statement.changes, into=unit)
            except Unsendable as exc:
                raise Unsendable(f"{read!r}, which can't be sent either ({exc})") from None
            if packet is not None:
                unit.binds.setdefault(index, {})[read] = packet


class _Way:
    """ "replayed In[4] lines 7-8", told once the unit has all its statements."""

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
