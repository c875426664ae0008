"""A journal's segment files: the record format, and reading records back.

A segment (``<first seq>.seg``) starts with MAGIC (:mod:`evtrain.bus.records`), then holds
records: :data:`HEADER` (payload length, crc32, seq, emit time) and the encoded payload.  The
crc32 covers the seq, the time and the payload, so a torn or garbled record is recognised and
ends what is read of its segment.  What a folder of segments means — the bound, the ``ack``,
the lock — is :mod:`evtrain.bus.journal`'s.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import attrs

from evtrain.bus.records import MAGIC, check_magic

HEADER = struct.Struct("<IIQd")
"""Payload length, crc32 of everything after it, sequence number, emit time (perf_counter)."""
CRC_FROM = 8
"""The crc covers the header from this offset (seq, time) and the payload."""
SEGMENT = ".seg"
ACK = "ack"

Record = tuple[int, float, bytes]
"""``(seq, emit time, encoded payload)``: one record as read back."""


@attrs.define
class Segment:
    first: int
    """Seq of its first record (its name)."""
    path: Path
    size: int


def segments_of(folder: Path) -> list[Segment]:
    """The segments in ``folder``, oldest first."""
    found = []
    for path in folder.glob(f"*{SEGMENT}"):
        with contextlib.suppress(ValueError):
            found.append(Segment(int(path.stem), path, path.stat().st_size))
    return sorted(found, key=lambda s: s.first)


def read_ack(folder: Path) -> int:
    """The last seq ``folder``'s journal recorded as delivered; 0 when none is."""
    try:
        return int((folder / ACK).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def record_header(seq: int, t: float, data: bytes) -> bytes:
    """The header that goes before the encoded payload ``data`` of record ``seq``."""
    head = bytearray(HEADER.pack(len(data), 0, seq, t))
    struct.pack_into("<I", head, 4, zlib.crc32(data, zlib.crc32(head[CRC_FROM:])))
    return bytes(head)


def read_record(file: BinaryIO) -> Record | None:
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


def record_seqs(path: Path) -> Iterator[int]:
    """The seq of each valid record of a segment, in order.

    :raises JournalFormatError: it is not a journal segment this evtrain reads.
    """
    with open(path, "rb") as file:
        if not check_magic(path, file):
            return
        while (record := read_record(file)) is not None:
            yield record[0]


def valid_end(path: Path) -> tuple[int | None, int]:
    """Last valid seq of a segment and the offset where its valid records end."""
    last, end = None, 0
    with open(path, "rb") as file:
        if not check_magic(path, file):
            return None, 0
        end = file.tell()
        while (record := read_record(file)) is not None:
            last, end = record[0], file.tell()
    return last, end


class SegmentReader:
    """The consumer's cursor over a journal's segments while the writer thread appends to the
    newest and deletes the oldest: one segment open at a time, kept open between reads.

    :param segments: the journal's segments now, oldest first (a copy taken under ``guard``).
    """

    def __init__(self, segments: Callable[[], list[Segment]]) -> None:
        self._segments = segments
        self._open: tuple[Segment, BinaryIO] | None = None

    def read(self, first: int, end: int) -> Iterator[Record]:
        """The records with ``first <= seq < end`` that are on disk, in order.  Calls must ask
        for increasing seqs (the consumer's cursor)."""
        seq = first
        while seq < end:
            located = self._locate(seq)
            if located is None:
                return
            segment, file = located
            while seq < end:
                start = file.tell()
                record = read_record(file)
                if record is None:  # the end of what is written, or a torn record
                    file.seek(start)
                    break
                if record[0] >= end:
                    file.seek(start)
                    return
                if record[0] >= seq:
                    seq = record[0] + 1
                    yield record
            later = [s for s in self._segments() if s.first > segment.first]
            if not later:
                return
            seq = max(seq, later[0].first)
            self.close()

    def _locate(self, seq: int) -> tuple[Segment, BinaryIO] | None:
        """The reader positioned in the segment holding ``seq`` (the first one, if ``seq``
        is older than anything on disk)."""
        segments = self._segments()
        if not segments:
            return None
        holding = [s for s in segments if s.first <= seq] or segments[:1]
        segment = holding[-1]
        if self._open is not None and self._open[0].first == segment.first:
            return self._open
        self.close()
        try:
            file = open(segment.path, "rb")  # noqa: SIM115 - kept for the next read
        except FileNotFoundError:  # dropped past max_bytes meanwhile
            return None
        if file.read(len(MAGIC)) != MAGIC:
            file.seek(0, os.SEEK_END)
        self._open = (segment, file)
        return self._open

    def detach(self) -> BinaryIO | None:
        """The open segment's file, for the caller to close; the reader forgets it."""
        file = self._open[1] if self._open is not None else None
        self._open = None
        return file

    def close(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None
