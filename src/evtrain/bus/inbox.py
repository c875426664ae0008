"""A subscriber's bounded inbox: producers append from any thread, one consumer swaps it out.

A subscriber gets one when its policy needs work per subscriber at each event (a drop
policy, ``latest``, ``capacity_bytes``); one with the default settings reads the bus's shared
log instead (:mod:`evtrain.bus.ledger`).  The producer side is on the path of ``Bus.emit``:
one uncontended lock, one append, no loop wake-up unless the consumer is in its deep sleep
(see :mod:`evtrain.bus.dispatch`).  The consumer
takes everything at once by swapping the container, so a burst of events costs one hand-over.

Its neighbours: the policies it applies (:mod:`evtrain.bus.settings`), what an event weighs
(:mod:`evtrain.bus.sizes`), and the markers that pass through it (:mod:`evtrain.bus.markers`);
their names are importable from here too, as they were before they got modules of their own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

import attrs

from evtrain.bus.markers import EVERY_INBOX, Item, Marker, consumer, consumes
from evtrain.bus.settings import Isolation, Overflow, SubscriberSettings
from evtrain.bus.sizes import EVENT_BYTES, SUMMARY_BYTES, event_size
from evtrain.events.payloads import StatsEvent

__all__ = [
    "EVENT_BYTES",
    "EVERY_INBOX",
    "SUMMARY_BYTES",
    "Inbox",
    "Isolation",
    "Item",
    "Marker",
    "Overflow",
    "SubscriberSettings",
    "consumes",
    "default_key",
    "event_size",
]


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
    """Bounded FIFO of ``(emit time, payload)`` with an :class:`Overflow` policy.

    Owns the producer-side counters (``offered``, ``dropped``, ``high_water``); they change only
    here, under the inbox's lock.
    """

    __slots__ = (
        "_bytes",
        "_high_water",
        "_items",
        "_key",
        "_lock",
        "_markers",
        "_not_full",
        "_room",
        "_stalled",
        "abandoned",
        "block_timeout",
        "capacity",
        "capacity_bytes",
        "dropped",
        "offered",
        "on_block_timeout",
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
        block_timeout: float = 10.0,
        capacity_bytes: int | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if capacity_bytes is not None and capacity_bytes < 1:
            raise ValueError(f"capacity_bytes must be at least 1, got {capacity_bytes}")
        if overflow is Overflow.SPOOL:
            raise ValueError("a spool subscriber's inbox is an evtrain.bus.spool.SpoolInbox")
        self.capacity = capacity
        """Most queued events; a full inbox applies ``overflow``."""
        self.capacity_bytes = capacity_bytes
        """Most bytes of queued events (:func:`event_size`); ``None``: unbounded in bytes.
        One event bigger than that is still taken by an empty inbox, or it could never pass."""
        self._bytes = 0
        """Estimated bytes queued now (0 while ``capacity_bytes`` is ``None``)."""
        self.overflow = overflow
        """Policy applied when full."""
        self.block_timeout = block_timeout
        """``block``: the longest ``emit`` waits for room before it drops the event."""
        self.on_block_timeout: Callable[[Any, float], None] = _ignore
        """Called with the dropped payload and the seconds waited, when ``block_timeout`` ran
        out (outside the lock); installed by the bus."""
        self._stalled = False
        """A wait ran out (or was interrupted) and the consumer has not taken anything since:
        later events are dropped at once, so a hung subscriber costs a producer one
        ``block_timeout``, not one per event."""
        self._key = key
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._items: deque[Item] | dict[Hashable, Item] = self._new_container()
        self._room = capacity
        """``capacity`` while consumed, 0 once abandoned: every later put meets a full inbox,
        whose policy drops it, with no extra test on the hot path."""
        self._markers = 0
        """Markers in ``_items``: they are not events, so not part of the high-water mark."""
        self._high_water = 0
        self.dropped = 0
        """Events discarded by the overflow policy, by the subscriber's state (disabled, closed),
        or because the bus gave up on this inbox."""
        self.offered = 0
        """Events put here.  Each one is handled by the consumer, dropped, or still queued (or
        in flight); a LATEST replacement is offered and its victim dropped."""
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

    @property
    def high_water(self) -> int:
        """Largest number of queued events seen.  Between two takes the queue only grows (an
        overflow replaces, never shrinks it), so its length when taken is its peak: the hot path
        keeps no mark."""
        return max(self._high_water, len(self._items) - self._markers)

    def _full(self, size: int) -> bool:
        """With the lock held: no room for one more event of ``size`` bytes."""
        if len(self._items) >= self._room:
            return True
        limit = self.capacity_bytes
        return limit is not None and self._bytes > 0 and self._bytes + size > limit

    def _put_fifo(self, t: float, payload: Any, may_block: bool = True) -> None:
        size = 0 if self.capacity_bytes is None else event_size(payload)
        with self._lock:
            self.offered += 1
            if (
                len(self._items) >= self._room or (size and self._full(size))
            ) and not self._make_room(may_block, payload, size):
                return
            self._items.append((t, payload))  # type: ignore[union-attr]
            self._bytes += size
        if self.sleeping:
            self._wake()

    def _put_latest(self, t: float, payload: Any, key: Hashable | None = None) -> None:
        if key is None:
            key = self._key(payload)
        sized = self.capacity_bytes is not None
        with self._lock:
            self.offered += 1
            items = self._items
            assert isinstance(items, dict)
            if key in items:  # replacing needs no room
                self.dropped += 1
                old = items.pop(key)[1]
                payload = _merge_latest(old, payload)
                if sized:
                    self._bytes -= event_size(old)
            size = event_size(payload) if sized else 0
            if self._full(size) and not self._make_room(False, None, size):
                return
            items[key] = (t, payload)
            self._bytes += size
        if self.sleeping:
            self._wake()

    def put_nowait(self, t: float, payload: Any) -> None:
        """Like ``put`` but never waits: a full ``block`` inbox takes the event anyway.  Used on
        the dispatcher's own threads, which must not wait for themselves.  A LATEST inbox keeps
        each such event (it replaces nothing)."""
        if self.overflow is Overflow.LATEST:
            self._put_latest(t, payload, key=object())
        else:
            self._put_fifo(t, payload, may_block=False)

    def _make_room(self, may_block: bool, payload: Any = None, size: int = 0) -> bool:
        """Apply the overflow policy with the lock held; ``False`` drops the new event."""
        if self.abandoned:
            self.dropped += 1
            return False
        overflow = self.overflow
        if overflow is Overflow.BLOCK:
            # The consumer's own thread (a handler emitting a burst into its own inbox, or any
            # async handler on the loop) would wait for itself: overfill, losing nothing.
            owner = consumer()
            if not may_block or owner is self or owner is EVERY_INBOX:
                return True
            if self._stalled or not self._wait_for_room(payload, size):
                self.dropped += 1
                return False
            return True
        if overflow is Overflow.DROP_NEWEST:
            self.dropped += 1
            return False
        # DROP_OLDEST, and LATEST for a new key: as many as the bytes need
        while self._evict_oldest() and self._full(size):
            pass
        return True

    def _wait_for_room(self, payload: Any, size: int = 0) -> bool:
        """``block``, with the lock held: wait up to ``block_timeout`` for the consumer to make
        room; ``False`` when it did not (the inbox is then stalled, and the bus told)."""
        started = time.monotonic()
        deadline = started + self.block_timeout
        try:
            while self._full(size):
                left = deadline - time.monotonic()
                if self.abandoned or left <= 0:
                    break
                self._wake()
                self._not_full.wait(min(0.05, left))
            else:
                return True
        except BaseException:
            # Ctrl-C in a blocked emit: the event is not queued, and the emits on the way out
            # (run_finished, a writer's last summary) must not wait on this subscriber again.
            self._stalled = True
            self.dropped += 1
            raise
        if self.abandoned:
            return False
        self._stalled = True
        # The report logs and queues subscriber_stalled (maybe into this inbox): not under
        # this lock, which is not reentrant.
        self._lock.release()
        try:
            self.on_block_timeout(payload, time.monotonic() - started)
        finally:
            self._lock.acquire()
        return False

    def _evict_oldest(self) -> bool:
        """Drop the oldest queued event; ``False`` when there is none.  A marker is no event:
        it stays, or a flush would wait for it forever."""
        items = self._items
        queued = items.items() if isinstance(items, dict) else enumerate(items)
        for where, (t, payload) in queued:
            if t is not None:
                del items[where]  # type: ignore[arg-type]
                self.dropped += 1
                if self.capacity_bytes is not None:
                    self._bytes -= event_size(payload)
                return True
        return False

    def _wake(self) -> None:
        self.sleeping = False
        self.waker()

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
            self._markers += 1
        self._wake()

    def _swap(self) -> list[Item]:
        """With the lock held: everything queued, oldest first, leaving the inbox empty."""
        items = self._items
        self._high_water = max(self._high_water, len(items) - self._markers)
        self._items = self._new_container()
        self._markers = 0
        self._bytes = 0
        self._stalled = False
        self._not_full.notify_all()
        return list(items.values()) if isinstance(items, dict) else list(items)

    def take(self) -> list[Item]:
        """Everything queued, oldest first; the inbox is empty afterwards."""
        with self._lock:
            return self._swap() if self._items else []

    def discard(self) -> None:
        """The consumer took an event it will not hand over (disabled or closed subscriber)."""
        with self._lock:
            self.dropped += 1

    def abandon(self, handled: int) -> int:
        """The consumer is gone: discard what is queued (markers arrive, so nobody waits for
        them), drop future events, release blocked producers.

        Every event offered and neither ``handled`` by the consumer nor dropped already — queued,
        or in flight on a stuck subscriber — now counts as dropped.  Returns how many that made;
        a second call returns 0.
        """
        with self._lock:
            self.abandoned = True
            self._room = 0
            queued = self._swap()
            lost = max(0, self.offered - handled - self.dropped)
            self.dropped += lost
        for t, payload in queued:
            if t is None:
                payload.arrive(self)
        return lost


def _nothing() -> None:
    return None


def _ignore(payload: Any, waited: float) -> None:
    return None
