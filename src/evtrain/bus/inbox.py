"""A subscriber's bounded inbox: producers append from any thread, one consumer swaps it out.

The producer side is the hot path of ``Bus.emit``: one uncontended lock, one append, no loop
wake-up unless the consumer is in its deep sleep (see :mod:`evtrain.bus.dispatch`).  The consumer
takes everything at once by swapping the container, so a burst of events costs one hand-over.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

import attrs

from evtrain.events.payloads import StatsEvent

Item = tuple[float | None, Any]
"""``(emit time, payload)``; a ``None`` time marks a control :class:`Marker` instead."""


class Overflow(enum.Enum):
    """What ``emit`` does when a subscriber's inbox is full."""

    BLOCK = "block"
    """Wait until the subscriber catches up: nothing is lost (the default)."""
    DROP_OLDEST = "drop_oldest"
    """Discard the oldest queued event to make room; counted as dropped."""
    DROP_NEWEST = "drop_newest"
    """Discard the event being emitted; counted as dropped."""
    LATEST = "latest"
    """Keep only the newest event per key (behavior); a newer ``StatsEvent`` inherits the stat
    keys the replaced one had and it lacks.  Replaced events are counted as dropped."""


@attrs.define(kw_only=True)
class SubscriberSettings:
    """Inbox overrides for one subscriber, keyed by its name on the bus (``bus.subscribers``
    in a run's options)."""

    capacity: int | None = attrs.field(default=None)
    overflow: Overflow | None = None


class Marker:
    """A control item (flush or close) that every inbox passes through in FIFO order."""

    __slots__ = ("_arrived", "_count", "_done", "close")

    def __init__(self, count: int, *, close: bool = False) -> None:
        self.close = close
        """After this marker the subscriber is closed and its task ends."""
        self._count = count
        self._arrived: set[int] = set()
        self._done = threading.Condition()

    def arrive(self, inbox: object) -> None:
        """``inbox`` has handled everything up to and including this marker.  Idempotent per
        inbox, so a consumer that dies mid-batch can release every marker it held."""
        with self._done:
            self._arrived.add(id(inbox))
            if len(self._arrived) >= self._count:
                self._done.notify_all()

    def wait(self, timeout: float | None) -> bool:
        """Block until every inbox arrived; ``False`` on timeout."""
        with self._done:
            return self._done.wait_for(lambda: len(self._arrived) >= self._count, timeout)


def default_key(payload: Any) -> Hashable:
    """Key for :attr:`Overflow.LATEST`: the payload class and its behavior, if it has one."""
    return (type(payload), getattr(payload, "category", None))


def _merge_latest(old: Any, new: Any) -> Any:
    if isinstance(old, StatsEvent) and isinstance(new, StatsEvent):
        missing = {k: v for k, v in old.values.items() if k not in new.values}
        if missing:
            return attrs.evolve(new, values={**missing, **new.values})
    return new


class Inbox:
    """Bounded FIFO of ``(emit time, payload)`` with an :class:`Overflow` policy."""

    __slots__ = (
        "_items",
        "_key",
        "_lock",
        "_not_full",
        "abandoned",
        "accepted",
        "capacity",
        "dropped",
        "high_water",
        "overflow",
        "put",
        "sleeping",
        "waker",
    )

    def __init__(
        self,
        capacity: int,
        overflow: Overflow,
        key: Callable[[Any], Hashable] = default_key,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        """Most queued events; a full inbox applies ``overflow``."""
        self.overflow = overflow
        """Policy applied when full."""
        self._key = key
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._items: deque[Item] | dict[Hashable, Item] = self._new_container()
        self.dropped = 0
        """Events discarded by the overflow policy, or after the bus gave up on this inbox."""
        self.accepted = 0
        """Events queued (a LATEST replacement counts as accepted and its victim as dropped)."""
        self.high_water = 0
        """Largest number of queued events seen."""
        self.sleeping = False
        """Set by the consumer when it sleeps until woken; the next ``put`` calls ``waker``."""
        self.waker: Callable[[], None] = _nothing
        """Wakes the consumer; installed by the dispatcher."""
        self.abandoned = False
        """The bus stopped consuming (close timed out): further events are dropped, not queued."""
        self.put: Callable[[float, Any], None] = (
            # Bound per instance: the FIFO/LATEST choice costs no branch on the hot path.
            self._put_latest if overflow is Overflow.LATEST else self._put_fifo
        )

    def _new_container(self) -> deque[Item] | dict[Hashable, Item]:
        return {} if self.overflow is Overflow.LATEST else deque()

    def __len__(self) -> int:
        return len(self._items)

    def _put_fifo(self, t: float, payload: Any) -> None:
        with self._lock:
            items = self._items
            if len(items) >= self.capacity and not self._make_room(payload, True):
                return
            items = self._items
            items.append((t, payload))  # type: ignore[union-attr]
            self.accepted += 1
            if len(items) > self.high_water:
                self.high_water = len(items)
        if self.sleeping:
            self.sleeping = False
            self.waker()

    def _put_latest(self, t: float, payload: Any) -> None:
        with self._lock:
            items = self._items
            if len(items) >= self.capacity:
                self._make_room(payload, True)
            assert isinstance(items, dict)
            key = self._key(payload)
            old = items.pop(key, None)
            if old is not None:
                self.dropped += 1
                payload = _merge_latest(old[1], payload)
            items[key] = (t, payload)
            self.accepted += 1
            if len(items) > self.high_water:
                self.high_water = len(items)
        if self.sleeping:
            self.sleeping = False
            self.waker()

    def put_nowait(self, t: float, payload: Any) -> None:
        """Like ``put`` but never waits: a full ``block`` inbox takes the event anyway.  Used on
        the dispatcher's own threads, which must not wait for themselves."""
        with self._lock:
            items = self._items
            if len(items) >= self.capacity and not self._make_room(payload, False):
                return
            if isinstance(items, dict):
                items[object()] = (t, payload)
            else:
                items.append((t, payload))
            self.accepted += 1
            self.high_water = max(self.high_water, len(items))
        if self.sleeping:
            self.sleeping = False
            self.waker()

    def _make_room(self, payload: Any, may_block: bool) -> bool:
        """Apply the overflow policy with the lock held; ``False`` drops ``payload``."""
        if self.abandoned:
            self.dropped += 1
            return False
        overflow = self.overflow
        if overflow is Overflow.BLOCK:
            if not may_block:
                return True  # the dispatcher's own thread must never wait on itself: overfill
            while len(self._items) >= self.capacity and not self.abandoned:
                self.sleeping = False
                self.waker()
                self._not_full.wait(0.05)
            if self.abandoned:
                self.dropped += 1
                return False
            return True
        if overflow is Overflow.DROP_NEWEST:
            self.dropped += 1
            return False
        if overflow is Overflow.DROP_OLDEST:
            assert isinstance(self._items, deque)
            self._items.popleft()
            self.dropped += 1
            return True
        # LATEST: replacing an existing key needs no room; a new key evicts the oldest key.
        assert isinstance(self._items, dict)
        if self._key(payload) not in self._items:
            del self._items[next(iter(self._items))]
            self.dropped += 1
        return True

    def put_marker(self, marker: Marker) -> None:
        """Queue a control marker; markers ignore capacity and always wake the consumer.

        An abandoned inbox has no consumer any more: the marker arrives at once."""
        with self._lock:
            if self.abandoned:
                marker.arrive(self)
                return
            if isinstance(self._items, dict):
                self._items[object()] = (None, marker)
            else:
                self._items.append((None, marker))
        self.sleeping = False
        self.waker()

    def take(self) -> list[Item]:
        """Everything queued, oldest first; the inbox is empty afterwards."""
        with self._lock:
            items = self._items
            if not items:
                return []
            self._items = self._new_container()
            self._not_full.notify_all()
        return list(items.values()) if isinstance(items, dict) else list(items)

    def abandon(self) -> int:
        """The consumer is gone: discard what is queued (markers arrive, so nobody waits for
        them), drop future events, release blocked producers.  Returns the events discarded."""
        with self._lock:
            self.abandoned = True
            items = self._items
            queued = list(items.values()) if isinstance(items, dict) else list(items)
            self._items = self._new_container()
            self._not_full.notify_all()
        lost = 0
        for t, payload in queued:
            if t is None:
                payload.arrive(self)
            else:
                lost += 1
        self.dropped += lost
        return lost


def _nothing() -> None:
    return None

