"""A default subscriber's inbox: its cursor into the bus's shared log, and what is held aside
for it (:mod:`evtrain.bus.ledger` tells how the two share the work).

The consumer's :meth:`LogInbox.take` copies the entries past its cursor under the inbox's own
lock only (never the ledger's, which producers take), then keeps those whose token names it;
``offered``, ``dropped``, ``high_water`` and ``len`` read as a per-subscriber inbox's did.
"""

from __future__ import annotations

from typing import Any

from evtrain.bus.ledger import Reader, by_key, key
from evtrain.bus.markers import Item, Marker
from evtrain.bus.settings import Overflow


class LogInbox(Reader):
    """A default subscriber's inbox: a cursor into its bus's
    :class:`~evtrain.bus.ledger.Ledger`, and the items held aside for it.  It answers what the
    dispatcher, the closing code and the metrics ask of an :class:`~evtrain.bus.inbox.Inbox`."""

    overflow = Overflow.BLOCK
    capacity_bytes = None

    # -- producer side --------------------------------------------------------------------------

    def put(self, t: float, payload: Any) -> None:
        """Queue one event for this subscriber alone (a blinker ``send``)."""
        self._ledger.append(self._own, t, payload, True)

    def put_nowait(self, t: float, payload: Any) -> None:
        """Like :meth:`put`, never waiting: a full inbox takes the event anyway."""
        self._ledger.append(self._own, t, payload, False)

    def put_marker(self, marker: Marker) -> None:
        """Queue a control marker behind every event logged so far; it always wakes the
        consumer.  An abandoned inbox has no consumer: the marker arrives at once."""
        ledger = self._ledger
        with ledger.lock, self.lock:
            abandoned = self.abandoned
            if not abandoned:
                self.held.append((key(ledger.end, marker=True), (None, marker)))
        if abandoned:
            marker.arrive(self)
        else:
            self.wake()

    # -- consumer side --------------------------------------------------------------------------

    def take(self) -> list[Item]:
        """Everything queued for this subscriber, oldest first (markers in their place).

        It copies the entries past its cursor under its own lock only; producers never wait
        for it."""
        ledger = self._ledger
        base, entries = ledger.log
        if self.cursor == base + len(entries) and not self.held and not self.stalled:
            return []  # nothing new (an idle task polls)
        with self.lock:
            base, entries = ledger.log
            start = self.cursor
            copied = entries[start - base :]
            self.cursor = start + len(copied)
            held, self.held = self.held, []
            events, self.held_events = self.held_events, 0
            stalled, self.stalled = self.stalled, False
        if ledger.waiting:
            with ledger.lock:
                ledger.room.notify_all()
        mine: list[Item] = []
        if stalled:  # events logged since the wait ran out are dropped
            lost = sum(self in token for _, token in copied)
            self._taken += lost
            self._discarded += lost
        else:
            mine = [item for item, token in copied if self in token]
            self._taken += len(mine)
        self._high_water = max(self._high_water, events + len(mine))
        if not held:
            return mine
        if not mine:
            return [item for _, item in held]
        keyed = [(key(start + i), item) for i, (item, token) in enumerate(copied) if self in token]
        return [item for _, item in sorted(held + keyed, key=by_key)]

    def discard(self) -> None:
        """The consumer took an event it will not hand over (disabled or closed subscriber)."""
        self._discarded += 1

    def abandon(self, handled: int) -> int:
        """The consumer is gone: what is queued is dropped (markers arrive), as is whatever
        is logged for it later, and producers waiting for it go on.  Returns the events
        offered and neither ``handled`` nor dropped already; 0 on a second call."""
        ledger = self._ledger
        with ledger.lock:
            if not self.abandoned and not self.stalled:
                ledger._hold(self)
            with self.lock:
                self.abandoned = True
                held, self.held, self.held_events = self.held, [], 0
            dropped = self._dropped + self._discarded
            lost = max(0, self._offered + self._taken - handled - dropped)
            self._dropped += lost
            ledger.room.notify_all()
        for _, (t, payload) in held:
            if t is None:
                payload.arrive(self)
        return lost

    # -- what the metrics and the flush ask ---------------------------------------------------

    def _logged(self) -> int:
        """With the ledger's lock held: entries for it past its cursor."""
        if not self.attached:
            return 0
        return sum(self in token for _, token in self._ledger.since(self))

    def _queued(self) -> int:
        logged = 0 if self.stalled or self.abandoned else self._logged()
        return logged + len(self.held)

    def __len__(self) -> int:
        """Items queued now: events logged for it past its cursor, and held items."""
        with self._ledger.lock:
            return self._queued()

    @property
    def offered(self) -> int:
        """Events logged for it: each one is handled by the consumer, dropped, or still
        queued (or in flight)."""
        with self._ledger.lock:
            return self._offered + self._taken + self._logged()

    @property
    def dropped(self) -> int:
        """Events discarded: logged while it was stalled or after it was abandoned, discarded
        by a disabled or closed subscriber, or given up at close."""
        with self._ledger.lock:
            late = self._logged() if self.stalled or self.abandoned else 0
            return self._dropped + self._discarded + late

    @property
    def high_water(self) -> int:
        """Largest number of queued events seen (taken when the consumer takes)."""
        with self._ledger.lock:
            markers = sum(t is None for _, (t, _p) in self.held)
            return max(self._high_water, self._queued() - markers)
