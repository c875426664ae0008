"""TensorBoard event files, written fast: hand-encoded scalar events, C crc32c, 64 KiB writes.

An event file is a TFRecord file of serialised ``tensorboard.Event`` protobufs.  Each record is
framed as::

    uint64 LE  length
    uint32 LE  masked crc32c of those 8 length bytes
    bytes      data
    uint32 LE  masked crc32c of data

where ``masked(crc) = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32``.

Where the time goes per scalar record with tensorboard's own writer: building the protobuf,
its pure-Python crc32c and reopening the file per record, several microseconds each
(``benchmarks/bench_writers.py`` measures this writer against torch's ``SummaryWriter``,
which uses that path; figures in ``docs/benchmark.md``).
Here a scalar event is wire-encoded by hand from per-tag bytes computed once, the
checksum is google-crc32c's C code, records collect in memory and reach the file in chunks of at
least :data:`CHUNK_BYTES` through an unbuffered file kept open, so a full event of ten scalars
costs a few microseconds.  Rare records (histograms, text) may be built with protobuf objects
and framed here too.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import logging
import os
import socket
import struct
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from evtrain.atomic import DISK_FULL
from evtrain.checksums import crc32c as _crc32c
from evtrain.checksums import masked_crc32c

logger = logging.getLogger(__name__)

FILE_VERSION = "brain.Event:2"
"""The ``file_version`` of the first event; with it TensorBoard detects restarts from session
logs instead of purging data whenever a step goes backwards."""
CHUNK_BYTES = 64 * 1024
"""Buffered records are written once at least this many bytes are waiting."""
FILE_PREFIX = "events.out.tfevents."

_U64 = struct.Struct("<Q").pack
_U32 = struct.Struct("<I").pack
_TAGGED_DOUBLE = struct.Struct("<Bd").pack
_F32 = struct.Struct("<f").pack
_F32_MAX = 3.4028234663852886e38
_file_numbers = itertools.count()
# Field 2 (step) for steps below 128; step 0 is left out, as protobuf leaves out defaults.
_SMALL_STEPS = (b"", *(bytes((0x10, step)) for step in range(1, 0x80)))


def _step_field(step: int) -> bytes:
    """Field 2 (``step``) of an Event: key byte and varint, unrolled for steps below 2**28
    (every step a run reaches in practice) instead of :func:`encode_varint`'s loop."""
    if step < 0x80:
        return _SMALL_STEPS[step] if step >= 0 else b"\x10" + encode_varint(step)
    if step < 0x4000:
        return bytes((0x10, step & 0x7F | 0x80, step >> 7))
    if step < 0x200000:
        return bytes((0x10, step & 0x7F | 0x80, step >> 7 & 0x7F | 0x80, step >> 14))
    if step < 0x10000000:
        return bytes(
            (
                0x10,
                step & 0x7F | 0x80,
                step >> 7 & 0x7F | 0x80,
                step >> 14 & 0x7F | 0x80,
                step >> 21,
            )
        )
    return b"\x10" + encode_varint(step)


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative values as 64-bit two's complement (ten bytes)."""
    value &= 0xFFFFFFFFFFFFFFFF
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_HEADERS: dict[int, bytes] = {}
"""Framed headers (length and its checksum) of the record sizes met so far, up to
:data:`_CACHED_SIZES` bytes: a run's scalar events come in a few sizes only."""
_CACHED_SIZES = 4096


def _header(size: int) -> bytes:
    """A record's first 12 bytes: ``size`` and its masked checksum (kept in :data:`_HEADERS`
    for sizes up to :data:`_CACHED_SIZES`)."""
    header = _HEADERS.get(size)
    if header is None:
        length = _U64(size)
        header = length + _U32(masked_crc32c(length))
        if size <= _CACHED_SIZES:
            _HEADERS[size] = header
    return header


def frame_record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord (length, its checksum, data, data checksum)."""
    return _header(len(data)) + data + _U32(masked_crc32c(data))


def encode_file_version_event(wall_time: float) -> bytes:
    """The Event every event file starts with: ``wall_time`` (field 1), ``file_version`` (3)."""
    version = FILE_VERSION.encode()
    return _TAGGED_DOUBLE(0x09, wall_time) + b"\x1a" + encode_varint(len(version)) + version


@functools.lru_cache(maxsize=8192)
def _value_prefix(tag: str) -> bytes:
    """Everything of ``Summary.Value{tag=1, simple_value=2}`` (inside its Summary field 1)
    before the four float bytes: a Value's length depends only on its tag."""
    name = tag.encode()
    name_field = b"\x0a" + encode_varint(len(name)) + name
    value_len = len(name_field) + 5  # + simple_value's key byte and float32
    return b"\x0a" + encode_varint(value_len) + name_field + b"\x15"


def _to_float32_range(value: float) -> float:
    # struct's "f" refuses finite doubles beyond float32; TensorFlow rounds those to ±inf.
    value = float(value)
    if value > _F32_MAX:
        return float("inf")
    if value < -_F32_MAX:
        return float("-inf")
    return value


class ScalarEventEncoder:
    """Encodes one Event holding one Summary with a simple value per tag, for a fixed tag tuple.

    Wire layout, fields in number order so the bytes equal protobuf's own: ``wall_time`` double
    (1), ``step`` varint (2, left out when 0), ``summary`` (5) holding one
    ``Summary.Value{tag, simple_value}`` per tag.  Every byte except the wall time, the step and
    the floats is computed once, in ``__init__``.

    :param tags: the scalar tags, in the order values are given to :meth:`encode`.
    """

    __slots__ = ("_args", "_pack", "_prefixes", "_summary_key", "tags")

    def __init__(self, tags: Sequence[str]) -> None:
        if not tags:
            raise ValueError("ScalarEventEncoder needs at least one tag")
        self.tags = tuple(tags)
        self._prefixes = tuple(_value_prefix(tag) for tag in self.tags)
        summary_len = sum(len(prefix) + 4 for prefix in self._prefixes)
        self._summary_key = b"\x2a" + encode_varint(summary_len)
        layout = "".join(f"{len(prefix)}sf" for prefix in self._prefixes)
        self._pack = struct.Struct("<" + layout).pack
        self._args = [item for prefix in self._prefixes for item in (prefix, 0.0)]
        """The pack's arguments, prefixes in place: each encode copies it and slices the
        values in (one C-level copy and assignment, no Python loop)."""

    def encode(self, wall_time: float, step: int, values: Sequence[float]) -> bytes:
        """One serialised Event; values beyond float32 range become ±inf like TensorFlow's.

        :raises ValueError: ``values`` does not have one value per tag.
        """
        if len(values) != len(self.tags):
            raise ValueError(f"expected {len(self.tags)} values, got {len(values)}")
        step_field = _step_field(int(step))
        args = self._args.copy()
        args[1::2] = values
        try:
            summary = self._pack(*args)
        except (OverflowError, struct.error):
            args[1::2] = [_to_float32_range(v) for v in values]
            summary = self._pack(*args)
        return _TAGGED_DOUBLE(0x09, wall_time) + step_field + self._summary_key + summary


def event_file_name(wall_time: float | None = None, directory: Path | None = None) -> str:
    """A name like TensorBoard's: ``events.out.tfevents.<time>.<host>.<pid>.<n>``.

    TensorBoard reads a folder's files in name order, and a resumed run's restart marker
    (``SessionLog.START``) purges what the files read before it hold from its step on: so a
    new file must sort after every file already in ``directory``.  ``<time>`` is therefore
    at least one second past the newest file's there (a run killed and resumed within the
    same second, from a process with a smaller pid), and ``n``, which counts the files this
    process opened, is zero-padded (``…9`` would otherwise sort after ``…10``).
    """
    stamp = int(time.time() if wall_time is None else wall_time)
    if directory is not None:
        for existing in directory.glob(FILE_PREFIX + "*"):
            stamp_text = existing.name[len(FILE_PREFIX) :].split(".", 1)[0]
            if stamp_text.isdigit():
                stamp = max(stamp, int(stamp_text) + 1)
    pid = os.getpid()
    return f"{FILE_PREFIX}{stamp:010d}.{socket.gethostname()}.{pid}.{next(_file_numbers):06d}"


def _write_all(raw: IO[bytes], data: bytearray) -> None:
    """Write and empty ``data`` (a raw file may accept fewer bytes than offered)."""
    offset = 0
    try:
        with memoryview(data) as view:
            while offset < len(view):
                offset += raw.write(view[offset:]) or 0
    finally:
        # What reached the file leaves the buffer, also when a write failed part way (a full
        # disk): the next try appends the rest, and the records stay whole and in order.
        del data[:offset]


def _close_file(raw: IO[bytes], buffer: bytearray, lock: threading.Lock) -> None:
    with lock:
        try:
            if buffer:
                _write_all(raw, buffer)
        finally:
            raw.close()


class EventFileWriter:
    """One new event file in ``directory``, open until :meth:`close`.

    :meth:`write_event` frames a serialised Event into a memory buffer, and writes the buffer to
    the file once it holds :data:`CHUNK_BYTES`; :meth:`flush` writes whatever is buffered.
    Methods are thread-safe (one lock), so an owner may flush from a timer thread while another
    thread writes.  :meth:`flush` hands data to the operating system; :meth:`sync` also makes
    it durable (``fsync``).  A writer dropped without ``close()`` is closed (buffer
    written) when garbage-collected; at interpreter exit every open writer is flushed.

    :param directory: created if missing.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        now = time.time()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / event_file_name(now, directory)
        """The file being written."""
        # Unbuffered: our own buffer decides when bytes move, so there is no second copy.
        raw: IO[bytes] = open(self.path, "xb", buffering=0)  # noqa: SIM115 - closed by finalizer
        self._raw = raw
        self._buffer = bytearray(frame_record(encode_file_version_event(now)))
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_file, raw, self._buffer, self._lock)
        # At exit only flush (below): a bus draining after our hook may still write events.
        self._finalizer.atexit = False
        _open_writers.add(self)

    @property
    def closed(self) -> bool:
        """``close()`` was called (or the writer was collected)."""
        return not self._finalizer.alive

    @property
    def pending_bytes(self) -> int:
        """Bytes buffered and not yet handed to the operating system."""
        return len(self._buffer)

    def write_event(self, event: bytes) -> None:
        """Append one serialised Event as a TFRecord.

        :raises ValueError: the writer is closed.
        """
        size = len(event)
        header = _HEADERS.get(size) or _header(size)  # the kept one without a call
        # masked_crc32c, written out: a Python call fewer per record
        crc = _crc32c(event)
        trailer = _U32((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
        with self._lock:
            if self._raw.closed:
                raise ValueError(f"event file {self.path} is closed")
            buffer = self._buffer
            buffer += header
            buffer += event
            buffer += trailer
            if len(buffer) >= CHUNK_BYTES:
                try:
                    _write_all(self._raw, buffer)
                except OSError as error:
                    if error.errno not in DISK_FULL:
                        raise
                    # A full disk: the records wait here, in order, for the next write
                    # (flush() raises meanwhile); raising would make the caller retry an
                    # event that is already buffered.

    def flush(self) -> bool:
        """Hand every buffered record to the operating system.

        :returns: whether anything was written.
        :raises OSError: naming the file (a full disk: the records stay buffered).
        """
        with self._lock:
            if not self._buffer or self._raw.closed:
                return False
            with self._naming():
                _write_all(self._raw, self._buffer)
            return True

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        try:
            yield
        except OSError as error:
            if error.filename is None:
                error.filename = str(self.path)
            raise

    def sync(self) -> None:
        """:meth:`flush`, then make the file durable (``fsync``)."""
        with self._lock:
            if self._raw.closed:
                return
            with self._naming():
                if self._buffer:
                    _write_all(self._raw, self._buffer)
                os.fsync(self._raw.fileno())

    def close(self) -> None:
        """Write what is buffered and close the file.  Idempotent."""
        _open_writers.discard(self)
        self._finalizer()

    def __repr__(self) -> str:
        return f"<EventFileWriter {str(self.path)!r} closed={self.closed}>"


_open_writers: weakref.WeakSet[EventFileWriter] = weakref.WeakSet()


@atexit.register
def _flush_open_writers() -> None:
    # Flush, never close: an unclosed bus may drain after this hook and still write events;
    # its close() writes those.  In the other order the files are closed and this skips them.
    for writer in list(_open_writers):
        try:
            writer.flush()
        except OSError:
            logger.exception("Flushing %s at interpreter exit failed", writer.path)
