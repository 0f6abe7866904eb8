"""Deep clean: reclaim the memory that ``clear_session`` leaves behind, run after run.

Every traced train step registers ``@custom_gradient`` functions (tf.distribute's all-reduce: two
per ``fit``) in TensorFlow's global gradient registry, ``ops._gradient_registry``, under
``CustomGradient-<uid>``. Nothing ever removes them, and each entry's closure holds symbolic tensors
of its train graph: every dead model's FuncGraphs, their eager-context functions and thousands of
Python objects stay reachable for the life of the process (tensorflow issues 80895 and 97697).

We remember which entries each tracked run added and, once none of that run's models is alive,
delete them. Only entries whose gradient function is TensorFlow's or Keras' own code (the
all-reduce above) are ever deleted: a ``@tf.custom_gradient`` of the user's may belong to a
tf.function they still hold, which would fail with a LookupError the first time it is
differentiated (checked). gc then frees the graphs, and TensorFlow's own refcounting
(``AtomicFunction.__del__``) removes their functions from the eager context — we never remove a
context function ourselves, because only TensorFlow knows which live function still calls it.

TensorFlow's private layout is used defensively: if it is not what we expect, deep clean turns
itself off with one warning and the plain ``clear_session`` carries on.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from keras_nbguard import backends
from keras_nbguard.backends import BACKEND_NAMES
from keras_nbguard.collectors.process import RssReader, default_rss_reader
from keras_nbguard.prepare.recompiled import forget_replaced_step_functions
from keras_nbguard.records import notices
from keras_nbguard.records.run import CleanReport

OPS_MODULE = "tensorflow.python.framework.ops"
CONTEXT_MODULE = "tensorflow.python.eager.context"
CUSTOM_GRADIENT_PREFIX = "CustomGradient-"  # custom_gradient.generate_name(); uids never repeat
LIBRARY_PACKAGES = ("tensorflow", "keras", "tf_keras")  # whose custom gradients we may purge

# What run_started() hands back: the CustomGradient names present when the run started, or None
# when TensorFlow was not imported yet (so every entry at the end is the run's).
Mark = frozenset[str] | None


STEP_FUNCTIONS = ("train_function", "test_function", "predict_function")  # what fit traces


@dataclass(frozen=True)
class _RunEntries:
    names: frozenset[str]
    owners: tuple[weakref.ref[Any], ...]
    steps: tuple[weakref.ref[Any], ...] = ()  # the owners' step functions as the run ended

    def dead(self, going: frozenset[int] = frozenset()) -> bool:
        """Whether every model of the run is gone, or in ``going`` (ids of models the collection
        about to run frees: tentative.py), or else every step function they had as the run
        ended: a model that lives on and was compiled again (keras.io's fine-tuning cell,
        ``unfreeze_model(model)`` then ``fit``, re-run: +33 MiB a run of graphs these entries
        held). A run that fit no model has no owner we can watch: its entries stay (a
        tf.function the user still holds may need them later)."""
        if not self.owners:
            return False
        return all(_gone(ref, going) for ref in self.owners) or self.compiled_again(going)

    def compiled_again(self, going: frozenset[int] = frozenset()) -> bool:
        """A model of the run lives on, but the step functions it had as the run ended are
        gone: it was compiled again (and so traces anew at its next fit)."""
        return (
            not all(_gone(ref, going) for ref in self.owners)
            and bool(self.steps)
            and all(ref() is None for ref in self.steps)
        )


def _step_functions(models: Sequence[weakref.ref[Any]]) -> tuple[weakref.ref[Any], ...]:
    """Weak references to the compiled step functions of ``models`` (those they have)."""
    found = []
    for ref in models:
        model = ref()
        for attribute in STEP_FUNCTIONS:
            function = getattr(model, attribute, None) if model is not None else None
            if function is not None:
                with contextlib.suppress(TypeError):  # not weakly referable: not counted
                    found.append(weakref.ref(function))
    return tuple(found)


def _gone(ref: weakref.ref[Any], going: frozenset[int]) -> bool:
    model = ref()
    return model is None or id(model) in going


@dataclass
class Purge:
    """A purge done, before the gc that frees what it let go (``DeepClean.report`` after it)."""

    start: float
    rss_before: int | None
    reason: str | None = None  # why nothing could be purged: deep clean unavailable here
    entries: int = 0
    runs: int = 0
    functions_before: set[str] | None = None


class _Unavailable(Exception):
    """TensorFlow's private layout is not the one deep clean knows."""


class DeepClean:
    """One per Session: attributes gradient-registry entries to runs, purges those of dead runs.

    ``run_started`` / ``run_ended`` bracket a tracked run; ``clean`` runs before a later one, right
    after ``clear_session`` and gc. None of them raises: a problem disables deep clean with one
    warning (``available`` False, ``reason`` says why).
    """

    def __init__(
        self,
        *,
        rss: RssReader | None = None,
        warn: Callable[[str], object] | None = None,
        trim: bool = True,
    ) -> None:
        self.available = True
        self.reason: str | None = None
        self.protected = 0  # entries our runs added with a gradient of the user's: never purged
        self.trim = trim
        self._rss = rss or default_rss_reader()
        self._warn = warn or _warn
        self._runs: list[_RunEntries] = []
        self._fitted: list[weakref.ref[Any]] = []  # every run's models, for recompiled.py
        self._names_cache: tuple[int, frozenset[str]] | None = None  # (registry size, names)
        # Entries that exist now were not made by our runs: never ours to purge.
        self._baseline: frozenset[str] = self._guarded(self._custom_names, None) or frozenset()

    @property
    def held(self) -> int:
        """Entries remembered for earlier runs, not purged yet."""
        return sum(len(run.names) for run in self._runs)

    # -- the run lifecycle -----------------------------------------------------------------------
    def run_started(self) -> Mark:
        """The mark to hand to ``run_ended``: which entries exist as the run starts (cheap)."""
        return self._guarded(self._custom_names, None)

    def run_ended(self, mark: Mark, models: Sequence[weakref.ref[Any]]) -> None:
        """Attribute the entries added since ``mark`` to this run, owned by ``models`` (weakly)."""

        def attribute() -> None:
            known = {id(ref()) for ref in self._fitted}
            self._fitted += [ref for ref in models if ref() is not None and id(ref()) not in known]
            names = self._custom_names()
            if names is None:
                return
            added = names - (mark or frozenset()) - self._baseline
            if not added:  # the common re-run that traced nothing new
                return
            ours = self._library_entries(added)
            self.protected += len(added) - len(ours)
            if ours:
                self._runs.append(_RunEntries(ours, tuple(models), _step_functions(models)))

        self._guarded(attribute, None)

    def clean(self) -> CleanReport:
        """Purge the entries of every earlier run whose models are all gone, then gc (for free()
        and the buttons; a run purges, collects once for all it let go, then reports)."""
        purge = self.purge()
        if purge.entries:
            gc.collect()  # the purged closures sit in reference cycles with their graphs
            self.trim_heap()
        return self.report(purge)

    def purge(self, going: frozenset[int] = frozenset()) -> Purge:
        """The purge alone: what the next gc can free. ``report`` then says what it did.
        ``going``: ids of models that gc is to free, whose runs' entries go with them (a model
        that outlives it keeps its traced functions, which no longer need these entries)."""
        purge = Purge(start=time.perf_counter(), rss_before=self._read_rss())
        if not self.available:
            purge.reason = self.reason
            return purge
        backend = backends.current_backend()
        if backend != "tensorflow":  # what it purges is TensorFlow's alone
            purge.reason = f"{BACKEND_NAMES.get(backend, backend)} backend"
            return purge
        try:
            registry = self._registry()
            if registry is None:
                purge.reason = "TensorFlow is not imported"
                return purge
            self._forget_replaced_step_functions()  # before the runs are judged: they may go
            if not any(run.dead(going) for run in self._runs):  # the usual case: nothing to purge
                return purge  # and nothing released by us: no census of the eager functions
            purge.functions_before = _function_names()
            purge.entries, purge.runs = self._purge(registry, going)
        except Exception as exc:
            self._disable(exc)
            purge.reason = self.reason
        return purge

    def report(self, purge: Purge) -> CleanReport:
        """What ``purge`` did, read after the gc that followed it."""
        figures: dict[str, Any] = {}
        if purge.reason is None:
            released = None
            after = _function_names() if purge.functions_before is not None else None
            if purge.functions_before is not None and after is not None:
                released = len(purge.functions_before - after)
            figures = {
                "entries": purge.entries,
                "runs": purge.runs,
                "kept": self.held,
                "functions": released if purge.entries or released else 0,
            }
        return CleanReport(
            available=purge.reason is None and self.available,
            reason=purge.reason if purge.reason is not None else self.reason,
            rss_before=purge.rss_before,
            rss_after=self._read_rss(),
            seconds=time.perf_counter() - purge.start,
            **figures,
        )

    def trim_heap(self) -> None:
        """Give freed heap pages back to the OS, so RSS shows what a clean freed (if on)."""
        if self.trim:  # (ctypes: imported at the first run, not at load)
            from keras_nbguard.collectors.allocated import give_back_free_pages

            give_back_free_pages()

    # -- internals -------------------------------------------------------------------------------
    def _purge(self, registry: dict[str, Any], going: frozenset[int]) -> tuple[int, int]:
        entries = runs = 0
        alive: list[_RunEntries] = []
        recompiled = False
        for run in self._runs:
            if not run.dead(going):
                alive.append(run)
                continue
            runs += 1
            recompiled = recompiled or run.compiled_again(going)
            for name in run.names:
                if registry.pop(name, None) is not None:
                    entries += 1
        self._runs = alive
        if entries:  # the registry shrank: its size no longer stands for its names
            self._names_cache = None
        if recompiled:
            # the eager kernels its dropped functions made stay cached (+0.7 MiB a run on
            # keras.io's fine-tuning cell, the heap's growth that was left); the model traces
            # anew at its next fit all the same, so emptying the cache costs it nothing
            clear_kernel_cache(even_inside_a_clear=True)
        return entries, runs

    def _forget_replaced_step_functions(self) -> None:
        """Keras 2's models compiled again since their last fit let go of the step functions
        (and graphs) of that fit (recompiled.py); the dead models are forgotten."""
        self._fitted = [ref for ref in self._fitted if ref() is not None]
        for ref in self._fitted:
            model = ref()
            if model is not None:
                forget_replaced_step_functions(model)

    def _library_entries(self, names: frozenset[str]) -> frozenset[str]:
        """The entries among ``names`` whose gradient function is TensorFlow's or Keras' own."""
        registry = self._registry() or {}
        libraries = _library_dirs()
        return frozenset(
            name
            for name in names
            if name in registry and _gradient_origin(registry[name]).startswith(libraries)
        )

    def _custom_names(self) -> frozenset[str] | None:
        registry = self._registry()
        if registry is None:
            return None
        # The registry only ever grows between our purges, so an unchanged size means unchanged
        # names: a run without new traces (the common re-run) skips the ~1,000-entry scan.
        cached = self._names_cache
        if cached is not None and cached[0] == len(registry):
            return cached[1]
        names = frozenset(
            name
            for name in registry
            if isinstance(name, str) and name.startswith(CUSTOM_GRADIENT_PREFIX)
        )
        self._names_cache = (len(registry), names)
        return names

    def _registry(self) -> dict[str, Any] | None:
        """The gradient registry's dict; None when TensorFlow is not imported (nothing to do)."""
        ops = sys.modules.get(OPS_MODULE)
        if ops is None:
            return None
        registry = getattr(ops, "_gradient_registry", None)
        if registry is None:
            raise _Unavailable(f"{OPS_MODULE} has no _gradient_registry")
        entries = getattr(registry, "_registry", None)
        if not isinstance(entries, dict):
            raise _Unavailable(
                f"the gradient registry ({type(registry).__name__}) keeps its "
                f"entries in {type(entries).__name__}, not a dict"
            )
        return entries

    def _guarded(self, step: Callable[[], Any], default: Any) -> Any:
        if not self.available:
            return default
        try:
            return step()
        except Exception as exc:
            self._disable(exc)
            return default

    def _disable(self, exc: Exception) -> None:
        """Turn deep clean off for good, with one warning: a half-known layout is not safe."""
        if not self.available:
            return
        self.available = False
        self.reason = str(exc) if isinstance(exc, _Unavailable) else f"{type(exc).__name__}: {exc}"
        self._runs = []
        self._warn(f"deep clean unavailable: {self.reason}; runs get a plain clear_session")

    def _read_rss(self) -> int | None:
        try:
            return self._rss()
        except Exception:
            return None


def _gradient_origin(entry: Any) -> str:
    """The file that defined a custom_gradient entry's ``grad_fn``; "" when it is no function.

    The layout (TF 2.16-2.21): the entry is ``{"type": internal_grad_fn, ...}``, whose closure holds
    ``tape_grad_fn``, whose closure holds the ``grad_fn`` that ``f`` returned.
    """
    internal = entry.get("type") if isinstance(entry, dict) else None
    grad_fn = _free_variable(_free_variable(internal, "tape_grad_fn"), "grad_fn")
    code = getattr(inspect.unwrap(grad_fn), "__code__", None)  # a partial or object: unknown
    return getattr(code, "co_filename", "") or ""


def _free_variable(function: Any, name: str) -> Any:
    code = getattr(function, "__code__", None)
    closure = getattr(function, "__closure__", None)
    if code is None or closure is None or name not in code.co_freevars:
        raise _Unavailable(f"a custom_gradient registry entry has no {name!r} in its closure")
    return closure[code.co_freevars.index(name)].cell_contents


def _library_dirs() -> tuple[str, ...]:
    """The package directories of the imported TensorFlow and Keras."""
    dirs = []
    for name in LIBRARY_PACKAGES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(dirs)


def _function_names() -> set[str] | None:
    """Names of the eager context's functions; None when it can't be read without side effects.

    An eager context that is not initialized yet is left so: initializing it would claim the GPU
    before the user could configure it.
    """
    module = sys.modules.get(CONTEXT_MODULE)
    context_safe = getattr(module, "context_safe", None)
    try:
        ctx = context_safe() if context_safe is not None else None
        if ctx is None or getattr(ctx, "_context_handle", None) is None:
            return None
        names: Iterable[Any] = ctx.list_function_names()
        return set(names)
    except Exception:
        return None


def clear_kernel_cache(even_inside_a_clear: bool = False) -> None:
    """Empty TensorFlow's eager kernel cache, as Keras' ``clear_session`` does. A loaded model
    makes a variable-handle kernel per variable (each has a name of its own), cached for good:
    loading the text example's two models again and again kept +0.48 MiB a load, +0.005 with
    the cache emptied after each (isolation/back.py). Kernels the next ops need are made again
    (microseconds each); nothing happens where TensorFlow's context is not running yet.
    ``even_inside_a_clear``: also inside ``kernel_cache_kept`` (the class's own method)."""
    module = sys.modules.get(CONTEXT_MODULE)
    context_safe = getattr(module, "context_safe", None)
    with contextlib.suppress(Exception):  # a TensorFlow without it: the cache stays
        ctx = context_safe() if context_safe is not None else None
        if ctx is not None and getattr(ctx, "_context_handle", None) is not None:
            if even_inside_a_clear:
                type(ctx).clear_kernel_cache(ctx)
            else:
                ctx.clear_kernel_cache()


@contextlib.contextmanager
def kernel_cache_kept() -> Iterator[None]:
    """Keras' ``clear_session`` inside keeps TensorFlow's eager kernel cache, which it empties.
    Emptying it frees nothing a run leaves (a dead model's functions leave the cache when
    TensorFlow removes them; eager variables share one anonymous handle name): RSS a run over
    runs 4-12 was the same with and without on keras.io's convnet, transfer learning, text
    classification and text generation. But a model kept across runs (built in a setup cell)
    then instantiates its functions anew at its next fit: +200-270 ms a fit for the text
    generation LSTM. Loaded models' named handles are emptied apart (isolation/back.py)."""
    module = sys.modules.get(CONTEXT_MODULE)
    context_safe = getattr(module, "context_safe", None)
    ctx: Any = None
    with contextlib.suppress(Exception):
        ctx = context_safe() if context_safe is not None else None
    kept = False
    if ctx is not None:
        with contextlib.suppress(Exception):  # the instance's attribute hides the method
            ctx.clear_kernel_cache = _keep
            kept = True
    try:
        yield
    finally:
        if kept:
            with contextlib.suppress(Exception):
                del ctx.clear_kernel_cache


def _keep() -> None:
    """Stands for ``Context.clear_kernel_cache`` while ``kernel_cache_kept``."""


def _warn(message: str) -> None:
    notices.warn(message, stacklevel=3)
