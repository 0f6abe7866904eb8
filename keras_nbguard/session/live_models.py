"""The kernel's live Keras models as the Session knows them: which run made each (the probes
registry, loaded with the first run that hands models over, to keep ``%load_ext`` cheap), the
release of earlier runs' models held only by caches, the leak finder and ``free()``."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keras_nbguard.models import LeakReport, ModelRegistry
    from keras_nbguard.models.freeing import FreeReport
    from keras_nbguard.records.run import HeldModels, RunRecord
    from keras_nbguard.run.tracking import Run


class LiveModels:
    def __init__(self, shell: Any, warn: Callable[[str], object]) -> None:
        self.shell = shell  # the IPython shell, or None: then ``__main__`` is the namespace
        self._warn = warn
        self._registry: ModelRegistry | None = None
        self._cuts: list[Any] = []  # models released if the next collection frees them
        self._going: list[weakref.ref[Any]] = []  # released, or met by no walk: garbage

    @property
    def tracked(self) -> bool:
        """Whether a run has handed over models yet (without loading the leak finder)."""
        return self._registry is not None

    @property
    def registry(self) -> ModelRegistry:
        """Which run created each model, by weak reference."""
        if self._registry is None:
            from keras_nbguard.models import ModelRegistry

            self._registry = ModelRegistry()
        return self._registry

    def run_ended(self, run: Run, record: RunRecord) -> RunRecord:
        """Note the run's models; return its record with the earlier models released after it
        and those still held.

        After the run, not only before the next: a cell that rebinds ``model`` leaves the last
        model in ``Out[n]`` only now, and the summary should say what is really still alive.
        Their graphs go with the next run's clear and deep clean."""
        from keras_nbguard.models.autorelease import cuts_note, merged

        try:
            models = [
                m
                for m in (r() if isinstance(r, weakref.ref) else r for r in run.models)
                if m is not None
            ]
            nodes = getattr(getattr(run, "creations", None), "nodes", ())
            if not models and not nodes and run.released is None and not self._label_has(run):
                return record  # no model now or before, no layer built: nothing to note
            ids = {id(m) for m in models}
            names = {
                id(v): k
                for k, v in list(self._user_ns().items())
                if id(v) in ids and not k.startswith("_")
            }
            watch = getattr(run, "creations", None)  # (None: every model it fit, it made)
            built = None if watch is None or not getattr(watch, "watched", False) else watch.models
            self.registry.note_run(
                run.label, run.run_number, models, run.id, nodes, names, built=built
            )
            del models
        except Exception as exc:
            self._warn(f"models of the run were not attributed: {exc}")
        try:
            settled = self.settle(
                run.label,
                release=not run.options.keep_stale,
                exclude=self.registry.latest.get(run.label),
            )
            # the models whose callbacks' links it cut are said now, as the walked ones are (a
            # run reports what it let go of; a GAN's summary named a model two runs back): the
            # next run's collection frees them, and one it does not free gets its links back
            # and the walk, which names what holds it
            cut = cuts_note(settled.cuts)
            for each in settled.cuts:
                each.said = True
            released = merged(merged(run.released, settled.released_note()), cut)
            return record.replaced(released_models=released, stale_models=settled.stale_note())
        except Exception as exc:
            self._warn(f"earlier runs' models were not looked at: {type(exc).__name__}: {exc}")
            return record

    def _label_has(self, run: Run) -> bool:
        """Whether a model of ``run``'s label is alive (without loading the leak finder)."""
        return self._registry is not None and bool(self._registry.of_label(run.label))

    def settle(self, label: str, *, release: bool, exclude: Any = None, report: bool = True) -> Any:
        """Release ``label``'s earlier models held only by caches and Keras' bookkeeping; list
        the rest (``autorelease.settle``). The models whose callbacks' links it cut are released
        once a collection frees them: ``collected()`` says which."""
        from keras_nbguard.models.autorelease import settle

        settled = settle(
            self.registry,
            label,
            self.shell,
            self._user_ns(),
            release=release,
            exclude=exclude,
            report=report,
        )
        self._cuts += settled.cuts
        self._going += settled.going
        return settled

    def models_going(self) -> frozenset[int]:
        """Ids of the models the next collection is expected to free: those whose callbacks'
        links were cut (tentative.py), those released, and those no walk from your names met (a
        model the cell rebound)."""
        refs = [*(c.model for c in self._cuts), *self._going]
        return frozenset(id(m) for m in (ref() for ref in refs) if m is not None)

    def collected(self) -> HeldModels | None:
        """After a collection: the cut models it freed; the others get their links back."""
        if not self._cuts:
            self._going = []
            return None
        from keras_nbguard.models.autorelease import went

        cuts, self._cuts, self._going = self._cuts, [], []
        return went(cuts, self.registry)

    def leaks(self, *, collect: bool = False) -> LeakReport:
        """Every live Keras model, with the paths that hold it; stale ones flagged (after a
        garbage collection with ``collect``)."""
        from keras_nbguard.models import find_leaks

        return find_leaks(self._user_ns(), self.registry, shell=self.shell, collect=collect)

    def free(
        self, *, include_current: bool, containers: bool, deep_clean: Callable[[], Any] | None
    ) -> FreeReport:
        from keras_nbguard.models.freeing import free as free_models

        namespace = self.shell if self.shell is not None else sys.modules["__main__"].__dict__
        return free_models(
            namespace,
            self.registry,
            include_current=include_current,
            containers=containers,
            deep_clean=deep_clean,
        )

    def namespace(self) -> Any:
        return self._user_ns()

    def _user_ns(self) -> Any:
        return self.shell.user_ns if self.shell is not None else sys.modules["__main__"].__dict__
