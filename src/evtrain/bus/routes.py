"""Who hears what: blinker is the registry, and a cache answers ``emit``'s question.

Each bus keeps one private :class:`blinker.Signal` per evtrain signal; every subscription is a
blinker connection on it (strong reference; ``sender`` is the behavior).  ``emit`` never calls
blinker's ``send`` — that would run receivers synchronously, in undefined order, letting their
exceptions escape — but asks :class:`Routes` for the inboxes of ``(signal, sender)``: a dict
lookup once cached, rebuilt after any connect or disconnect.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import blinker

from evtrain.bus.spool import AnyInbox
from evtrain.bus.subscription import Subscription
from evtrain.events.signals import EventSignal

ANY = blinker.ANY
"""Connect to every sender (behavior)."""

RouteKey = tuple[EventSignal[Any], Hashable]
"""``(signal, sender)``."""

MAX_CACHED = 4096
"""Senders are behavior names, so the cache stays small; it is bounded anyway."""


class Routes:
    """The registry of subscriptions and the route cache in front of it."""

    def __init__(self) -> None:
        self._registry: dict[EventSignal[Any], blinker.Signal] = {}
        self._lock = threading.Lock()
        self.cache: dict[RouteKey, tuple[AnyInbox, ...]] = {}
        """``(signal, sender)`` → inboxes.  Read without a lock by ``Bus.emit``; only ever
        cleared, never replaced, so the bus may hold it directly."""

    def add(self, sub: Subscription) -> None:
        """Route ``sub``'s signals from its sender to its inbox."""
        with self._lock:
            for signal in sub.signals:
                self._blinker(signal).connect(sub, sender=sub.sender, weak=False)
            self.cache.clear()

    def remove(self, sub: Subscription) -> None:
        """Route nothing more to ``sub``."""
        with self._lock:
            for signal in sub.signals:
                self._blinker(signal).disconnect(sub, sender=sub.sender)
            self.cache.clear()

    def lookup(self, signal: EventSignal[Any], sender: Any) -> tuple[AnyInbox, ...]:
        """The inboxes an event of ``signal`` from ``sender`` goes to (and cache them)."""
        key = (signal, sender)
        inboxes = self.cache.get(key)
        if inboxes is not None:
            return inboxes
        with self._lock:
            registry = self._registry.get(signal)
            subs = () if registry is None else registry.receivers_for(sender)
            inboxes = tuple(sub.inbox for sub in subs if isinstance(sub, Subscription))
            if len(self.cache) >= MAX_CACHED:
                self.cache.clear()
            self.cache[key] = inboxes
            return inboxes

    def _blinker(self, signal: EventSignal[Any]) -> blinker.Signal:
        registry = self._registry.get(signal)
        if registry is None:
            registry = self._registry[signal] = blinker.Signal(signal.__doc__)
        return registry
