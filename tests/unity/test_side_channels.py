"""Side channels: ML-Agents' UUIDs and payloads, both ways over a real connection."""

from __future__ import annotations

import logging
import struct
import uuid
from typing import Any

import pytest

from evtrain.unity.connection import UnityConnection
from evtrain.unity.side_channels import (
    EngineConfigurationChannel,
    EnvironmentParametersChannel,
    OutgoingMessage,
    RawBytesChannel,
    SideChannelRouter,
    StatsAggregationMethod,
    StatsSideChannel,
    TrainingAnalyticsSideChannel,
)
from tests.unity.fake_build import FakeBuild, InThread, agent, brain

MINE = uuid.UUID("0b4c7a1e-5d2f-4e8a-9c3b-1a2b3c4d5e6f")


def _frames(data: bytes) -> list[tuple[uuid.UUID, bytes]]:
    """What a build reads: (channel, payload) per framed message."""
    found, at = [], 0
    while at < len(data):
        channel = uuid.UUID(bytes_le=data[at : at + 16])
        (length,) = struct.unpack_from("<i", data, at + 16)
        found.append((channel, data[at + 20 : at + 20 + length]))
        at += 20 + length
    return found


def _framed(channel: uuid.UUID, payload: bytes) -> bytes:
    return channel.bytes_le + struct.pack("<i", len(payload)) + payload


def test_the_uuids_are_ml_agents() -> None:
    assert str(EngineConfigurationChannel().channel_id) == "e951342c-4f7e-11ea-b238-784f4387d1f7"
    assert str(EnvironmentParametersChannel().channel_id) == "534c891e-810f-11ea-a9d0-822485860400"
    assert str(StatsSideChannel().channel_id) == "a1d8f7b7-cec8-50f9-b78b-d3e165a78520"
    assert str(TrainingAnalyticsSideChannel().channel_id) == "b664a4a9-d86f-5a5f-95cb-e8353a7e8356"


def test_engine_configuration_payloads() -> None:
    engine = EngineConfigurationChannel()
    engine.set_configuration_parameters(84, 64, 5, 20.0, -1, 60)
    assert engine.message_queue == [
        struct.pack("<iii", 0, 84, 64),
        struct.pack("<ii", 1, 5),
        struct.pack("<if", 2, 20.0),
        struct.pack("<ii", 3, -1),
        struct.pack("<ii", 4, 60),
    ]
    with pytest.raises(ValueError, match="needs both width and height"):
        engine.set_configuration_parameters(width=84)


def test_environment_parameter_payloads_floats_and_samplers() -> None:
    channel = EnvironmentParametersChannel()
    channel.set_float_parameter("gravity", 9.5)
    channel.set_uniform_sampler_parameters("mass", 1.0, 2.0, 7)
    channel.set_gaussian_sampler_parameters("size", 0.5, 0.25, 8)
    channel.set_multirangeuniform_sampler_parameters("x", [(1.0, 2.0), (4.0, 5.0)], 9)

    def key(name: str) -> bytes:
        return struct.pack("<i", len(name)) + name.encode()

    assert channel.message_queue == [
        key("gravity") + struct.pack("<if", 0, 9.5),
        key("mass") + struct.pack("<iiiff", 1, 7, 0, 1.0, 2.0),
        key("size") + struct.pack("<iiiff", 1, 8, 1, 0.5, 0.25),
        key("x") + struct.pack("<iiii4f", 1, 9, 2, 4, 1.0, 2.0, 4.0, 5.0),
    ]


def _stat(key: str, value: float, method: int) -> bytes:
    return struct.pack("<i", len(key)) + key.encode() + struct.pack("<fi", value, method)


def test_side_channels_both_ways_over_a_connection(
    connection: UnityConnection, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    stats, mine, engine = StatsSideChannel(), RawBytesChannel(MINE), EngineConfigurationChannel()
    connection.side_channels = SideChannelRouter(
        [stats, mine, engine, TrainingAnalyticsSideChannel()]
    )
    engine.set_configuration_parameters(time_scale=20.0)
    mine.send_raw_data(b"to the build")
    unknown = uuid.UUID("11111111-2222-3333-4444-555555555555")
    from_build = (
        _framed(StatsSideChannel.CHANNEL_ID, _stat("Env/Score", 2.5, 0))
        + _framed(StatsSideChannel.CHANNEL_ID, _stat("Env/Score", 3.5, 3))
        + _framed(MINE, b"from the build")
        + _framed(TrainingAnalyticsSideChannel.CHANNEL_ID, b"\x01\x02")
        + _framed(unknown, b"?")
    )

    def run() -> list[Any]:
        build = FakeBuild(port)
        _, reset = build.handshake()
        command = build.send(
            {"B": [agent(1, [[0.0]])]}, brains=[brain("B", 1)], side_channel=from_build
        )
        build.send({"B": [agent(1, [[0.0]])]}, side_channel=_framed(unknown, b"?"))
        build.close()
        return [reset.unity_input.rl_input.side_channel, command.unity_input.rl_input.side_channel]

    side = InThread(run)
    connection.handshake(20.0)
    with caplog.at_level(logging.WARNING, logger="evtrain.unity.channel_messages"):
        connection.reset()
        mine.send_raw_data(b"again")
        connection.step()
    connection.close()
    at_reset, at_step = side.result()
    assert _frames(at_reset) == [
        (MINE, b"to the build"),
        (EngineConfigurationChannel.CHANNEL_ID, struct.pack("<if", 2, 20.0)),
    ]
    assert _frames(at_step) == [(MINE, b"again")]
    assert stats.get_and_reset_stats() == {
        "Env/Score": [
            (2.5, StatsAggregationMethod.AVERAGE),
            (3.5, StatsAggregationMethod.HISTOGRAM),
        ]
    }
    assert stats.get_and_reset_stats() == {}
    assert mine.receive_raw_data() == [b"from the build"]
    warned = [r.getMessage() for r in caplog.records if r.name == "evtrain.unity.channel_messages"]
    assert warned == [
        f"the Unity build sent a message on side channel {unknown}, which evtrain has no "
        "channel for: its messages are dropped (register a SideChannel with this UUID to read "
        "them)"
    ]


def test_two_channels_with_one_uuid_are_refused() -> None:
    with pytest.raises(ValueError, match="two side channels have the UUID"):
        SideChannelRouter([RawBytesChannel(MINE), RawBytesChannel(MINE)])


def test_messages_read_back_what_was_written() -> None:
    from evtrain.unity.side_channels import IncomingMessage

    msg = OutgoingMessage()
    msg.write_bool(True)
    msg.write_int32(-3)
    msg.write_float32(1.5)
    msg.write_float32_list([1.0, 2.0])
    msg.write_string("hi")
    read = IncomingMessage(bytes(msg.buffer))
    assert read.read_bool() is True
    assert (read.read_int32(), read.read_float32()) == (-3, 1.5)
    assert (read.read_float32_list(), read.read_string()) == ([1.0, 2.0], "hi")
    assert read.read_int32(default=42) == 42
