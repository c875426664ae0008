"""ML-Agents' side channels, and a user's own.

The channels every ML-Agents build knows, with ML-Agents' UUIDs and payloads:

- :class:`EngineConfigurationChannel`: the engine's screen size, quality level, time scale,
  target and capture frame rates (to the build);
- :class:`EnvironmentParametersChannel`: environment parameters, a float or a sampler the build
  draws from (uniform, gaussian, multirange uniform) (to the build);
- :class:`StatsSideChannel`: statistics the build records (``Academy.Instance.StatsRecorder``),
  each with its :class:`StatsAggregationMethod` (from the build);
- :class:`TrainingAnalyticsSideChannel`: the training analytics a build may send; accepted and
  ignored.

A user's own channel is a :class:`SideChannel` subclass (or a :class:`RawBytesChannel`, which
keeps the raw payloads): give it the UUID the C# side registers it with.  The framing and the
message encoding are :mod:`evtrain.unity.channel_messages`'.
"""

from __future__ import annotations

import enum
import uuid
from collections import defaultdict
from collections.abc import Sequence

from evtrain.errors import UnityDataError
from evtrain.unity.channel_messages import (
    IncomingMessage,
    OutgoingMessage,
    SideChannel,
    SideChannelRouter,
)

__all__ = [
    "EngineConfigurationChannel",
    "EnvironmentParametersChannel",
    "IncomingMessage",
    "OutgoingMessage",
    "RawBytesChannel",
    "SideChannel",
    "SideChannelRouter",
    "StatsAggregationMethod",
    "StatsSideChannel",
    "TrainingAnalyticsSideChannel",
]


class EngineConfigurationChannel(SideChannel):
    """The engine's settings, sent to the build (it never sends on this channel)."""

    CHANNEL_ID = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
    SCREEN_RESOLUTION, QUALITY_LEVEL, TIME_SCALE, TARGET_FRAME_RATE, CAPTURE_FRAME_RATE = range(5)
    """The kinds of message, the payload's first int32."""

    def __init__(self) -> None:
        super().__init__(self.CHANNEL_ID)

    def on_message_received(self, msg: IncomingMessage) -> None:
        raise UnityDataError(
            "the build sent a message on the engine configuration channel, which only evtrain "
            "sends on"
        )

    def set_configuration_parameters(
        self,
        width: int | None = None,
        height: int | None = None,
        quality_level: int | None = None,
        time_scale: float | None = None,
        target_frame_rate: int | None = None,
        capture_frame_rate: int | None = None,
    ) -> None:
        """Queue each setting given (``None``: leave the build's); width and height go
        together.

        :raises ValueError: only one of width and height is given.
        """
        if (width is None) != (height is None):
            raise ValueError(
                f"the screen size needs both width and height, got width={width} height={height}"
            )
        if width is not None and height is not None:
            self._send(self.SCREEN_RESOLUTION, width, height)
        if quality_level is not None:
            self._send(self.QUALITY_LEVEL, quality_level)
        if time_scale is not None:
            msg = OutgoingMessage()
            msg.write_int32(self.TIME_SCALE)
            msg.write_float32(time_scale)
            self.queue_message_to_send(msg)
        if target_frame_rate is not None:
            self._send(self.TARGET_FRAME_RATE, target_frame_rate)
        if capture_frame_rate is not None:
            self._send(self.CAPTURE_FRAME_RATE, capture_frame_rate)

    def _send(self, kind: int, *values: int) -> None:
        msg = OutgoingMessage()
        msg.write_int32(kind)
        for value in values:
            msg.write_int32(value)
        self.queue_message_to_send(msg)


class EnvironmentParametersChannel(SideChannel):
    """Environment parameters, sent to the build (read there through
    ``Academy.Instance.EnvironmentParameters``): a float, or a sampler the build draws a value
    from at each of its episodes."""

    CHANNEL_ID = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
    FLOAT, SAMPLER = 0, 1
    """The kinds of parameter."""
    UNIFORM, GAUSSIAN, MULTIRANGE_UNIFORM = 0, 1, 2
    """The kinds of sampler."""

    def __init__(self) -> None:
        super().__init__(self.CHANNEL_ID)

    def on_message_received(self, msg: IncomingMessage) -> None:
        raise UnityDataError(
            "the build sent a message on the environment parameters channel, which only "
            "evtrain sends on"
        )

    def set_float_parameter(self, key: str, value: float) -> None:
        msg = OutgoingMessage()
        msg.write_string(key)
        msg.write_int32(self.FLOAT)
        msg.write_float32(value)
        self.queue_message_to_send(msg)

    def set_uniform_sampler_parameters(
        self, key: str, min_value: float, max_value: float, seed: int
    ) -> None:
        msg = self._sampler(key, seed, self.UNIFORM)
        msg.write_float32(min_value)
        msg.write_float32(max_value)
        self.queue_message_to_send(msg)

    def set_gaussian_sampler_parameters(
        self, key: str, mean: float, st_dev: float, seed: int
    ) -> None:
        msg = self._sampler(key, seed, self.GAUSSIAN)
        msg.write_float32(mean)
        msg.write_float32(st_dev)
        self.queue_message_to_send(msg)

    def set_multirangeuniform_sampler_parameters(
        self, key: str, intervals: Sequence[tuple[float, float]], seed: int
    ) -> None:
        msg = self._sampler(key, seed, self.MULTIRANGE_UNIFORM)
        msg.write_float32_list([value for interval in intervals for value in interval])
        self.queue_message_to_send(msg)

    def _sampler(self, key: str, seed: int, kind: int) -> OutgoingMessage:
        msg = OutgoingMessage()
        msg.write_string(key)
        msg.write_int32(self.SAMPLER)
        msg.write_int32(seed)
        msg.write_int32(kind)
        return msg


class StatsAggregationMethod(enum.Enum):
    """How the values of one statistic within a summary period combine (the build says)."""

    AVERAGE = 0
    MOST_RECENT = 1
    SUM = 2
    HISTOGRAM = 3


StatList = list[tuple[float, StatsAggregationMethod]]


class StatsSideChannel(SideChannel):
    """Statistics the build records: (key, value, aggregation method) messages, kept until
    :meth:`get_and_reset_stats`."""

    CHANNEL_ID = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")

    def __init__(self) -> None:
        super().__init__(self.CHANNEL_ID)
        self.stats: defaultdict[str, StatList] = defaultdict(list)

    def on_message_received(self, msg: IncomingMessage) -> None:
        key = msg.read_string()
        value = msg.read_float32()
        method = msg.read_int32()
        try:
            aggregation = StatsAggregationMethod(method)
        except ValueError:
            raise UnityDataError(
                f"the build sent statistic {key!r} with aggregation method {method}; expected "
                "0 (average), 1 (most recent), 2 (sum) or 3 (histogram)"
            ) from None
        self.stats[key].append((value, aggregation))

    def get_and_reset_stats(self) -> dict[str, StatList]:
        """Every statistic received since the last call, in order."""
        stats, self.stats = dict(self.stats), defaultdict(list)
        return stats


class TrainingAnalyticsSideChannel(SideChannel):
    """ML-Agents' training analytics channel: what a build sends on it is accepted and
    ignored, and evtrain sends nothing (it collects no analytics)."""

    CHANNEL_ID = uuid.UUID("b664a4a9-d86f-5a5f-95cb-e8353a7e8356")

    def __init__(self) -> None:
        super().__init__(self.CHANNEL_ID)

    def on_message_received(self, msg: IncomingMessage) -> None:
        return None


class RawBytesChannel(SideChannel):
    """A user's own channel, by the UUID its C# side registers: send bytes with
    :meth:`send_raw_data`, read what arrived with :meth:`receive_raw_data`."""

    def __init__(self, channel_id: uuid.UUID) -> None:
        super().__init__(channel_id)
        self.received: list[bytes] = []
        """Payloads the build sent, oldest first, until :meth:`receive_raw_data`."""

    def on_message_received(self, msg: IncomingMessage) -> None:
        self.received.append(msg.get_raw_bytes())

    def send_raw_data(self, data: bytes) -> None:
        """Send ``data`` with the next exchange."""
        msg = OutgoingMessage()
        msg.set_raw_bytes(data)
        self.queue_message_to_send(msg)

    def receive_raw_data(self) -> list[bytes]:
        """What arrived since the last call."""
        received, self.received = self.received, []
        return received
