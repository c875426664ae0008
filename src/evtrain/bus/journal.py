"""A spool subscriber's journal: an append-only log of every event offered to it, on disk.

A remote tracker may stop answering for minutes, and the trainer may be ``kill -9``-ed at any
moment; neither may cost the tracker an event, and neither may make ``emit`` wait.  So the
spool inbox (:mod:`evtrain.bus.spool`) hands every event to its ``JournalWriter`` thread,
which appends it here in batches — never on the emit thread — and the consumer reads it back
only when memory could not hold it (a full window, a failing or stalled subscriber, or an
earlier process's backlog).

Layout of one subscriber's folder (``<journal_dir>/<name>[-rank<N>]/``)::

    0000000000000001.seg   segments, named by their first sequence number; each starts with
    0000000000004711.seg   MAGIC (the line ``evtrain-journal 2``: the format and its version),
                           then records: HEADER (payload length, crc32, seq, emit time) + the
                           payload as JSON of plain values (:mod:`evtrain.bus.records`)
    ack                    the last seq delivered, as text
    lock                   held (flock) by the bus that has the journal open

The crc32 covers the seq, the time and the payload, so a torn or garbled record — the tail a
crash cut short — is recognised and ignored, as is everything after it in its segment.  Writes
reach the OS after every batch (``kill -9`` loses at most the batch being written, a few tens
of milliseconds) and the disk every ``fsync_s`` (a power cut loses at most that), when the
``ack`` is persisted too and segments holding only acknowledged records are deleted.  Beyond
``max_bytes`` the oldest segments are deleted, acknowledged or not, with one warning, each time
a segment is started: the folder never holds more than ``max_bytes`` plus the segment being
written (``max_bytes // 8``, and the one record that crosses it).  The consumer counts what it
then misses as dropped, at the latest when it closes.

A journal may come from elsewhere (a copied run folder, a crafted file), so reading one never
runs code: a segment that does not start with MAGIC — another version, evtrain's old pickle
format (``EVTJRNL1``), or no journal at all — is refused whole with
:class:`~evtrain.errors.JournalFormatError` (and left on disk: it may be someone's data), and a
record names its payload's class only among those this process registered.  The crc guards
against torn writes, not against a crafted file; the records' decoding is what is safe.

The segment files themselves — the record format, reading records back — are
:mod:`evtrain.bus.segments`; this module is the folder: its lock, its bound, its ``ack``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from evtrain.atomic import atomic_write
from evtrain.bus.records import MAGIC, check_magic, encode
from evtrain.bus.segments import (
    ACK,
    HEADER,
    SEGMENT,
    Record,
    Segment,
    SegmentReader,
    read_ack,
    record_header,
    record_seqs,
    segments_of,
    valid_end,
)
from evtrain.errors import JournalFormatError, JournalInUseError

__all__ = [
    "HEADER",
    "Entry",
    "Journal",
    "check_journals",
    "journal_backlog",
    "journal_path",
    "logger",
    "safe_name",
]

logger = logging.getLogger("evtrain.bus")

LOCK = "lock"
MAX_SEGMENT_BYTES = 64 << 20
CAUGHT_UP_SEGMENT_BYTES = 1 << 20
"""A segment this big whose every record is acknowledged is closed for a new one, so a healthy
run's journal (which still records everything ahead) stays about this small."""

Entry = tuple[int, float, Any]
"""``(seq, emit time, payload)``: what the spool inbox queues and the journal stores."""


def safe_name(subscriber: str) -> str:
    """A subscriber's bus name as a file name: anything but letters, digits, ``.-_`` is ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", subscriber).lstrip(".") or "_"


def journal_path(journal_dir: str | os.PathLike[str], subscriber: str, rank: int = 0) -> Path:
    """The folder of ``subscriber``'s journal under ``journal_dir`` (``-rank<N>`` off rank 0)."""
    suffix = f"-rank{rank}" if rank else ""
    return Path(journal_dir) / f"{safe_name(subscriber)}{suffix}"


def journal_backlog(journal_dir: str | os.PathLike[str], subscriber: str, rank: int = 0) -> int:
    """Events ``subscriber``'s journal still holds undelivered (recorded after its ``ack``),
    counted without connecting it, e.g. to decide whether a run needs syncing.  0 when there
    is no journal.

    :raises JournalFormatError: a segment of it is not one this evtrain reads.
    """
    folder = journal_path(journal_dir, subscriber, rank)
    if not folder.is_dir():
        return 0
    ack = read_ack(folder)
    count = 0
    for segment in segments_of(folder):
        count += sum(1 for seq in record_seqs(segment.path) if seq > ack)
    return count


def check_journals(journal_dir: str | os.PathLike[str]) -> None:
    """Check the first line of every segment of every journal under ``journal_dir``, those of
    subscribers not connected here too (``evtrain sync`` checks a run folder's whole journal
    before it loads anything).

    :raises JournalFormatError: a segment is not one this evtrain reads.
    """
    root = Path(journal_dir)
    if not root.is_dir():
        return
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for segment in segments_of(folder):
            with open(segment.path, "rb") as file:
                check_magic(segment.path, file)


class Journal:
    """One subscriber's journal folder, open for appending (by the writer thread) and reading
    (by the consumer).  Opening it takes its lock, drops a torn tail and learns where the
    backlog starts (:attr:`acked` + 1) and ends (:attr:`next_seq` - 1).

    :raises JournalInUseError: another bus, here or in another process, has it open.
    :raises JournalFormatError: a segment of it is not one this evtrain reads (checked before
        anything is truncated or deleted).
    """

    def __init__(
        self, folder: Path, *, label: str, max_bytes: int, fsync_s: float, temporary: bool
    ) -> None:
        self.folder = folder
        self.label = label
        """The subscriber, for log lines."""
        self.max_bytes = max_bytes
        self.fsync_s = fsync_s
        self.temporary = temporary
        """In a temporary folder (a bus without ``journal_dir``): lossless in-process only."""
        self._segment_bytes = max(1, min(MAX_SEGMENT_BYTES, max_bytes // 8))
        folder.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(folder / LOCK, "a+b")  # noqa: SIM115 - held while open
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise JournalInUseError(
                f"the journal {str(folder)!r} of subscriber {label!r} is open in another bus "
                "(in this or another process); close that bus first, or give this subscriber "
                "another name"
            ) from None
        self.acked = read_ack(folder)
        """The ack last persisted: every seq up to it was delivered."""
        self._segments = segments_of(folder)
        try:
            for segment in self._segments:
                with open(segment.path, "rb") as file:
                    check_magic(segment.path, file)
        except JournalFormatError:
            self._lock_file.close()
            raise
        last = self._drop_torn_tail()
        self.next_seq = max(last, self.acked) + 1
        """The seq the next event offered gets."""
        self.floor = self._segments[0].first if self._segments else self.next_seq
        """Seqs below it are no longer on disk (acknowledged, or dropped past ``max_bytes``)."""
        self._file: BinaryIO | None = None
        self._last = self.next_seq - 1
        """The last seq appended."""
        self._caught_up = False
        """Everything appended is acknowledged: the next append starts a new segment."""
        self._dirty = False
        self._warned = False
        self._guard = threading.Lock()
        """Guards ``_segments``: the writer adds and deletes, the consumer reads."""
        self._reader = SegmentReader(self._snapshot)

    def _drop_torn_tail(self) -> int:
        """Truncate the last segment after its last valid record; return the last valid seq."""
        while self._segments:
            segment = self._segments[-1]
            last, end = valid_end(segment.path)
            if last is not None:
                if end < segment.size:
                    logger.warning(
                        "Journal of subscriber %r: ignoring a torn record at the end of %s "
                        "(%d bytes; the process writing it stopped mid-record).",
                        self.label,
                        segment.path,
                        segment.size - end,
                    )
                    os.truncate(segment.path, end)
                    segment.size = end
                return last
            segment.path.unlink()
            self._segments.pop()
        return 0

    @property
    def size(self) -> int:
        """Bytes of the segments on disk."""
        return sum(s.size for s in self._segments)

    # -- the writer thread's side --------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Append ``entries`` (in seq order) and hand them to the OS; an event that cannot be
        encoded is logged and left out (the consumer counts the gap as dropped)."""
        for seq, t, payload in entries:
            try:
                data = encode(payload)
            except Exception as error:  # e.g. a user's payload holding a lock
                logger.error(
                    "Journal of subscriber %r cannot record event %d (%s: %s); it is delivered "
                    "from memory if it can be, else counted as dropped.",
                    self.label,
                    seq,
                    type(error).__name__,
                    error,
                )
                continue
            file = self._file
            if file is None or self._caught_up or self._segments[-1].size >= self._segment_bytes:
                file = self._rotate(seq)
                self._caught_up = False
                # Per segment, not per batch: a burst between two batches would otherwise
                # overshoot max_bytes by the whole burst.
                self._bound()
            head = record_header(seq, t, data)
            file.write(head)
            file.write(data)
            self._segments[-1].size += len(head) + len(data)
            self._last = seq
        if self._file is not None:
            self._file.flush()
            self._dirty = True
        self._bound()

    def _rotate(self, first: int) -> BinaryIO:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        path = self.folder / f"{first:016d}{SEGMENT}"
        file = open(path, "wb")  # noqa: SIM115 - kept open until the next rotation
        file.write(MAGIC)
        with self._guard:
            self._segments.append(Segment(first, path, len(MAGIC)))
        self._file = file
        return file

    def _bound(self) -> None:
        """Delete the oldest segments while the journal is over ``max_bytes``."""
        while len(self._segments) > 1 and self.size > self.max_bytes:
            with self._guard:
                oldest = self._segments.pop(0)
                self.floor = self._segments[0].first
            oldest.path.unlink()
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Journal of subscriber %r is over journal_max_bytes (%d bytes): its oldest "
                    "undelivered events are dropped (counted in bus metrics as dropped). Is the "
                    "tracker reachable? Raise bus.journal_max_bytes to keep more.",
                    self.label,
                    self.max_bytes,
                )

    def sync(self, acked: int) -> None:
        """Make what was appended durable, persist ``acked``, delete acknowledged segments."""
        if self._dirty and self._file is not None:
            os.fsync(self._file.fileno())
            self._dirty = False
        if acked != self.acked:
            atomic_write(self.folder / ACK, lambda f: f.write(f"{acked}\n".encode()))
            self.acked = acked
        if acked >= self._last and self._segments:
            self._caught_up = self._segments[-1].size >= CAUGHT_UP_SEGMENT_BYTES
        while len(self._segments) > 1 and self._segments[1].first - 1 <= acked:
            with self._guard:
                done = self._segments.pop(0)
                self.floor = max(self.floor, self._segments[0].first)
            done.path.unlink()

    def close(self, acked: int, last: int) -> int:
        """Sync, close, and return how many events (up to seq ``last``) stay undelivered on
        disk; a journal left with none is removed, folder and all.  A full disk leaves the
        acknowledgement persisted last: what was delivered since is delivered again (at least
        once), and the journal still closes."""
        try:
            self.sync(acked)
        except OSError as error:
            logger.error(
                "Journal of subscriber %r: cannot record its acknowledgement (%s); the events "
                "delivered since the last one recorded stay in it and are delivered again.",
                self.label,
                error,
            )
            acked = self.acked
        for file in (self._file, self._reader.detach()):
            if file is not None:
                try:
                    file.close()
                except OSError as error:  # a full disk: the file is closed all the same
                    logger.error("Journal of subscriber %r: %s", self.label, error)
        self._file = None
        left = max(0, last - max(acked, self.floor - 1))
        if left == 0:
            for segment in self._segments:
                segment.path.unlink()
            for name in (ACK, LOCK):
                with contextlib.suppress(FileNotFoundError):
                    (self.folder / name).unlink()
            with contextlib.suppress(OSError):
                self.folder.rmdir()
        self._lock_file.close()
        return left

    # -- the consumer's side --------------------------------------------------------------------

    def read(self, first: int, end: int) -> Iterator[Record]:
        """``(seq, emit time, encoded payload)`` of the records with ``first <= seq < end`` that
        are on disk, in order.  Calls must ask for increasing seqs (the consumer's cursor)."""
        return self._reader.read(first, end)

    def _snapshot(self) -> list[Segment]:
        with self._guard:
            return list(self._segments)
