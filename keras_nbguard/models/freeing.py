"""Free stale Keras models: unbind the names and purge IPython's caches that hold them.

``free()`` finds every live model (``probes``), picks the stale ones (all of them with
``include_current``), and releases what holds them *outside* the user's own data: a top-level name
bound to the model itself, the output cache (``Out[n]``, ``_n``, ``_``/``__``/``___``, the last
result), and the last traceback (``sys.last_*``). A user container that still holds a model (a
list, a dict, an attribute, a closure) is reported with its path and left alone, unless
``containers=True``: then the container's slot is set to ``None`` (indexes and keys stay valid),
a set member is discarded. Then ``gc`` and ``keras.utils.clear_session()`` (keeping the global
dtype policy, which clear_session resets), and the models still alive are probed again so the
report says exactly what keeps each one. Nothing that is not a model or a holder of one is touched.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from keras_nbguard.models import Chain, Leak, ModelRegistry, Probe, current_shell, leaks_of
from keras_nbguard.models.caches import (
    CACHE_NAMES,
    TRACEBACK_ATTRS,
    clear_tracebacks,
    has_traceback,
    pop_entry,
    reset_cache_name,
)
from keras_nbguard.models.records import WRAP_AT_SPACES
from keras_nbguard.models.stale_nodes import (
    cut_stale,
    held_through_nodes,
    node_link,
    plan,
    untracked,
)
from keras_nbguard.prepare.before_run import clear_every_keras
from keras_nbguard.records.run import CleanReport

SAID_RELEASED = 3  # what was unbound or replaced, named in one line


def _of_ipython(words: str) -> bool:
    """Whether a release's words (``del kept``, ``___ = ''``) are of IPython's caches."""
    target = words.removeprefix("del ").lstrip()
    return target.startswith(("_", "Out[", "sys.", "the last", "get_ipython()"))


@dataclass(frozen=True)
class FreeReport:
    """What ``free()`` did. Pure data: no references to models."""

    freed: tuple[Leak, ...] = ()  # models that are gone (as they were before freeing)
    kept: tuple[Leak, ...] = ()  # chosen models still alive, with what still holds them now
    released: tuple[str, ...] = ()  # what was unbound, purged or replaced, in the user's terms
    skipped_current: int = 0  # current models left alone (without include_current)
    rss_before: int | None = None
    rss_after: int | None = None
    cleared_session: bool = False
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    deep_clean: CleanReport | None = None  # the deep clean run right after, for what was freed

    @property
    def rss_freed(self) -> int | None:
        if self.rss_before is None or self.rss_after is None:
            return None
        return self.rss_before - self.rss_after

    def summary(self) -> str:
        """One line (what a Session action returns)."""
        from keras_nbguard.records.formatting import fmt_bytes

        return f"{self.counts()}; RSS {fmt_bytes(self.rss_before)} → {fmt_bytes(self.rss_after)}"

    def counts(self) -> str:
        """How many were freed and kept, in words (the dashboard adds the RSS itself). With
        none freed, the RSS drop beside it is the collection's and the clear's, not a model's:
        "freed 0 model(s) (RSS 934.2 MiB → 904.1 MiB)" read as if the button had freed them."""
        return self._counted(said=False)

    def briefly(self) -> str:
        """``counts()`` and what was unbound or replaced, for one line under a button: "freed 1
        model(s)" left the user to find `kept` gone by its NameError."""
        return self._counted(said=True)

    def _counted(self, said: bool) -> str:
        kept = f", {len(self.kept)} still held" if self.kept else ""
        # garbage awaiting a collection (no path held it) went with the collection, not with
        # what was unbound: "freed 2 model(s)" beside one flagged model
        yours = sum(1 for leak in self.freed if leak.paths)
        garbage = len(self.freed) - yours
        took = f", and the collection took {garbage} more that nothing held" if garbage else ""
        if yours:
            what = f" ({self._released_words()})" if said and self.released else ""
            return f"freed {yours} model(s){what}{took}{kept}"
        if garbage:
            return f"no model of yours freed{took}{kept}"
        none = "no model freed" + (kept or " (none flagged)")
        return f"{none}; any RSS drop is memory the collection and the clear gave back"

    def _released_words(self) -> str:
        # your names and slots before IPython's caches ("keep[0] = None, ___ = '', del _2")
        said = sorted(self.released, key=_of_ipython)
        more = " …" if len(said) > SAID_RELEASED else ""
        return ", ".join(said[:SAID_RELEASED]) + more

    def lines(self) -> list[str]:
        from keras_nbguard.records.formatting import fmt_clean

        out = [self.summary()]
        out.extend(f"  released {what}" for what in self.released)
        if self.deep_clean is not None:
            out.append(f"  deep clean: {fmt_clean(self.deep_clean)}")
        for leak in self.kept:
            where = ", ".join(leak.paths) or leak.reason
            out.append(f"  still alive: {leak.model_name} ({leak.class_name}) held by {where}")
        if any(leak.paths for leak in self.kept):
            out.append(
                "  (your containers are left alone: free(containers=True) / "
                "%nbguard free --containers replaces those slots with None)"
            )
        if self.skipped_current:
            out.append(
                f"  {self.skipped_current} current model(s) kept (free(include_current="
                f"True) / %nbguard free --all frees them too)"
            )
        out.extend(f"  note: {n}" for n in self.notes)
        return out

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("\n".join(self.lines()))

    def _repr_html_(self) -> str:
        import html

        return (
            f"<pre class='keras-nbguard-free'{WRAP_AT_SPACES}>"
            + html.escape("\n".join(self.lines()))
            + "</pre>"
        )


def free(
    target: Any = None,
    registry: ModelRegistry | None = None,
    *,
    include_current: bool = False,
    containers: bool = False,
    clear_session: bool = True,
    deep_clean: Callable[[], CleanReport] | None = None,
    rss: Callable[[], int] | None = None,
) -> FreeReport:
    """Free stale Keras models (and current ones with ``include_current``).

    ``target``: the IPython shell (default: the running one) or a plain namespace dict.
    ``containers``: also replace the slots of user containers that hold a chosen model.
    ``clear_session``: run ``keras.utils.clear_session()`` after unbinding (dtype policy kept).
    ``deep_clean``: run after that (``DeepClean.clean``), so that what the freed models' runs
    left in TensorFlow goes now and the RSS after shows it.
    """
    t0 = time.perf_counter()
    shell, user_ns = _resolve(target)
    read_rss = rss or _default_rss()
    rss_before = _try(read_rss)
    probe = Probe(user_ns, registry, shell=shell).run()
    try:
        pairs = leaks_of(probe, registry)
        chosen = [(m, leak) for m, leak in pairs if leak.stale or include_current]
        skipped = len(pairs) - len(chosen)
        released = _release(probe, [m for m, _ in chosen], shell, user_ns, containers)
        refs = [(weakref.ref(m), leak) for m, leak in chosen]
    finally:
        probe.close()
    del probe, pairs, chosen  # our own references must not keep anything alive
    notes: list[str] = []
    gc.collect()
    if _any_alive(refs) and has_traceback(shell):
        # a traceback the walk did not connect (too deep, or the time limit) may still hold one
        released.extend(clear_tracebacks(shell))
        gc.collect()
    if registry is not None and _cut_nodes(
        refs, registry, shell, user_ns, include_current, released, notes
    ):
        gc.collect()  # what the nodes held: a run's graph, a model called in it
    cleared = clear_session and _clear_session(notes)
    gc.collect()
    clean = deep_clean() if deep_clean is not None else None
    alive = {id(m) for m in (ref() for ref, _ in refs) if m is not None}
    kept = _still_held(alive, user_ns, registry, shell)
    freed = tuple(leak for ref, leak in refs if ref() is None)
    return FreeReport(
        freed,
        kept,
        tuple(dict.fromkeys(released)),
        skipped,
        rss_before,
        _try(read_rss),
        cleared,
        time.perf_counter() - t0,
        tuple(notes),
        clean,
    )


# -- what to release ----------------------------------------------------------------------------
def _release(
    probe: Probe, models: list[Any], shell: Any, user_ns: Any, containers: bool
) -> list[str]:
    done: dict[str, None] = {}  # ordered set of what we did
    tracebacks = False
    for model in models:
        for chain in probe.chains.get(id(model), ()):
            if node_link(chain) is not None:
                continue  # through a layer's node list: Keras' record, cut after (_cut_nodes)
            if chain.via is not None:
                if containers:
                    _empty_slot(chain, done)
                continue
            kind = chain.root.kind
            if kind in ("traceback", "sys") and (
                kind == "traceback" or str(chain.first_key) in TRACEBACK_ATTRS
            ):
                tracebacks = True
            elif kind == "ns":
                _release_name(chain, model, shell, user_ns, containers, done)
            elif kind in ("out", "hidden"):
                text = f"{chain.root.prefix}[{chain.first_key!r}]"
                pop_entry(chain.objs[0], chain.first_key, text, done)
            elif kind == "displayhook":
                reset_cache_name(shell, user_ns, str(chain.first_key), done)
            elif kind == "exec" and chain.first_key in ("result", "error_in_exec"):
                setattr(chain.objs[0], chain.first_key, None)
                done[f"{chain.root.prefix}.{chain.first_key} = None"] = None
            elif containers and chain.user:
                _empty_slot(chain, done)
    if tracebacks:
        done.update(dict.fromkeys(clear_tracebacks(shell)))
    return list(done)


def _release_name(
    chain: Chain, model: Any, shell: Any, user_ns: Any, containers: bool, done: dict[str, None]
) -> None:
    name = chain.first_key
    if not isinstance(name, str):
        return
    if name in CACHE_NAMES:  # IPython's last outputs: reset like %reset out does
        reset_cache_name(shell, user_ns, name, done)
    elif not chain.user:  # _7, and other names IPython owns: an output-cache entry
        pop_entry(user_ns, name, f"{name}", done)
        hidden = getattr(shell, "user_ns_hidden", None)
        if isinstance(hidden, dict):
            hidden.pop(name, None)
    elif len(chain.edges) == 1:
        if user_ns.get(name) is model:
            del user_ns[name]
            done[f"del {name}"] = None
    elif containers:
        _empty_slot(chain, done)


def _cut_nodes(
    refs: list[tuple[weakref.ref[Any], Leak]],
    registry: ModelRegistry,
    shell: Any,
    user_ns: Any,
    latest: bool,
    released: list[str],
    notes: list[str],
) -> bool:
    """Cut the nodes earlier runs made out of the layers that outlive them (stale_nodes.py): a
    chosen model still alive only through such a node goes with it; a model that stays (yours,
    or one still held otherwise) keeps its nodes. Whether anything was cut."""
    try:
        alive = {id(m) for m in (ref() for ref, _ in refs) if m is not None}
        models: list[Any] = registry.live()
        through: dict[int, set[int]] = {}
        outside: list[Any] = []  # nodes no run made, holding models built without the magic
        if alive:
            probe = Probe(user_ns, registry, shell=shell).run()
            try:
                models += probe.models
                through = held_through_nodes(probe, alive)
                found = untracked(probe, registry)
                outside = [n for i, nodes in found.items() if i in alive for n in nodes]
            finally:
                probe.close()
        nodes, _ = plan(registry, None, user_ns, models, set(through), through, latest, outside)
        del models
        done = cut_stale(nodes, user_ns)
    except Exception as exc:  # freeing went through; only the nodes stayed
        notes.append(f"Keras' node lists were not cleaned: {type(exc).__name__}: {exc}")
        return False
    if done is None:
        return False
    released.append(f"cut {done.text()}")
    return True


def _any_alive(refs: list[tuple[weakref.ref[Any], Leak]]) -> bool:
    return any(ref() is not None for ref, _ in refs)


def _empty_slot(chain: Chain, done: dict[str, None]) -> None:
    """Replace the slot that holds the model in the user's container by None."""
    if len(chain.objs) < 2 or not chain.edges:
        return
    holder, edge, path = chain.objs[-2], chain.edges[-1], chain.text()
    try:
        if edge.kind == "item" and isinstance(holder, (dict, list)):
            holder[edge.key] = None
        elif (
            edge.kind == "item"
            and isinstance(holder, tuple)
            and len(chain.objs) >= 3
            and (chain.edges[-2].key == "__defaults__")
        ):
            func = chain.objs[-3]
            values = list(func.__defaults__)
            values[edge.key] = None
            func.__defaults__ = tuple(values)
        elif edge.kind == "attr":
            setattr(holder, edge.key, None)
        elif edge.kind == "set" and isinstance(holder, set):
            holder.discard(chain.objs[-1])
            done[f"{path[:-3]}.discard(<{type(chain.objs[-1]).__name__}>)"] = None
            return
        elif edge.kind == "cell":
            holder.cell_contents = None
        else:
            return  # a tuple, a frame, an unnamed link: reported as still holding it
    except Exception:
        return
    done[f"{path} = None"] = None


# -- after ---------------------------------------------------------------------------------------
def _clear_session(notes: list[str]) -> bool:
    """clear_session() of each Keras imported, keeping the global dtype policy."""
    try:
        cleared, problems = clear_every_keras()
        notes.extend(problems)
        return cleared
    except Exception as exc:  # freeing went through; only the session clear failed
        notes.append(f"clear_session failed: {type(exc).__name__}: {exc}")
        return False


def _still_held(
    alive: set[int], user_ns: Any, registry: ModelRegistry | None, shell: Any
) -> tuple[Leak, ...]:
    if not alive:
        return ()
    probe = Probe(user_ns, registry, shell=shell).run()
    try:
        return tuple(leak for m, leak in leaks_of(probe, registry) if id(m) in alive)
    finally:
        probe.close()


def _resolve(target: Any) -> tuple[Any, Any]:
    if target is None:
        target = current_shell()
        if target is None:
            raise RuntimeError("keras_nbguard.free(): no IPython shell; pass a namespace dict")
    if isinstance(target, Mapping):
        return None, target
    return target, target.user_ns


def _default_rss() -> Callable[[], int]:
    from keras_nbguard.collectors.process import default_rss_reader

    return default_rss_reader()


def _try(read: Callable[[], int]) -> int | None:
    try:
        return read()
    except Exception:
        return None
