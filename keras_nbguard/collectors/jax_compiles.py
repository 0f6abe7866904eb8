"""Counts JAX's XLA compilations during a run, the JAX backend's counterpart of tf.function
traces: a new model, a recompile or a new input shape compiles again; a stable one doesn't.

Listens to ``jax.monitoring``'s public duration events (once JAX is imported) and stops listening
at the end of the run. JAX's compilation cache may serve a compile from disk: the event is still
sent, since the function was lowered again.
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

from keras_nbguard.collectors.imports import ImportWatch, when_imported

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class JaxCompileCounter:
    """The same figures as ``TraceCounter``: ``count``, ``names``; no tf.data here."""

    kind = "XLA compilations"
    warn = True  # a reason here means JAX changed: worth one warning

    def __init__(self) -> None:
        self.count: int | None = 0
        self.dataset_count: int | None = None
        self.names: Counter[str] = Counter()
        self.reason: str | None = None
        self._watch: ImportWatch | None = None
        self._monitoring: Any = None

    def install(self) -> None:
        self._watch = when_imported("jax", self._listen)

    def _listen(self, jax: ModuleType) -> None:
        monitoring = getattr(jax, "monitoring", None)
        register = getattr(monitoring, "register_event_duration_secs_listener", None)
        if register is None or not hasattr(monitoring, "unregister_event_duration_listener"):
            self.count = None
            self.reason = "this JAX version has no compile events we know"
            return
        register(self._on_event)
        self._monitoring = monitoring

    def _on_event(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == COMPILE_EVENT and self.count is not None:
            self.count += 1
            self.names[str(kwargs.get("fun_name") or "<unnamed>")] += 1

    def uninstall(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._monitoring is not None:
            self._monitoring.unregister_event_duration_listener(self._on_event)
            self._monitoring = None


class NoTraces:
    """A backend with nothing to count: the figure is n/a, with the reason in the summary."""

    kind = ""
    warn = False  # not a failure: nothing is traced on this backend
    dataset_count: int | None = None

    def __init__(self, reason: str) -> None:
        self.count: int | None = None
        self.reason: str | None = reason
        self.names: Counter[str] = Counter()

    def install(self) -> None:
        pass

    def uninstall(self) -> None:
        pass
