"""Who hears what: blinker is the registry, and a cache answers ``emit``'s question.

Each bus keeps one private :class:`blinker.Signal` per evtrain signal; every subscription is a
blinker connection on it (strong reference; ``sender`` is the behavior).  ``emit`` never calls
blinker's ``send`` — that would run receivers synchronously, in undefined order, letting their
exceptions escape — but asks :class:`Routes` for the targets of ``(signal, sender)``: a dict
lookup once cached, rebuilt after any connect or disconnect.  The targets are the inboxes of
subscribers with their own queue (spool, a drop policy, ``latest``, ``capacity_bytes``) and at
most one :class:`~evtrain.bus.ledger.Route`, which logs the event once for every subscriber
that reads the bus's shared log (:mod:`evtrain.bus.ledger`).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import blinker

from evtrain.bus.ledger import Ledger, Route
from evtrain.bus.log_inbox import LogInbox
from evtrain.bus.spool import AnyInbox
from evtrain.bus.subscription import Subscription
from evtrain.events.signals import EventSignal

ANY = blinker.ANY
"""Connect to every sender (behavior)."""

RouteKey = tuple[EventSignal[Any], Hashable]
"""``(signal, sender)``."""

Target = AnyInbox | Route
"""What ``emit`` puts an event into."""

MAX_CACHED = 4096
"""Senders are behavior names, so the cache stays small; it is bounded anyway."""


class Routes:
    """The registry of subscriptions and the route cache in front of it."""

    def __init__(self) -> None:
        self._registry: dict[EventSignal[Any], blinker.Signal] = {}
        self._lock = threading.Lock()
        self.ledger = Ledger()
        """The shared log of this bus's :class:`~evtrain.bus.ledger.LogInbox` subscribers."""
        self.cache: dict[RouteKey, tuple[Target, ...]] = {}
        """``(signal, sender)`` → targets.  Read without a lock by ``Bus.emit``; only ever
        cleared, never replaced, so the bus may hold it directly."""

    def add(self, sub: Subscription) -> None:
        """Route ``sub``'s signals from its sender to its inbox."""
        with self._lock:
            if isinstance(sub.inbox, LogInbox):
                self.ledger.attach(sub.inbox)
            for signal in sub.signals:
                self._blinker(signal).connect(sub, sender=sub.sender, weak=False)
            self.cache.clear()

    def remove(self, sub: Subscription) -> None:
        """Route nothing more to ``sub``."""
        with self._lock:
            for signal in sub.signals:
                self._blinker(signal).disconnect(sub, sender=sub.sender)
            self.cache.clear()
            if isinstance(sub.inbox, LogInbox):
                sub.inbox.unrouted = True

    def lookup(self, signal: EventSignal[Any], sender: Any) -> tuple[Target, ...]:
        """What an event of ``signal`` from ``sender`` goes to (and cache it): the inboxes of
        its subscribers with a queue of their own, then one route for those reading the log."""
        key = (signal, sender)
        targets = self.cache.get(key)
        if targets is not None:
            return targets
        with self._lock:
            registry = self._registry.get(signal)
            subs = () if registry is None else registry.receivers_for(sender)
            inboxes = [sub.inbox for sub in subs if isinstance(sub, Subscription)]
            readers = frozenset(i for i in inboxes if isinstance(i, LogInbox))
            targets = tuple(i for i in inboxes if not isinstance(i, LogInbox))
            if readers:
                targets += (Route(self.ledger, readers),)
            if len(self.cache) >= MAX_CACHED:
                self.cache.clear()
            self.cache[key] = targets
            return targets

    def _blinker(self, signal: EventSignal[Any]) -> blinker.Signal:
        registry = self._registry.get(signal)
        if registry is None:
            registry = self._registry[signal] = blinker.Signal(signal.__doc__)
        return registry
