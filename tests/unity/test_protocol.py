"""evtrain's side of ML-Agents' protocol against a Unity side over real gRPC on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import uuid
from typing import Any

import grpc
import numpy as np
import pytest

from evtrain._version import __version__
from evtrain.errors import (
    UnityBuildExitedError,
    UnityCommunicationError,
    UnityPortInUseError,
    UnityTimeoutError,
    UnityVersionError,
)
from evtrain.unity import schema
from evtrain.unity.connection import CAPABILITIES, UnityConnection, compatible
from evtrain.unity.side_channels import RawBytesChannel
from evtrain.unity.steps import ActionTuple
from tests.unity.fake_build import FakeBuild, InThread, agent, brain

RESET, STEP, QUIT = (schema.CommandProto[c] for c in ("RESET", "STEP", "QUIT"))


def test_the_handshake_agrees_on_api_1_5_0_and_says_what_evtrain_can_do(
    connection: UnityConnection, port: int
) -> None:
    connection.seed, connection.num_areas = 7, 3
    build = FakeBuild(port, name="Basic")
    side = InThread(build.handshake)
    info = connection.handshake(20.0)
    connection.close()  # answers the build's second message
    answer, command = side.result()
    init = answer.unity_input.rl_initialization_input
    assert (info.name, info.communication_version, info.package_version) == (
        "Basic",
        "1.5.0",
        "3.0.0",
    )
    assert info.log_path == "/tmp/fake.log"
    assert (init.communication_version, init.package_version) == ("1.5.0", __version__)
    assert (init.seed, init.num_areas) == (7, 3)
    assert all(getattr(init.capabilities, name) for name in CAPABILITIES)
    assert command.header.status == 400  # the empty message waited for a command: a quit
    build.close()


def _connected(connection: UnityConnection, port: int, script: Any) -> InThread:
    """A fake build that shakes hands, then runs ``script(build, first_command)``."""

    def run() -> Any:
        build = FakeBuild(port)
        try:
            _, command = build.handshake()
            return script(build, command)
        finally:
            build.close()

    side = InThread(run)
    connection.handshake(20.0)
    return side


def test_reset_and_step_exchange_commands_observations_and_actions(
    connection: UnityConnection, port: int
) -> None:
    def script(build: FakeBuild, command: Any) -> list[Any]:
        seen = [command.unity_input.rl_input.command]
        infos = [agent(4, [[1.0, 2.0]]), agent(9, [[3.0, 4.0]], reward=0.5)]
        command = build.send({"Hybrid": infos}, brains=[brain("Hybrid", 2, [3, 2])])
        seen.append(command.unity_input.rl_input)
        command = build.send({"Hybrid": [agent(9, [[5.0, 6.0]], reward=1.0)]})
        seen.append(command.unity_input.rl_input)
        return seen

    side = _connected(connection, port, script)
    steps = connection.reset()
    decisions, terminals = steps["Hybrid"]
    spec = connection.behavior_specs["Hybrid"]
    assert (spec.action_spec.continuous_size, spec.action_spec.discrete_branches) == (2, (3, 2))
    assert decisions.agent_id.tolist() == [4, 9]
    assert decisions.obs[0].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert decisions.reward.tolist() == [0.0, 0.5]
    assert len(terminals) == 0
    continuous = np.array([[0.5, -0.5], [0.25, 1.0]], dtype=np.float32)
    connection.set_actions("Hybrid", ActionTuple(continuous, np.array([[2, 1], [0, 1]])))
    steps = connection.step()
    assert steps["Hybrid"][0].agent_id.tolist() == [9]
    connection.step_begin()  # no actions set: zeros for agent 9
    reset, first, second = side.result()
    assert reset == RESET
    assert first.command == STEP
    sent = first.agent_actions["Hybrid"].value
    assert [list(a.continuous_actions) for a in sent] == [[0.5, -0.5], [0.25, 1.0]]
    assert [list(a.discrete_actions) for a in sent] == [[2, 1], [0, 1]]
    assert [list(a.continuous_actions) for a in second.agent_actions["Hybrid"].value] == [
        [0.0, 0.0]
    ]


def test_actions_of_the_wrong_shape_are_refused_naming_the_behavior(
    connection: UnityConnection, port: int
) -> None:
    side = _connected(
        connection,
        port,
        lambda build, _: build.send({"B": [agent(1, [[0.0]])]}, brains=[brain("B", 2)]),
    )
    connection.reset()
    with pytest.raises(ValueError) as raised:
        connection.set_actions("B", ActionTuple(np.zeros((2, 2)), np.zeros((2, 0))))
    assert str(raised.value) == (
        "behavior 'B': expected continuous actions of shape (1, 2) (1 agents asked for a "
        "decision), got (2, 2)"
    )
    connection.close()
    side.result()


@pytest.mark.parametrize(
    ("version", "fix"),
    [
        ("2.0.0", "upgrade evtrain to a version that speaks API 2.x"),
        (
            "0.15.0",
            "upgrade the project's com.unity.ml-agents package to 2.0 or later and rebuild",
        ),
    ],
)
def test_an_incompatible_api_version_is_refused_with_both_versions_and_the_fix(
    connection: UnityConnection, port: int, version: str, fix: str
) -> None:
    build = FakeBuild(port, name="Old", version=version)
    side = InThread(build.handshake)
    with pytest.raises(UnityVersionError) as raised:
        connection.handshake(20.0)
    answer, _ = side.result()
    assert answer.header.status == 400  # told to quit
    assert str(raised.value) == (
        f"the Unity build 'Old' speaks ML-Agents communication API {version} "
        f"(com.unity.ml-agents 3.0.0), evtrain speaks 1.5.0, and they are not compatible: {fix}"
    )
    build.close()


def test_compatibility_is_ml_agents_rule() -> None:
    assert compatible("1.5.0") and compatible("1.0.0") and compatible("1.9.2")
    assert not compatible("2.0.0") and not compatible("0.5.0") and not compatible("one")
    assert compatible("0.15.0", "0.15.1") and not compatible("0.16.0", "0.15.0")


def test_a_port_in_use_fails_at_open_in_one_line(port: int) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(UnityPortInUseError) as raised:
            UnityConnection(port).open()
    assert isinstance(raised.value, OSError)
    assert str(raised.value) == (
        f"port {port} on 127.0.0.1 is in use, expected it free for a Unity build to connect "
        "to: another run, build or Unity Editor holds it; stop it or choose another "
        "env_settings.base_port (--base-port)"
    )


def test_a_second_connection_on_the_same_port_is_refused(
    connection: UnityConnection, port: int
) -> None:
    with pytest.raises(UnityPortInUseError):
        UnityConnection(port).open()


def test_a_build_that_never_connects_times_out_naming_the_port(
    connection: UnityConnection, port: int
) -> None:
    with pytest.raises(UnityTimeoutError) as raised:
        connection.handshake(0.2)
    assert isinstance(raised.value, TimeoutError)
    assert str(raised.value) == (
        f"no Unity build connected to port {port} within 0.2 s; expected one started with "
        f"--mlagents-port {port} (Behavior Type: Default); check its log, or raise "
        "env_settings.timeout_wait (--timeout-wait)"
    )


def test_a_build_whose_process_ended_is_told_before_the_timeout(
    connection: UnityConnection, port: int
) -> None:
    with pytest.raises(UnityBuildExitedError) as raised:
        connection.handshake(60.0, alive=lambda: False)
    assert str(raised.value) == (
        f"the Unity build for port {port} exited while evtrain waited for it to connect; its "
        "log says why"
    )


def test_a_step_the_build_does_not_answer_times_out_naming_the_port(
    connection: UnityConnection, port: int
) -> None:
    def script(build: FakeBuild, _: Any) -> None:
        build.send({"B": [agent(1, [[0.0]])]}, brains=[brain("B", 0, [2])])

    side = _connected(connection, port, script)
    connection.reset()
    with pytest.raises(UnityTimeoutError) as raised:
        connection.step(timeout=0.2)  # the build sends nothing after this step's command
    side.result()
    assert str(raised.value) == (
        f"the Unity build on port {port} did not answer within 0.2 s after a step; check its "
        "log, or raise env_settings.timeout_wait (--timeout-wait)"
    )


def test_a_build_that_quits_mid_run_raises_a_communication_error(
    connection: UnityConnection, port: int
) -> None:
    def script(build: FakeBuild, _: Any) -> None:
        build.send({"B": [agent(1, [[0.0]])]}, brains=[brain("B", 0, [2])])
        build.quit()

    side = _connected(connection, port, script)
    connection.reset()
    with pytest.raises(UnityCommunicationError) as raised:
        connection.step()
    assert isinstance(raised.value, ConnectionError)
    assert str(raised.value) == (
        f"the Unity build on port {port} quit (status 400) while evtrain waited for it after a step"
    )
    side.result()


def test_a_build_that_hangs_up_mid_call_raises_a_communication_error(
    connection: UnityConnection, port: int
) -> None:
    taken = threading.Event()

    def script(build: FakeBuild, _: Any) -> None:
        build.send({"B": [agent(1, [[0.0]])]}, brains=[brain("B", 0, [2])])
        future = build.channel.unary_unary(
            schema.EXCHANGE_METHOD,
            request_serializer=schema.UnityMessageProto.SerializeToString,
            response_deserializer=schema.UnityMessageProto.FromString,
        ).future(schema.UnityMessageProto(header=schema.HeaderProto(status=200)))
        assert taken.wait(30.0), "evtrain never took the build's call"
        future.cancel()  # the build's call ends before evtrain answers it

    side = _connected(connection, port, script)
    connection.reset()
    connection.step_begin()
    connection.step_end(timeout=30.0)  # the call is evtrain's to answer now
    taken.set()
    with pytest.raises(UnityCommunicationError, match="closed the connection"):
        connection.step_end(timeout=30.0)
    side.result()


def test_close_tells_the_build_to_quit_and_is_idempotent(
    connection: UnityConnection, port: int
) -> None:
    def script(build: FakeBuild, _: Any) -> Any:
        return build.send({"B": [agent(1, [[0.0]])]}, brains=[brain("B", 0, [2])])

    side = _connected(connection, port, script)
    connection.reset()
    connection.close()
    connection.close()
    quit_message = side.result()
    assert quit_message.header.status == 400
    assert quit_message.unity_input.rl_input.command == QUIT


def test_messages_over_4_mib_go_through_both_ways(connection: UnityConnection, port: int) -> None:
    channel = RawBytesChannel(uuid.UUID("6a1b7b8e-0000-4000-8000-000000000001"))
    connection.side_channels.channels[channel.channel_id] = channel
    big_obs = np.arange(1_300_000, dtype=np.float32) / 1e6  # 5.2 MB of floats

    def script(build: FakeBuild, _: Any) -> Any:
        command = build.send({"Big": [agent(1, [big_obs])]}, brains=[brain("Big", 1)])
        return len(command.unity_input.rl_input.side_channel)

    side = _connected(connection, port, script)
    decisions, _ = connection.reset()["Big"]
    assert decisions.obs[0].shape == (1, 1_300_000)
    assert decisions.obs[0][0, -1] == big_obs[-1]
    channel.send_raw_data(bytes(5 * 2**20))
    connection.step_begin()
    assert side.result() == 5 * 2**20 + 20


def test_two_builds_step_at_once(port: int) -> None:
    ports = [port, port + 1]
    connections = [UnityConnection(p, timeout=20.0).open() for p in ports]
    try:

        def script(p: int) -> Any:
            build = FakeBuild(p)
            build.handshake()
            command = build.send({"B": [agent(p, [[float(p)]])]}, brains=[brain("B", 0, [4])])
            build.send({"B": [agent(p, [[float(p)]], reward=1.0)]})
            build.close()
            actions = command.unity_input.rl_input.agent_actions["B"].value
            return [a.discrete_actions[0] for a in actions]

        sides = [InThread(lambda p=p: script(p)) for p in ports]  # type: ignore[misc]
        for c in connections:
            c.handshake(20.0)
            c.reset()
        for c, action in zip(connections, (3, 1), strict=True):
            c.set_actions("B", ActionTuple(np.zeros((1, 0)), np.array([[action]])))
            c.step_begin()
        rewards = [c.step_end()["B"][0].reward.tolist() for c in connections]
        assert rewards == [[1.0], [1.0]]
        for c in connections:
            c.close()
        assert [s.result() for s in sides] == [[3], [1]]
    finally:
        for c in connections:
            c.close()


def test_a_build_older_than_api_1_3_gets_its_actions_in_the_deprecated_field(
    connection: UnityConnection, port: int
) -> None:
    def run() -> Any:
        build = FakeBuild(port, version="1.2.0")
        build.handshake()
        command = build.send({"B": [agent(1, [[0.0]])]}, brains=[brain("B", 2)])
        build.close()
        action = command.unity_input.rl_input.agent_actions["B"].value[0]
        return list(action.vector_actions_deprecated)

    side = InThread(run)
    connection.handshake(20.0)
    connection.reset()
    connection.set_actions("B", ActionTuple(np.array([[0.5, 0.25]]), np.zeros((1, 0))))
    connection.step_begin()
    assert side.result() == [0.5, 0.25]


def test_the_server_binds_only_the_loopback(connection: UnityConnection, port: int) -> None:
    outside = socket.gethostbyname(socket.gethostname())
    if outside.startswith("127."):
        pytest.skip("this host has no address but the loopback")
    channel = grpc.insecure_channel(f"{outside}:{port}")
    with pytest.raises(grpc.FutureTimeoutError):
        grpc.channel_ready_future(channel).result(timeout=0.5)
    channel.close()
