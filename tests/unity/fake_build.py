"""A minimal Unity side of ML-Agents' protocol, in a thread: the gRPC client a build is.

The tests script it message by message: :meth:`FakeBuild.handshake` sends what a build sends
first and returns evtrain's answer; :meth:`FakeBuild.send` sends one output (agents' data) and
returns the command that answers it.  Helpers make the protobuf parts (:func:`agent`,
:func:`brain`, :func:`png`).
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from PIL import Image

from evtrain.unity import schema

_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


class FakeBuild:
    """A build connecting to ``127.0.0.1:port``."""

    def __init__(self, port: int, *, name: str = "Fake", version: str = "1.5.0") -> None:
        self.name = name
        self.version = version
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=_OPTIONS)
        self._exchange = self.channel.unary_unary(
            schema.EXCHANGE_METHOD,
            request_serializer=schema.UnityMessageProto.SerializeToString,
            response_deserializer=schema.UnityMessageProto.FromString,
        )

    def call(self, message: Any, timeout: float = 20.0) -> Any:
        return self._exchange(message, timeout=timeout, wait_for_ready=True)

    def handshake(self, package: str = "3.0.0") -> tuple[Any, Any]:
        """Send the initialization output, then the empty message; (evtrain's answer to the
        first, the command answering the second)."""
        first = schema.UnityMessageProto()
        first.header.status = 200
        init = first.unity_output.rl_initialization_output
        init.name = self.name
        init.communication_version = self.version
        init.package_version = package
        init.log_path = "/tmp/fake.log"
        init.capabilities.baseRLCapabilities = True
        answer = self.call(first)
        if answer.header.status != 200:
            return answer, None
        empty = schema.UnityMessageProto()
        empty.header.status = 200
        return answer, self.call(empty)

    def send(
        self,
        agents: dict[str, Sequence[Any]],
        *,
        brains: Sequence[Any] = (),
        side_channel: bytes = b"",
    ) -> Any:
        """One output: ``agents`` per behavior (and ``brains`` for the new ones); the command
        that answers it."""
        message = schema.UnityMessageProto()
        message.header.status = 200
        output = message.unity_output
        for name, infos in agents.items():
            output.rl_output.agentInfos[name].value.extend(infos)
        if brains:
            output.rl_initialization_output.brain_parameters.extend(brains)
        output.rl_output.side_channel = side_channel
        return self.call(message)

    def quit(self) -> None:
        """What a build sends when it closes itself."""
        message = schema.UnityMessageProto()
        message.header.status = 400
        with contextlib.suppress(grpc.RpcError):
            self.call(message, timeout=5.0)

    def close(self) -> None:
        self.channel.close()


def brain(name: str, continuous: int = 0, branches: Sequence[int] = ()) -> Any:
    found = schema.BrainParametersProto(brain_name=name, is_training=True)
    found.action_spec.num_continuous_actions = continuous
    found.action_spec.num_discrete_actions = len(branches)
    found.action_spec.discrete_branch_sizes.extend(branches)
    return found


def agent(
    agent_id: int,
    obs: Sequence[Any],
    *,
    reward: float = 0.0,
    done: bool = False,
    max_step: bool = False,
    mask: Sequence[bool] = (),
    group: int = 0,
    group_reward: float = 0.0,
) -> Any:
    """An ``AgentInfoProto``; each of ``obs`` a float array or an ``ObservationProto``."""
    info = schema.AgentInfoProto(
        id=agent_id,
        reward=reward,
        done=done,
        max_step_reached=max_step,
        group_id=group,
        group_reward=group_reward,
    )
    info.action_mask.extend(mask)
    for o in obs:
        if isinstance(o, schema.ObservationProto):
            info.observations.append(o)
            continue
        array = np.asarray(o, dtype=np.float32)
        proto = info.observations.add()
        proto.shape.extend(array.shape)
        proto.dimension_properties.extend([1] * array.ndim)
        proto.float_data.data.extend(array.ravel().tolist())
    return info


def png(pixels: npt.NDArray[np.uint8]) -> bytes:
    """``pixels`` (H, W, 3) or (H, W) as PNG bytes."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def visual(
    data: bytes, shape: Sequence[int], properties: Sequence[int], mapping: Sequence[int] = ()
) -> Any:
    proto = schema.ObservationProto(compression_type=1, compressed_data=data)
    proto.shape.extend(shape)
    proto.dimension_properties.extend(properties)
    proto.compressed_channel_mapping.extend(mapping)
    return proto


class InThread:
    """Runs ``script`` (the build's side) on a thread; :meth:`result` joins it and returns its
    value, or raises what it raised."""

    def __init__(self, script: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(script,), daemon=True)
        self._thread.start()

    def _run(self, script: Callable[[], Any]) -> None:
        try:
            self._value = script()
        except BaseException as error:
            self._error = error

    def result(self, timeout: float = 30.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the build's script did not end"
        if self._error is not None:
            raise self._error
        return self._value
