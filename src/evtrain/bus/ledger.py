"""One shared log per bus for its default subscribers: ``emit`` appends once, each reads it.

A subscriber with the default delivery settings — ``block``, bounded by ``capacity`` only
(no ``capacity_bytes``) — has a :class:`~evtrain.bus.log_inbox.LogInbox`: a cursor into its
bus's :class:`Ledger` instead of a queue of its own.  ``emit`` appends ``((time, payload),
token)`` to the ledger once, where the *token* is its route's frozen set of log readers (fixed
when the route was looked up), under one producers' lock: its cost does not grow with the
number of subscribers.  Each subscriber's task copies the entries past its cursor — without
that lock: a list slice is one step for the interpreter, and the ledger replaces its list
rather than cutting it — and keeps those whose token names it, so every subscriber sees its
events in the order they were appended, across all its signals.

What a per-subscriber inbox did at each ``put`` the ledger does lazily:

* **Capacity.**  A reader's queued events are at most the entries past its cursor plus those
  held aside for it.  The producer keeps one bound, :attr:`Ledger.check_at`: the position at
  which some reader *might* be full.  Below it an append is the whole work; at it,
  :meth:`Ledger._admit` counts each reader near its bound exactly, moving its events past
  its cursor aside (so that each is counted once), and waits, as ``block`` does, for a reader
  that is really full, at most its ``block_timeout``.  A reader's own consumer thread (and the
  dispatcher loop) never waits for it: it overfills, as before.
* **Stalls.**  A reader that made no room within ``block_timeout`` is *stalled*: its events
  so far stay held for it, later ones are dropped (counted) until it takes again, the wait
  is reported through ``on_block_timeout`` — and it no longer holds the log in memory.
* **Memory.**  Entries every live reader has passed are let go at most every
  :data:`TRIM_EVERY` appends; what a stalled or abandoned reader would have been handed is
  counted as dropped then.
* **Counters.**  An event counts as offered once its reader takes it, holds it, or drops it
  (``offered`` and ``dropped`` add the entries not looked at yet, so they read as before).
* **Wake-ups.**  A consumer going to deep sleep adds itself to :attr:`Ledger.sleepers`; an
  append wakes only the sleepers its token names, so a busy bus pays one test per emit.

Markers (flush, close) are held aside with the position they were put at; events put into one
subscriber's inbox directly go through the log with that subscriber alone as token.  Locks
are taken ledger first, then a reader's own (which guards its cursor, held items and stall).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from evtrain.bus.markers import EVERY_INBOX, Item, consumer

TRIM_EVERY = 1024
"""Appends between two cuts of the entries every live reader has passed."""

Token = frozenset["Reader"]
"""The readers an entry goes to."""

Entry = tuple[Item, Token]

Held = tuple[int, Item]
"""An item held aside for one reader, with its sort key (:func:`key`)."""


class Ledger:
    """A bus's shared log: the entries, and the readers' positions in it.

    Positions are absolute: :attr:`log` is ``(position of its first entry, entries)``.
    Producers change it under :attr:`lock`; readers only copy from it.
    """

    __slots__ = (
        "check_at",
        "end",
        "entries",
        "lock",
        "log",
        "readers",
        "room",
        "sleepers",
        "waiting",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)
        """Producers waiting for a full reader; notified by a take when :attr:`waiting`."""
        self.waiting = 0
        self.entries: list[Entry] = []
        self.log: tuple[int, list[Entry]] = (0, self.entries)
        """Replaced whole when trimmed, so a reader never sees a base with another list."""
        self.end = 0
        """Position after the last entry."""
        self.check_at = 0
        """Below this position no reader can be full: an append needs no other test."""
        self.readers: list[Reader] = []
        self.sleepers: set[Reader] = set()

    def attach(self, reader: Reader) -> None:
        """``reader`` reads from the next entry on."""
        with self.lock:
            reader.cursor = self.end
            reader.attached = True
            self.readers.append(reader)
            self.check_at = 0  # its capacity may be below the bound: recount at the next append

    def append(self, token: Token, t: float, payload: Any, may_block: bool = True) -> None:
        """Log ``payload`` for the readers in ``token``, waiting as ``block`` does (unless
        ``may_block`` is false) while one of them is full."""
        with self.lock:
            if self.end >= self.check_at:
                self._admit(token, payload, may_block)
            self.entries.append(((t, payload), token))
            self.end += 1
        if self.sleepers:
            self.wake(token)

    def wake(self, token: Token) -> None:
        for reader in tuple(self.sleepers):
            if reader in token:
                reader.wake()

    def trim(self) -> None:
        """Let go now of what the appends let go of every :data:`TRIM_EVERY`: a closing bus
        calls it once its readers are abandoned, so that its last entries (up to that many
        events) are not kept alive until the garbage collector finds the readers' cycles."""
        with self.lock:
            self._trim()

    # -- the slow path, with the lock held -----------------------------------------------------

    def since(self, reader: Reader, upto: int | None = None) -> list[Entry]:
        """The entries from ``reader``'s cursor to ``upto`` (default: the end)."""
        base, entries = self.log
        return entries[reader.cursor - base : None if upto is None else upto - base]

    def _hold(self, reader: Reader) -> int:
        """Move ``reader``'s events past its cursor aside (counted as offered); returns its
        queued events, exactly."""
        with reader.lock:
            start = reader.cursor
            pending = [
                (key(start + i), item)
                for i, (item, token) in enumerate(self.since(reader))
                if reader in token
            ]
            reader.cursor = self.end
            if pending:
                reader._offered += len(pending)
                reader.held_events += len(pending)
                held = reader.held
                out_of_order = held and held[-1][0] > pending[0][0]  # a marker put meanwhile
                held.extend(pending)
                if out_of_order:
                    held.sort(key=by_key)
            return reader.held_events

    def _stall(self, reader: Reader) -> None:
        """``reader`` made no room in time: keep what it has, drop what comes until it takes."""
        self._hold(reader)
        with reader.lock:
            reader.stalled = True

    def _trim(self) -> None:
        """Let go of the entries every live reader has passed; count what stalled and abandoned
        readers would have been handed as dropped; forget abandoned readers no route names.

        A live reader more than :data:`TRIM_EVERY` entries behind (asleep on a rare signal, or
        slow) has its own events set aside, so it does not keep everyone's in memory."""
        live = []
        for reader in self.readers:
            if not (reader.stalled or reader.abandoned):
                if self.end - reader.cursor > TRIM_EVERY:
                    self._hold(reader)
                live.append(reader.cursor)
        low = min(live, default=self.end)
        base, entries = self.log
        for reader in list(self.readers):
            if not (reader.stalled or reader.abandoned):
                continue
            gone = reader.abandoned and reader.unrouted
            upto = self.end if gone else low
            with reader.lock:
                if reader.cursor < upto:
                    lost = sum(reader in token for _, token in self.since(reader, upto))
                    reader.cursor = upto
                    reader._offered += lost
                    reader._dropped += lost
            if gone:
                reader.attached = False
                self.readers.remove(reader)
        if low > base:
            self.entries = entries[low - base :]
            self.log = (low, self.entries)

    def _admit(self, token: Token, payload: Any, may_block: bool) -> None:
        """Recount the readers near their bound, trim, and wait while a reader in ``token`` is
        full (``block``), at most its ``block_timeout``; then it is stalled and reported."""
        self._trim()
        started = time.monotonic()
        owner = consumer()
        while True:
            full: list[Reader] = []
            check_at = self.end + TRIM_EVERY
            for reader in self.readers:
                if reader.stalled or reader.abandoned:
                    continue
                if self.end - reader.cursor + reader.held_events >= reader.capacity:
                    queued = self._hold(reader)
                    own = owner is reader or owner is EVERY_INBOX
                    if queued >= reader.capacity and may_block and not own and reader in token:
                        full.append(reader)
                check_at = min(check_at, reader.cursor + reader.capacity - reader.held_events)
            self.check_at = check_at
            if not full:
                return
            self._wait(full, started, payload)

    def _wait(self, full: list[Reader], started: float, payload: Any) -> None:
        """Wait a little for ``full`` readers to take; stall those whose ``block_timeout`` ran
        out and report them (outside the lock)."""
        now = time.monotonic()
        out = [r for r in full if now - started >= r.block_timeout]
        if out:
            for reader in out:
                self._stall(reader)
            self.lock.release()
            try:
                for reader in out:
                    reader.on_block_timeout(payload, now - started)
            finally:
                self.lock.acquire()
            return
        left = min(started + r.block_timeout for r in full) - now
        for reader in full:
            if reader.sleeping:
                reader.wake()
        self.waiting += 1
        try:
            self.room.wait(min(0.05, left))
        except BaseException:
            # Ctrl-C in a blocked emit: the event is not logged, and the emits on the way out
            # (run_finished, a writer's last summary) must not wait on these readers again.
            for reader in full:
                self._stall(reader)
                reader._offered += 1
                reader._dropped += 1
            raise
        finally:
            self.waiting -= 1


class Route:
    """What ``emit`` puts into for the log readers of one route: the bus's ledger, with the
    route's token.  It stands among the route's inboxes (those of subscribers with other
    settings), so ``emit`` pays one append for all of its log readers."""

    __slots__ = ("put", "put_nowait", "token")

    def __init__(self, ledger: Ledger, token: Token) -> None:
        self.token = token
        self.put: Callable[[float, Any], None] = functools.partial(ledger.append, token)
        """Log an event for the route's readers (``block``)."""
        self.put_nowait: Callable[[float, Any], None] = functools.partial(
            ledger.append, token, may_block=False
        )
        """Log an event for the route's readers, never waiting (the bus's own events)."""


def key(position: int, marker: bool = False) -> int:
    """Sort key of an item held aside: an entry's position, or (for a marker put when the log
    ended at ``position``) just before the entry that comes next."""
    return 2 * position + (0 if marker else 1)


def by_key(held: Held) -> int:
    """The sort key of a held item."""
    return held[0]


class Reader:
    """What the ledger keeps of one reader (:class:`~evtrain.bus.log_inbox.LogInbox` is the
    whole inbox): its place, what is held aside for it, its state and counters."""

    def __init__(self, ledger: Ledger, capacity: int, block_timeout: float = 10.0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._ledger = ledger
        self._own: Token = frozenset((self,))
        self.lock = threading.Lock()
        """Guards its cursor, held items and stall against the ledger's slow path."""
        self.capacity = capacity
        """Most queued events; a full inbox makes ``emit`` wait (``block``)."""
        self.block_timeout = block_timeout
        """The longest ``emit`` waits for room before this subscriber is stalled."""
        self.on_block_timeout: Callable[[Any, float], None] = _ignore
        """Called with the payload and the seconds waited when ``block_timeout`` ran out
        (outside the lock); installed by the bus."""
        self.cursor = 0
        """Ledger position of the next entry to look at."""
        self.held: list[Held] = []
        """Items moved aside from the log (events counted near capacity, markers), by key."""
        self.held_events = 0
        self.stalled = False
        """A wait for room ran out and it has not taken since: its events are dropped."""
        self.abandoned = False
        """The bus stopped consuming it: events logged for it are dropped."""
        self.unrouted = False
        """No route names it any more (set by the routes)."""
        self.attached = False
        """Read from the ledger (from :meth:`Ledger.attach` until let go when abandoned)."""
        self._offered = 0
        """Events the ledger counted as offered (held aside, or dropped), under its lock."""
        self._taken = 0
        """Events :meth:`take` counted as offered, on the consumer's thread only."""
        self._dropped = 0
        """Events the ledger dropped for it, under its lock."""
        self._discarded = 0
        """Events its consumer dropped (disabled, closed, or logged while stalled), on the
        consumer's thread only."""
        self._high_water = 0
        self._sleeping = False
        self.waker: Callable[[], None] = _nothing
        """Wakes the consumer; installed by the dispatcher."""

    @property
    def sleeping(self) -> bool:
        """Set by the consumer when it sleeps until woken; an append for it calls ``waker``."""
        return self._sleeping

    @sleeping.setter
    def sleeping(self, value: bool) -> None:
        self._sleeping = value
        if value:
            self._ledger.sleepers.add(self)
        else:
            self._ledger.sleepers.discard(self)

    def wake(self) -> None:
        self.sleeping = False
        self.waker()


def _nothing() -> None:
    return None


def _ignore(payload: Any, waited: float) -> None:
    return None
