"""Reading what the wandb writer left: the records of an offline run's ``.wandb`` file (the
LevelDB-style log wandb writes) and its history rows."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7


def records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    offset, pieces = HEADER, b""
    while offset + HEADER <= len(data):
        left = BLOCK - offset % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            offset += left
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + HEADER])
        offset += HEADER
        payload = data[offset : offset + length]
        offset += length
        if kind == 1:
            yield payload
        elif kind == 2:
            pieces = payload
        elif kind == 3:
            pieces += payload
        elif kind == 4:
            yield pieces + payload


def history(run_folder: Path) -> list[dict[str, Any]]:
    """Every ``run.log`` of the run's one offline run directory, in order."""
    (log,) = run_folder.glob("wandb/offline-run-*/run-*.wandb")
    from wandb.proto import wandb_internal_pb2  # the tests that read it skip without wandb

    rows = []
    for data in records(log):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): item.value_json
                    for item in record.history.item
                }
            )
    return rows
