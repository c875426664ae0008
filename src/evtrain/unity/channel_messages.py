"""Side channels: messages beside the agents' data, in both directions, by channel UUID.

Each exchange's ``side_channel`` bytes (``UnityRLInputProto`` to the build,
``UnityRLOutputProto`` from it) hold any number of messages, each framed as the channel's UUID
(16 bytes, .NET's ``Guid`` byte order: ``uuid.UUID.bytes_le``), the payload's length (int32,
little-endian) and the payload.  A payload is written and read with :class:`OutgoingMessage`
and :class:`IncomingMessage` (little-endian int32, float32, bool, ASCII strings with their
length), the encoding ML-Agents' C# ``IncomingMessage``/``OutgoingMessage`` use.

:class:`SideChannel` is one channel (a subclass reads what arrives in
:meth:`~SideChannel.on_message_received` and queues what it sends); :class:`SideChannelRouter`
frames the queued messages of a connection's channels and hands each arriving one to its channel.
The standard channels are in :mod:`evtrain.unity.side_channels`.
"""

from __future__ import annotations

import abc
import logging
import struct
import uuid
from collections.abc import Sequence

from evtrain.errors import UnityDataError

__all__ = ["IncomingMessage", "OutgoingMessage", "SideChannel", "SideChannelRouter"]

_log = logging.getLogger(__name__)

_INT = struct.Struct("<i")
_FLOAT = struct.Struct("<f")
_BOOL = struct.Struct("<?")


class OutgoingMessage:
    """A payload written for a side channel, value by value."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        """What has been written."""

    def write_bool(self, value: bool) -> None:
        self.buffer += _BOOL.pack(value)

    def write_int32(self, value: int) -> None:
        self.buffer += _INT.pack(value)

    def write_float32(self, value: float) -> None:
        """``value`` at 32-bit precision."""
        self.buffer += _FLOAT.pack(value)

    def write_float32_list(self, values: Sequence[float]) -> None:
        """The count, then each value."""
        self.write_int32(len(values))
        self.buffer += struct.pack(f"<{len(values)}f", *values)

    def write_string(self, value: str) -> None:
        """The encoded length, then the ASCII bytes."""
        encoded = value.encode("ascii")
        self.write_int32(len(encoded))
        self.buffer += encoded

    def set_raw_bytes(self, data: bytes) -> None:
        """The payload is ``data`` (what was written before is replaced)."""
        self.buffer = bytearray(data)


class IncomingMessage:
    """A payload a side channel received, read value by value in the order it was written;
    past its end each read gives ``default``."""

    def __init__(self, buffer: bytes, offset: int = 0) -> None:
        self.buffer = bytes(buffer)
        self.offset = offset

    def _read(self, layout: struct.Struct) -> object:
        (value,) = layout.unpack_from(self.buffer, self.offset)
        self.offset += layout.size
        return value

    def read_bool(self, default: bool = False) -> bool:
        return default if self._at_end() else bool(self._read(_BOOL))

    def read_int32(self, default: int = 0) -> int:
        return default if self._at_end() else int(self._read(_INT))  # type: ignore[call-overload]

    def read_float32(self, default: float = 0.0) -> float:
        return default if self._at_end() else float(self._read(_FLOAT))  # type: ignore[arg-type]

    def read_float32_list(self, default: list[float] | None = None) -> list[float]:
        if self._at_end():
            return [] if default is None else default
        count = self.read_int32()
        values = struct.unpack_from(f"<{count}f", self.buffer, self.offset)
        self.offset += 4 * count
        return list(values)

    def read_string(self, default: str = "") -> str:
        if self._at_end():
            return default
        length = self.read_int32()
        value = self.buffer[self.offset : self.offset + length].decode("ascii")
        self.offset += length
        return value

    def get_raw_bytes(self) -> bytes:
        """The whole payload."""
        return self.buffer

    def _at_end(self) -> bool:
        return self.offset >= len(self.buffer)


class SideChannel(abc.ABC):
    """One side channel, known to the build and to evtrain by :attr:`channel_id`.

    A subclass implements :meth:`on_message_received`; what it queues with
    :meth:`queue_message_to_send` goes to the build with the next exchange (a reset or a step).
    """

    def __init__(self, channel_id: uuid.UUID) -> None:
        self._channel_id = channel_id
        self.message_queue: list[bytes] = []
        """Payloads waiting for the next exchange."""

    @property
    def channel_id(self) -> uuid.UUID:
        return self._channel_id

    def queue_message_to_send(self, msg: OutgoingMessage) -> None:
        """Send ``msg`` with the next exchange."""
        self.message_queue.append(bytes(msg.buffer))

    @abc.abstractmethod
    def on_message_received(self, msg: IncomingMessage) -> None:
        """The build sent ``msg`` on this channel (called once per message, in order)."""


class SideChannelRouter:
    """A connection's side channels: frames what they send, hands them what arrives.

    :raises ValueError: two channels share a UUID.
    """

    def __init__(self, channels: Sequence[SideChannel]) -> None:
        self.channels: dict[uuid.UUID, SideChannel] = {}
        for channel in channels:
            if channel.channel_id in self.channels:
                raise ValueError(
                    f"two side channels have the UUID {channel.channel_id} "
                    f"({type(self.channels[channel.channel_id]).__name__} and "
                    f"{type(channel).__name__}); each channel needs its own"
                )
            self.channels[channel.channel_id] = channel
        self._unknown: set[uuid.UUID] = set()

    def outgoing(self) -> bytes:
        """Every queued message of every channel, framed; the queues are emptied."""
        parts: list[bytes] = []
        for channel_id, channel in self.channels.items():
            for payload in channel.message_queue:
                parts += (channel_id.bytes_le, _INT.pack(len(payload)), payload)
            channel.message_queue = []
        return b"".join(parts)

    def incoming(self, data: bytes) -> None:
        """Hand each message framed in ``data`` to its channel; a UUID no channel has is
        logged once and its messages dropped.

        :raises UnityDataError: ``data`` is not framed as side-channel messages.
        """
        offset = 0
        while offset < len(data):
            if offset + 20 > len(data):
                raise UnityDataError(_cut(len(data), offset))
            channel_id = uuid.UUID(bytes_le=bytes(data[offset : offset + 16]))
            (length,) = _INT.unpack_from(data, offset + 16)
            offset += 20
            if length < 0 or offset + length > len(data):
                raise UnityDataError(_cut(len(data), offset))
            payload = bytes(data[offset : offset + length])
            offset += length
            channel = self.channels.get(channel_id)
            if channel is not None:
                channel.on_message_received(IncomingMessage(payload))
            elif channel_id not in self._unknown:
                self._unknown.add(channel_id)
                _log.warning(
                    "the Unity build sent a message on side channel %s, which evtrain has no "
                    "channel for: its messages are dropped (register a SideChannel with this "
                    "UUID to read them)",
                    channel_id,
                )


def _cut(size: int, offset: int) -> str:
    return (
        f"the build's side-channel data ({size} bytes) is cut short at byte {offset}: expected "
        "messages framed as a 16-byte UUID, an int32 length and the payload; is the build's "
        "ML-Agents package one that speaks API 1.5.0?"
    )
