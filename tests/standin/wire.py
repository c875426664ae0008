"""What a Unity build puts on the wire: observations, agent infos, brain parameters, side channels.

Everything here follows com.unity.ml-agents 2.x-4.x (``GrpcExtensions.cs``,
``SideChannelManager.cs``, ``StatsRecorder.cs``): vector observations as float data, cameras as
PNG bytes with their compressed channel mapping, the behavior's action spec with the deprecated
fields a build still fills for a one-kind action space, and side channel messages as ``uuid
(16 bytes, little-endian fields) | int32 length | payload``.
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from google.protobuf import any_pb2
from PIL import Image

from evtrain.unity import schema

ENGINE_CONFIGURATION = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")
TRAINING_ANALYTICS = uuid.UUID("b664a4a9-d86f-5a5f-95cb-e8353a7e8356")

ENGINE_KEYS = ("screen_resolution", "quality_level", "time_scale", "target_frame_rate",
               "capture_frame_rate")  # fmt: skip
"""Engine configuration message types 0-4, as ML-Agents numbers them."""

STATS_AVERAGE, STATS_MOST_RECENT, STATS_SUM, STATS_HISTOGRAM = 0, 1, 2, 3

# DimensionProperty (ObservationSpec.cs): Unspecified 0, None 1, TranslationalEquivariance 2.
HWC = (2, 2, 1)
CHW = (1, 2, 2)


def vector_observation(values: Sequence[float], name: str, observation_type: int = 0) -> Any:
    """A vector sensor's observation: float data, dimension property None."""
    obs = schema.ObservationProto(
        shape=[len(values)], dimension_properties=[1], observation_type=observation_type, name=name
    )
    obs.float_data.data.extend(values)
    return obs


def png(image: np.ndarray) -> bytes:
    """``image`` (H, W, 3 floats in [0, 1]) as Unity's ``Texture2D.EncodeToPNG`` writes it."""
    pixels = np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG", compress_level=1)
    return out.getvalue()


def camera_observation(encoded: bytes, height: int, width: int, layout: tuple[int, ...],
                       name: str) -> Any:  # fmt: skip
    """A camera sensor's PNG observation; shape (H, W, 3) for 2.x, (3, H, W) for 3.0 and later."""
    shape = [height, width, 3] if layout == HWC else [3, height, width]
    return schema.ObservationProto(
        shape=shape,
        compression_type=1,
        compressed_data=encoded,
        compressed_channel_mapping=[0, 1, 2],
        dimension_properties=list(layout),
        name=name,
    )


def brain_parameters(name: str, continuous: int, branches: Sequence[int]) -> Any:
    """``BrainParameters.ToProto(name, isTraining: true)``."""
    params = schema.BrainParametersProto(brain_name=name, is_training=True)
    spec = params.action_spec
    spec.num_continuous_actions = continuous
    spec.num_discrete_actions = len(branches)
    spec.discrete_branch_sizes.extend(branches)
    if continuous and not branches:
        params.vector_action_size_deprecated.append(continuous)
        params.vector_action_space_type_deprecated = 1
    elif branches and not continuous:
        params.vector_action_size_deprecated.extend(branches)
        params.vector_action_space_type_deprecated = 0
    return params


def side_channel_messages(data: bytes) -> Iterator[tuple[uuid.UUID, bytes]]:
    """The ``(channel id, payload)`` messages packed in one side channel blob."""
    offset = 0
    while offset + 20 <= len(data):
        channel = uuid.UUID(bytes_le=data[offset : offset + 16])
        (length,) = struct.unpack_from("<i", data, offset + 16)
        yield channel, data[offset + 20 : offset + 20 + length]
        offset += 20 + length


def pack_side_channel(channel: uuid.UUID, payload: bytes) -> bytes:
    return channel.bytes_le + struct.pack("<i", len(payload)) + payload


def stat_message(key: str, value: float, aggregation: int) -> bytes:
    """What ``StatsRecorder.Add(key, value, aggregation)`` sends."""
    encoded = key.encode("ascii")
    body = struct.pack("<i", len(encoded)) + encoded + struct.pack("<fi", value, aggregation)
    return pack_side_channel(STATS, body)


class Reader:
    """Reads a side channel payload as ``IncomingMessage`` does."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.offset = 0

    def int32(self) -> int:
        (value,) = struct.unpack_from("<i", self.payload, self.offset)
        self.offset += 4
        return int(value)

    def float32(self) -> float:
        (value,) = struct.unpack_from("<f", self.payload, self.offset)
        self.offset += 4
        return float(value)

    def string(self) -> str:
        length = self.int32()
        text = self.payload[self.offset : self.offset + length].decode("ascii")
        self.offset += length
        return text

    def floats(self) -> list[float]:
        return [self.float32() for _ in range(self.int32())]


def describe_engine_configuration(payload: bytes) -> str:
    """One log line for an engine configuration message, e.g. ``time_scale=20.0``."""
    reader = Reader(payload)
    kind = reader.int32()
    key = ENGINE_KEYS[kind] if 0 <= kind < len(ENGINE_KEYS) else f"unknown_{kind}"
    if key == "screen_resolution":
        return f"width={reader.int32()} height={reader.int32()}"
    value = reader.float32() if key == "time_scale" else reader.int32()
    return f"{key}={value}"


def describe_environment_parameter(payload: bytes) -> tuple[str, str]:
    """``(key, description)`` of an environment parameters message: ``0.5`` or ``uniform(...)``."""
    reader = Reader(payload)
    key = reader.string()
    if reader.int32() == 0:
        return key, f"{reader.float32()}"
    seed, sampler = reader.int32(), reader.int32()
    if sampler == 2:
        return key, f"multirangeuniform({reader.floats()}, seed={seed})"
    name = "uniform" if sampler == 0 else "gaussian"
    return key, f"{name}({reader.float32()}, {reader.float32()}, seed={seed})"


def describe_training_analytics(payload: bytes) -> str:
    """The analytics message's type and fields, as one line."""
    wrapped = any_pb2.Any()
    wrapped.ParseFromString(payload)
    kind: str = wrapped.type_url.rpartition(".")[2]
    try:
        message = getattr(schema, kind)()
        message.ParseFromString(wrapped.value)
    except (AttributeError, ValueError):
        return kind
    fields = " ".join(f"{field.name}={value}" for field, value in message.ListFields())
    return f"{kind} {fields}"
