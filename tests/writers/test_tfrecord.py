"""The TFRecord layer: checksums, varints, hand-encoded events, buffered event files."""

from __future__ import annotations

import gc
import math
import struct
import time
from pathlib import Path

import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_masked_crc

from evtrain.checksums import masked_crc32c
from evtrain_writers.tfrecord import (
    CHUNK_BYTES,
    FILE_VERSION,
    EventFileWriter,
    ScalarEventEncoder,
    encode_file_version_event,
    encode_varint,
    event_file_name,
    frame_record,
)


def read_records(path: Path) -> list[bytes]:
    """Split a TFRecord file, checking both checksums of every record."""
    data = path.read_bytes()
    records = []
    offset = 0
    while offset < len(data):
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        assert header_crc == tb_masked_crc(header)
        record = data[offset + 12 : offset + 12 + length]
        (data_crc,) = struct.unpack("<I", data[offset + 12 + length : offset + 16 + length])
        assert data_crc == tb_masked_crc(record)
        records.append(record)
        offset += 16 + length
    return records


def parse(data: bytes) -> Event:
    event = Event()
    event.ParseFromString(data)
    return event


@pytest.mark.parametrize("data", [b"", b"abc", bytes(range(256)) * 300])
def test_masked_crc32c_matches_tensorboard(data: bytes) -> None:
    assert masked_crc32c(data) == tb_masked_crc(data)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**63 - 1, b"\xff" * 8 + b"\x7f"),
        (-1, b"\xff" * 9 + b"\x01"),
    ],
)
def test_encode_varint(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded


def test_frame_record_layout() -> None:
    framed = frame_record(b"hello")
    assert framed[:8] == struct.pack("<Q", 5)
    assert framed[8:12] == struct.pack("<I", tb_masked_crc(framed[:8]))
    assert framed[12:17] == b"hello"
    assert framed[17:] == struct.pack("<I", tb_masked_crc(b"hello"))


def test_file_version_event_parses() -> None:
    event = parse(encode_file_version_event(1234.5))
    assert event.wall_time == 1234.5
    assert event.file_version == FILE_VERSION
    assert event.step == 0


@pytest.mark.parametrize(
    "step",
    # each varint length's first and last value (the step field is unrolled up to 2**28)
    [0, 1, 127, 128, 2**14 - 1, 2**14, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 10**12, -5],
)
def test_scalar_event_equals_protobuf_encoding(step: int) -> None:
    tags = ["Environment/Cumulative Reward", "Policy/Learning Rate", "é" * 70]
    values = [1.5, -0.25, 3.0]
    encoded = ScalarEventEncoder(tags).encode(1700000000.125, step, values)
    expected = Event(
        wall_time=1700000000.125,
        step=step,
        summary=Summary(
            value=[Summary.Value(tag=t, simple_value=v) for t, v in zip(tags, values, strict=True)]
        ),
    )
    assert parse(encoded) == expected
    # The same bytes protobuf writes (it puts fields in number order, as we do).
    assert encoded == expected.SerializeToString()


def test_scalar_event_float32_range() -> None:
    event = parse(
        ScalarEventEncoder(["a", "b", "c", "d"]).encode(0.0, 1, [1e39, -1e300, 0.1, math.nan])
    )
    values = [v.simple_value for v in event.summary.value]
    assert values[:2] == [math.inf, -math.inf]
    assert values[2] == struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert math.isnan(values[3])


def test_scalar_encoder_checks_its_input() -> None:
    with pytest.raises(ValueError, match="at least one tag"):
        ScalarEventEncoder([])
    with pytest.raises(ValueError, match="expected 2 values, got 1"):
        ScalarEventEncoder(["a", "b"]).encode(0.0, 0, [1.0])


def test_event_file_name_is_tensorboard_like() -> None:
    first, second = event_file_name(1700000000.9), event_file_name(1700000000.9)
    assert first.startswith("events.out.tfevents.1700000000.")
    assert first != second  # a per-process counter tells same-second files apart


def test_a_new_event_file_sorts_after_every_file_in_its_folder(tmp_path: Path) -> None:
    # TensorBoard reads files in name order; a resumed run's restart marker purges what was
    # read before it, so a file that sorted first would purge the resumed run's own points.
    names = [EventFileWriter(tmp_path).path.name for _ in range(12)]  # past n = 9 -> 10
    later = tmp_path / f"events.out.tfevents.{int(time.time()) + 5:010d}.otherhost.1.000000"
    later.touch()  # a file of another process whose clock or pid would sort it after ours
    names.append(EventFileWriter(tmp_path).path.name)
    assert names == sorted(names)
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == names[-1]


def test_event_file_buffers_until_flush(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path / "new")
    event = ScalarEventEncoder(["x"]).encode(1.0, 3, [2.0])
    writer.write_event(event)
    assert writer.path.parent == tmp_path / "new"
    assert writer.path.read_bytes() == b""  # nothing is written per event
    assert writer.flush() is True
    assert writer.flush() is False  # nothing left
    records = read_records(writer.path)
    assert parse(records[0]).file_version == FILE_VERSION
    assert records[1:] == [event]
    writer.close()


def test_records_of_every_size_are_framed_with_both_checksums(tmp_path: Path) -> None:
    # Headers of sizes up to 4096 bytes are kept once made; each size twice, so that the
    # second record of a size is framed with the kept header.
    writer = EventFileWriter(tmp_path)
    sizes = [0, 1, 127, 128, 4095, 4096, 4097, 70_000]
    events = [bytes([size % 251]) * size for size in sizes for _ in range(2)]
    for event in events:
        writer.write_event(event)
    writer.close()
    assert read_records(writer.path)[1:] == events


def test_event_file_writes_full_chunks(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    event = ScalarEventEncoder(["x" * 1000]).encode(1.0, 1, [1.0])
    while writer.path.stat().st_size == 0:
        writer.write_event(event)
    assert writer.path.stat().st_size >= CHUNK_BYTES
    assert writer.pending_bytes == 0
    writer.close()


def test_event_file_close_is_idempotent_and_final(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    writer.write_event(ScalarEventEncoder(["x"]).encode(1.0, 1, [1.0]))
    writer.close()
    writer.close()
    assert writer.closed
    assert len(read_records(writer.path)) == 2
    assert writer.flush() is False
    with pytest.raises(ValueError, match="is closed"):
        writer.write_event(b"")


def test_event_file_dropped_without_close_keeps_its_data(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    writer.write_event(ScalarEventEncoder(["x"]).encode(1.0, 1, [1.0]))
    path = writer.path
    del writer
    gc.collect()  # the finalizer closes the file (no ResourceWarning) after writing the buffer
    assert len(read_records(path)) == 2
