"""The thread that writes a spool inbox's events ahead to its journal, off the emit thread.

``emit`` only appends to the inbox's pending list; this thread takes the list every
:data:`WRITE_EVERY_S` (sooner when the consumer waits for a record), appends it to the
:class:`~evtrain.bus.journal.Journal` and hands it to the OS, and every ``fsync_s`` makes it
durable and persists the acknowledgement.  A ``journaled`` flush waits here
(:meth:`JournalWriter.when_written`) for the events before it to be recorded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from evtrain.bus.journal import Entry, Journal, logger

WRITE_EVERY_S = 0.02
"""How often the writer thread appends what was emitted (``kill -9`` loses at most this)."""


class JournalWriter(threading.Thread):
    """The daemon thread that appends a spool inbox's events to its journal.

    Every :data:`WRITE_EVERY_S` (sooner when the consumer waits for a record) it takes what was
    emitted (``drain``) and appends it; every ``fsync_s`` it syncs and persists ``acked()``.
    """

    def __init__(
        self, journal: Journal, drain: Callable[[], list[Entry]], acked: Callable[[], int]
    ) -> None:
        super().__init__(name=f"evtrain-journal[{journal.label}]", daemon=True)
        self.journal = journal
        self._drain = drain
        self._acked = acked
        self._wake = threading.Condition()
        self._stopping = False
        self._wanted = 0
        self._callbacks: list[tuple[int, Callable[[], None]]] = []
        """``(seq, fn)``: call ``fn`` once every seq up to ``seq`` is written."""
        self.written = journal.next_seq - 1
        """Every seq up to this one has been handed to the OS (or could not be recorded)."""

    def run(self) -> None:
        journal = self.journal
        next_sync = time.monotonic() + journal.fsync_s
        stopping = False
        while not stopping:
            with self._wake:
                self._wake.wait_for(
                    lambda: self._stopping or self._wanted > self.written,
                    timeout=min(WRITE_EVERY_S, journal.fsync_s),
                )
                stopping = self._stopping
            entries = self._drain()
            if entries:
                try:
                    journal.append(entries)
                except OSError as error:  # disk full, folder gone: memory still delivers
                    logger.error(
                        "Journal of subscriber %r cannot write to %s (%s); events not in memory "
                        "are dropped until it can.",
                        journal.label,
                        journal.folder,
                        error,
                    )
                with self._wake:
                    self.written = entries[-1][0]
                    self._wake.notify_all()
            self._call_back(stopping)
            if stopping or time.monotonic() >= next_sync:
                with contextlib.suppress(OSError):
                    journal.sync(self._acked())
                next_sync = time.monotonic() + journal.fsync_s

    def when_written(self, seq: int, fn: Callable[[], None]) -> None:
        """Call ``fn`` on this thread once every seq up to ``seq`` is written (at once if it
        is already; when the writer stops, in any case)."""
        with self._wake:
            if self.written < seq and self.is_alive():
                self._callbacks.append((seq, fn))
                self._wanted = max(self._wanted, seq)
                self._wake.notify_all()
                return
        fn()

    def _call_back(self, stopping: bool) -> None:
        with self._wake:
            due = [fn for seq, fn in self._callbacks if stopping or seq <= self.written]
            self._callbacks = [
                (seq, fn) for seq, fn in self._callbacks if not stopping and seq > self.written
            ]
        for fn in due:
            fn()

    def wait_written(self, seq: int, timeout: float) -> bool:
        """Ask for everything up to ``seq`` now and wait for it; ``False`` on timeout."""
        with self._wake:
            if self.written >= seq:
                return True
            self._wanted = max(self._wanted, seq)
            self._wake.notify_all()
            # A writer that died records nothing more: the reader counts the gap as dropped.
            return self._wake.wait_for(lambda: self.written >= seq or not self.is_alive(), timeout)

    def stop(self) -> None:
        """Write what is left, sync, and end (waits for it)."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        self.join()
