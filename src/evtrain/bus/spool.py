"""The spool inbox: ``emit`` never waits and never drops, whatever the subscriber does.

A remote tracker (MLflow, wandb) may hang or fail for minutes.  ``block`` would stop the
trainer, the drop policies would lose its data.  A spool inbox writes every event ahead to the
subscriber's :class:`~evtrain.bus.journal.Journal` (on its writer thread,
:mod:`evtrain.bus.journal_writer`) and keeps the newest ones in a memory *window* of
``capacity`` events, from which the happy path delivers with no disk read.  When the window is
full, or the subscriber is failing (retrying one event) or stalled (one call outlived its
``stall_timeout``), later events stay in the journal only, so memory stays bounded; the
consumer replays them from disk, in order, and the window takes events again once it has
caught up.

The producer pays one lock and two appends (the writer's queue, the window).  Positions are
sequence numbers: the consumer's ``cursor`` (next seq it hands out), the window's first seq
``window_lo``, the next seq to assign.  Seqs in ``[cursor, window_lo)`` — and, while spilled,
those after the window — exist only in the journal; :meth:`SpoolInbox.take` turns them into a
:class:`Replay` the delivery reads lazily.  Markers are placed at the seq they must follow.

``acked`` is the last seq delivered successfully; the writer thread persists it.  After a crash
the next bus over the same journal redelivers from the persisted ack: at least once.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from evtrain.bus.inbox import Inbox, Marker, Overflow, event_size
from evtrain.bus.journal import Entry, Journal
from evtrain.bus.journal_writer import WRITE_EVERY_S, JournalWriter
from evtrain.bus.log_inbox import LogInbox
from evtrain.bus.replay import Replay, read_back

__all__ = [
    "WAIT_WRITTEN_S",
    "WRITE_EVERY_S",
    "AnyInbox",
    "JournalWriter",
    "Replay",
    "SpoolInbox",
    "SpoolItem",
]

WAIT_WRITTEN_S = 0.5
"""How long a replay waits, at a time, for the writer thread to have recorded what it needs."""


SpoolItem = Entry | Replay | Marker
"""What :meth:`SpoolInbox.take` hands the consumer: live events, replays, markers."""


class SpoolInbox:
    """Write-ahead journal plus bounded memory window; the same face the bus and the
    dispatcher use of an :class:`~evtrain.bus.inbox.Inbox` (``put``, ``put_nowait``,
    ``put_marker``, ``take``, ``discard``, ``abandon``, counters)."""

    __slots__ = (
        "_closed",
        "_cursor",
        "_failing",
        "_first_seq",
        "_handed",
        "_high_water",
        "_lock",
        "_markers",
        "_next_seq",
        "_pending",
        "_spilled",
        "_stalled",
        "_window",
        "_window_bytes",
        "_window_lo",
        "_writer",
        "abandoned",
        "acked",
        "capacity",
        "capacity_bytes",
        "dead_lettered",
        "down_at",
        "down_since",
        "dropped",
        "journal",
        "left",
        "overflow",
        "replayed",
        "sleeping",
        "waker",
    )

    def __init__(self, capacity: int, journal: Journal, capacity_bytes: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        """Most events held in memory; the journal holds the rest."""
        self.capacity_bytes = capacity_bytes
        """Most bytes (:func:`~evtrain.bus.inbox.event_size`) held in memory; ``None``: no
        bound but ``capacity``."""
        self._window_bytes = 0
        self.overflow = Overflow.SPOOL
        self.journal = journal
        self._lock = threading.Lock()
        self._first_seq = self._next_seq = self._window_lo = journal.next_seq
        self._cursor = journal.acked + 1
        """An earlier process's backlog, ``[acked + 1, next_seq)``, is replayed first."""
        self._pending: list[Entry] = []
        """Offered, not yet taken by the writer thread."""
        self._window: deque[Entry] = deque()
        self._spilled = False
        """The window takes no events; they are in the journal only."""
        self._failing = False
        self._stalled = False
        self._markers: deque[tuple[int, Marker]] = deque()
        """``(seq, marker)``: the marker follows every event before ``seq``."""
        self._handed: list[tuple[int, Marker]] = []
        """The ``journaled`` markers of the batch the consumer is delivering now."""
        self._high_water = 0
        self._closed = threading.Event()
        self.acked = journal.acked
        """Last seq delivered successfully (every one before it was, too)."""
        self.replayed = 0
        """Events delivered from disk."""
        self.dropped = 0
        """Events lost: dropped from the journal past ``journal_max_bytes`` (or never recorded)
        before delivery, or emitted after the bus gave up on this inbox."""
        self.left = 0
        """After :meth:`abandon`: events kept in the journal undelivered."""
        self.dead_lettered = 0
        """Events (or parts of events) the sink refused for good, written to the dead-letter
        file (:mod:`evtrain.bus.spool_delivery`)."""
        self.down_since: float | None = None
        """``time.monotonic()`` when the sink stopped taking events; ``None`` while it does."""
        self.down_at: float | None = None
        """The same moment as a unix time, for the console."""
        self.sleeping = False
        self.waker: Callable[[], None] = _nothing
        self.abandoned = False
        self._writer = JournalWriter(journal, self._drain, lambda: self.acked)
        self._writer.start()

    # -- producers ------------------------------------------------------------------------------

    def put(self, t: float, payload: Any) -> None:
        """Journal ``payload`` (ahead, on the writer thread) and keep it in the window if the
        window takes events; never waits."""
        limit = self.capacity_bytes
        size = 0 if limit is None else event_size(payload)
        with self._lock:
            if self.abandoned:
                self.dropped += 1
                return
            seq = self._next_seq
            self._next_seq = seq + 1
            entry = (seq, t, payload)
            self._pending.append(entry)
            if not self._spilled:
                window = self._window
                if len(window) < self.capacity and (
                    limit is None or not window or self._window_bytes + size <= limit
                ):
                    window.append(entry)
                    self._window_bytes += size
                else:
                    self._spilled = True
        if self.sleeping:
            self.sleeping = False
            self.waker()

    put_nowait = put

    def put_marker(self, marker: Marker) -> None:
        """Queue a marker behind every event offered so far; it always wakes the consumer.

        While the subscriber is failing or stalled, a ``journaled`` flush marker also arrives
        as soon as the writer thread has recorded everything before it: those events are safe
        in the journal, and the run's flush before its final save must not wait for a dead
        tracker.  It still passes through delivery later (arriving is idempotent)."""
        with self._lock:
            if self.abandoned:
                marker.arrive(self)
                return
            seq = self._next_seq
            self._markers.append((seq, marker))
            held = (self._failing or self._stalled) and marker.journaled
        if held:
            self._writer.when_written(seq - 1, functools.partial(marker.arrive, self))
        self.sleeping = False
        self.waker()

    @property
    def offered(self) -> int:
        """Events put here by this process."""
        return self._next_seq - self._first_seq

    @property
    def journaled(self) -> int:
        """Events journaled (this process's or an earlier one's) and not yet acknowledged."""
        return self._next_seq - 1 - self.acked

    @property
    def in_memory(self) -> int:
        """Events in the window now."""
        return len(self._window)

    @property
    def high_water(self) -> int:
        """Largest window seen."""
        return max(self._high_water, len(self._window))

    def __len__(self) -> int:
        """Events not yet handed to the consumer, and markers."""
        return self._next_seq - self._cursor + len(self._markers)

    def _drain(self) -> list[Entry]:
        """For the writer thread: everything offered since its last call."""
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    # -- the consumer ---------------------------------------------------------------------------

    def take(self) -> list[SpoolItem]:
        """What to deliver next, in seq order: a replay of what is only on disk, the window's
        events, and the markers due between them."""
        with self._lock:
            if self.abandoned:
                return []
            if self._spilled and not self._window:
                self._window_lo = self._next_seq  # everything before it is on disk
                if not (self._failing or self._stalled):
                    self._spilled = False  # caught up, healthy: the window takes events again
            out: list[SpoolItem] = []
            queued = len(self._markers)
            # those popped below, from the left, are handed out
            handed = list(self._markers) if queued else []
            cursor = self._cursor
            if cursor < self._window_lo:
                cursor = self._replay_until(out, cursor, self._window_lo)
            if self._window:
                self._high_water = max(self._high_water, len(self._window))
                markers = self._markers
                for entry in self._window:
                    while markers and markers[0][0] <= entry[0]:
                        out.append(markers.popleft()[1])
                    out.append(entry)
                cursor = self._window_lo = cursor + len(self._window)
                self._window = deque()
                self._window_bytes = 0
            while self._markers and self._markers[0][0] <= cursor:
                out.append(self._markers.popleft()[1])
            self._cursor = cursor
            # The previous batch is done with; this one's flushes may need releasing (hold).
            taken = handed[: queued - len(self._markers)]
            self._handed = [(seq, m) for seq, m in taken if m.journaled]
            return out

    def _replay_until(self, out: list[SpoolItem], first: int, end: int) -> int:
        """Append ``Replay`` pieces for ``[first, end)``, split where markers are due."""
        markers = self._markers
        while markers and markers[0][0] <= end:
            boundary, marker = markers.popleft()
            if boundary > first:
                out.append(Replay(first, boundary))
                first = boundary
            out.append(marker)
        if first < end:
            out.append(Replay(first, end))
        return end

    def replay(self, piece: Replay) -> Iterator[Entry]:
        """The events of ``piece`` read from the journal, in order; what the journal no longer
        has is counted as dropped (and acknowledged, so cleanup goes on)."""
        while not self._writer.wait_written(piece.end - 1, WAIT_WRITTEN_S):
            if self.abandoned:
                return
        yield from read_back(self.journal, piece, self._first_seq, self._lost)

    def _lost(self, count: int, through: int) -> None:
        with self._lock:
            self.dropped += count
        self.acknowledge(through, replayed=False)

    def acknowledge(self, seq: int, *, replayed: bool) -> None:
        """Event ``seq`` (and all before it) is done with."""
        if not self.abandoned:
            self.acked = seq
            if replayed:
                self.replayed += 1

    def hold(self, *, failing: bool | None = None, stalled: bool | None = None) -> None:
        """The subscriber started or stopped failing or stalling: while it does, later events
        go to the journal only."""
        with self._lock:
            if failing is not None:
                self._failing = failing
            if stalled is not None:
                self._stalled = stalled
            held = self._failing or self._stalled
            if held:
                self._spilled = True
            # Flushes queued before the trouble began need not wait for it either.
            queued = [*self._handed, *self._markers] if held else []
            waiting = [(seq, m) for seq, m in queued if m.journaled]
        for seq, marker in waiting:
            self._writer.when_written(seq - 1, functools.partial(marker.arrive, self))

    @property
    def failing(self) -> bool:
        """The sink fails (its probes too): it is down, not merely slow."""
        return self._failing

    def wait_closed(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` unless the bus gives up on this inbox; ``True`` if it did."""
        return self._closed.wait(timeout)

    def discard(self) -> None:
        """The consumer took an event it will not hand over."""
        with self._lock:
            self.dropped += 1

    def abandon(self, handled: int = 0) -> int:
        """Nobody consumes any more (closed, or the bus gave up): markers arrive, the writer
        records what is left and syncs, the journal closes.  Nothing is lost — what was not
        delivered stays in the journal (:attr:`left`) — so this returns 0, always."""
        with self._lock:
            if self.abandoned:
                return 0
            self.abandoned = True
            markers = [m for _, m in self._markers]
            self._markers.clear()
            self._window.clear()
            last = self._next_seq - 1
            # Deleted past journal_max_bytes and never replayed (a replay counts its gaps and
            # acknowledges past them): lost, and counted now.
            self.dropped += max(0, min(self.journal.floor - 1, last) - self.acked)
        self._closed.set()
        for marker in markers:
            marker.arrive(self)
        self._writer.stop()
        self.left = self.journal.close(self.acked, last)
        return 0


AnyInbox = Inbox | SpoolInbox | LogInbox
"""Any kind of inbox a subscription may have."""


def _nothing() -> None:
    return None
