"""Test helpers shipped with evtrain: a recording subscriber.

``Recorder`` plays the role httpx's ``MockTransport`` plays: connect it to a real bus, run the
code under test, ``bus.flush()``, and assert on exactly what was emitted.
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from evtrain.bus import Bus
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.events.signals import ALL, EventSignal

P = TypeVar("P")


class Recorder:
    """Keeps every payload it receives, in delivery order (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Any] = []
        """Every payload received, in order."""

    def __call__(self, payload: Any) -> None:
        with self._lock:
            self.events.append(payload)

    def of(self, payload_type: type[P]) -> list[P]:
        """The received payloads of one type, in order."""
        with self._lock:
            return [e for e in self.events if isinstance(e, payload_type)]

    def connect(self, bus: Bus, *signals: EventSignal[Any], **options: Any) -> SubscriptionHandle:
        """Connect to ``signals`` (default: every signal) on ``bus``."""
        options.setdefault("name", f"evtrain.testing.Recorder@{id(self):x}")
        return bus.connect(signals or ALL, self, **options)
