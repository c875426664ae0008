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
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from evtrain.atomic import atomic_write
from evtrain.bus.records import MAGIC, check_magic, encode
from evtrain.errors import JournalFormatError, JournalInUseError

logger = logging.getLogger("evtrain.bus")

HEADER = struct.Struct("<IIQd")
"""Payload length, crc32 of everything after it, sequence number, emit time (perf_counter)."""
CRC_FROM = 8
"""The crc covers the header from this offset (seq, time) and the payload."""
SEGMENT = ".seg"
ACK = "ack"
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
    ack = _read_ack(folder)
    count = 0
    for segment in _segments(folder):
        count += sum(1 for seq in _records(segment.path) if seq > ack)
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
        for segment in _segments(folder):
            with open(segment.path, "rb") as file:
                check_magic(segment.path, file)


@attrs.define
class _Segment:
    first: int
    """Seq of its first record (its name)."""
    path: Path
    size: int


def _segments(folder: Path) -> list[_Segment]:
    found = []
    for path in folder.glob(f"*{SEGMENT}"):
        with contextlib.suppress(ValueError):
            found.append(_Segment(int(path.stem), path, path.stat().st_size))
    return sorted(found, key=lambda s: s.first)


def _read_ack(folder: Path) -> int:
    try:
        return int((folder / ACK).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _read_record(file: BinaryIO) -> tuple[int, float, bytes] | None:
    """``(seq, emit time, encoded payload)`` of the next valid record at ``file``'s position, or
    ``None``: the end, or a torn or garbled record (the position is then unspecified)."""
    head = file.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    length, crc, seq, t = HEADER.unpack(head)
    data = file.read(length)
    if len(data) < length or zlib.crc32(data, zlib.crc32(head[CRC_FROM:])) != crc:
        return None
    return seq, t, data


def _records(path: Path) -> Iterator[int]:
    """The seq of each valid record of a segment, in order.

    :raises JournalFormatError: it is not a journal segment this evtrain reads.
    """
    with open(path, "rb") as file:
        if not check_magic(path, file):
            return
        while (record := _read_record(file)) is not None:
            yield record[0]


def _valid_end(path: Path) -> tuple[int | None, int]:
    """Last valid seq of a segment and the offset where its valid records end."""
    last, end = None, 0
    with open(path, "rb") as file:
        if not check_magic(path, file):
            return None, 0
        end = file.tell()
        while (record := _read_record(file)) is not None:
            last, end = record[0], file.tell()
    return last, end


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
        self.acked = _read_ack(folder)
        """The ack last persisted: every seq up to it was delivered."""
        self._segments = _segments(folder)
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
        self._reader: tuple[_Segment, BinaryIO] | None = None

    def _drop_torn_tail(self) -> int:
        """Truncate the last segment after its last valid record; return the last valid seq."""
        while self._segments:
            segment = self._segments[-1]
            last, end = _valid_end(segment.path)
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
            head = bytearray(HEADER.pack(len(data), 0, seq, t))
            struct.pack_into("<I", head, 4, zlib.crc32(data, zlib.crc32(head[CRC_FROM:])))
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
            self._segments.append(_Segment(first, path, len(MAGIC)))
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
        for file in (self._file, self._reader[1] if self._reader else None):
            if file is not None:
                try:
                    file.close()
                except OSError as error:  # a full disk: the file is closed all the same
                    logger.error("Journal of subscriber %r: %s", self.label, error)
        self._file = self._reader = None
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

    def read(self, first: int, end: int) -> Iterator[tuple[int, float, bytes]]:
        """``(seq, emit time, encoded payload)`` of the records with ``first <= seq < end`` that
        are on disk, in order.  Calls must ask for increasing seqs (the consumer's cursor)."""
        seq = first
        while seq < end:
            located = self._locate(seq)
            if located is None:
                return
            segment, file = located
            while seq < end:
                start = file.tell()
                record = _read_record(file)
                if record is None:  # the end of what is written, or a torn record
                    file.seek(start)
                    break
                if record[0] >= end:
                    file.seek(start)
                    return
                if record[0] >= seq:
                    seq = record[0] + 1
                    yield record
            with self._guard:
                later = [s for s in self._segments if s.first > segment.first]
            if not later:
                return
            seq = max(seq, later[0].first)
            self._close_reader()

    def _locate(self, seq: int) -> tuple[_Segment, BinaryIO] | None:
        """The reader positioned in the segment holding ``seq`` (the first one, if ``seq``
        is older than anything on disk)."""
        with self._guard:
            segments = list(self._segments)
        if not segments:
            return None
        holding = [s for s in segments if s.first <= seq] or segments[:1]
        segment = holding[-1]
        if self._reader is not None and self._reader[0].first == segment.first:
            return self._reader
        self._close_reader()
        try:
            file = open(segment.path, "rb")  # noqa: SIM115 - kept for the next read
        except FileNotFoundError:  # dropped past max_bytes meanwhile
            return None
        if file.read(len(MAGIC)) != MAGIC:
            file.seek(0, os.SEEK_END)
        self._reader = (segment, file)
        return self._reader

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader[1].close()
            self._reader = None
