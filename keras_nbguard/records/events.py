"""What a Session tells whoever follows it (the dashboard, the store's feed): a run started, an
RSS sample (and the end of a batch of them), an epoch, a record, an action. Subscribers never
reach into a run's collectors, and a failing one is warned about, never raised into the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# "sampled": the samples of one visit of the sampling thread are out (a few a second)
KINDS = ("start", "sample", "sampled", "epoch", "record", "action")


class Events:
    def __init__(self, warn: Callable[[str], object]) -> None:
        self._warn = warn
        self._subscribers: dict[str, list[Callable[..., Any]]] = {kind: [] for kind in KINDS}

    def subscribe(self, kind: str, subscriber: Callable[..., Any]) -> None:
        self._subscribers[kind].append(subscriber)

    def unsubscribe(self, kind: str, subscriber: Callable[..., Any]) -> None:
        while subscriber in self._subscribers[kind]:
            self._subscribers[kind].remove(subscriber)

    def subscribed(self, kind: str, subscriber: Callable[..., Any]) -> bool:
        return subscriber in self._subscribers[kind]

    def emit(self, kind: str, *args: Any) -> None:
        for subscriber in list(self._subscribers[kind]):  # "sample": ~50 a second, keep it lean
            try:
                subscriber(*args)
            except Exception as exc:
                self._warn(f"a {kind} subscriber failed: {type(exc).__name__}: {exc}")
