"""Every behavior of a build as agent slots: async decisions, late and leaving agents, groups,
teams, spaces and actions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from evtrain.errors import ConfigError, UnityDataError
from evtrain.unity.behaviors import UnityBehaviors
from evtrain.unity.connection import UnityConnection
from tests.unity.fake_build import FakeBuild, InThread, agent, brain


def _build(
    connection: UnityConnection, port: int, outputs: Sequence[dict[str, Any]], brains: Sequence[Any]
) -> InThread:
    """A build sending ``outputs`` one per exchange (the first answers the reset); the
    commands answering each, once the connection closes."""

    def run() -> list[Any]:
        build = FakeBuild(port)
        build.handshake()
        commands = [
            build.send(out, brains=brains if i == 0 else ()) for i, out in enumerate(outputs)
        ]
        build.close()
        return [c.unity_input.rl_input.agent_actions for c in commands]

    side = InThread(run)
    connection.handshake(20.0)
    return side


def _discrete(actions: Any, name: str) -> list[int]:
    return [a.discrete_actions[0] for a in actions[name].value]


def test_async_decisions_late_and_leaving_agents(connection: UnityConnection, port: int) -> None:
    outputs = [
        {"B": [agent(1, [[1.0]], mask=[False, True, False]), agent(2, [[2.0]])]},
        {"B": [agent(1, [[1.5]], reward=0.5)]},  # agent 2 decides later
        {
            "B": [
                agent(1, [[9.0]], reward=2.0, done=True, max_step=True),
                agent(1, [[1.0]]),  # its next episode, in the same exchange
                agent(2, [[2.5]], reward=1.0),
            ]
        },
        {"B": [agent(2, [[8.0]], reward=-1.0, done=True), agent(3, [[3.0]]), agent(1, [[1.25]])]},
    ]
    side = _build(connection, port, outputs, [brain("B", 0, [3])])
    shared = UnityBehaviors([connection], ["B"])
    view = shared.view("B")
    assert view.single_observation_space == spaces.Dict(
        {
            "obs_0": spaces.Box(-np.inf, np.inf, (1,), np.float32),
            "action_mask": spaces.Box(0.0, 1.0, (3,), np.float32),
        }
    )
    assert view.single_action_space == spaces.Discrete(3)
    obs, _ = view.reset()
    assert obs["obs_0"].tolist() == [[1.0], [2.0]]
    assert obs["action_mask"].tolist() == [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    assert view.acting.tolist() == [True, True]

    first = shared.step({"B": np.array([2, 0])})["B"]
    assert first.active.tolist() == [True, False]
    assert first.rewards.tolist() == [0.5, 0.0]
    assert view.acting.tolist() == [True, False]

    second = shared.step({"B": np.array([1, 1])})["B"]
    assert second.active.tolist() == [True, True]
    assert second.rewards.tolist() == [2.0, 1.0]
    assert (second.truncated.tolist(), second.terminated.tolist()) == (
        [True, False],
        [False, False],
    )
    assert second.final_obs[0]["obs_0"].tolist() == [9.0]
    assert shared.view("B").observations()["obs_0"].tolist() == [[1.0], [2.5]]

    third = shared.step({"B": np.array([0, 2])})["B"]
    assert third.terminated.tolist() == [False, True]
    assert third.rewards.tolist() == [0.0, -1.0]
    assert third.final_obs[1]["obs_0"].tolist() == [8.0]
    assert view.observations()["obs_0"].tolist() == [[1.25], [3.0]]  # agent 3 took the free slot
    assert view.acting.tolist() == [True, True]
    shared.close()
    sent = side.result()
    assert [_discrete(a, "B") for a in sent[:3]] == [[2, 0], [1], [0, 2]]


def test_groups_and_teams(connection: UnityConnection, port: int) -> None:
    def team(ids: tuple[int, int], group: int, **kw: Any) -> list[Any]:
        return [agent(i, [[float(i)]], group=group, **kw) for i in ids]

    outputs = [
        {"Soccer?team=0": team((1, 2), 7), "Soccer?team=1": team((3, 4), 8)},
        {
            "Soccer?team=0": team((1, 2), 7, done=True, group_reward=1.0),
            "Soccer?team=1": team((3, 4), 8, done=True, group_reward=-1.0),
        },
    ]
    brains = [brain("Soccer?team=0", 0, [3, 3]), brain("Soccer?team=1", 0, [3, 3])]
    side = _build(connection, port, outputs, brains)
    shared = UnityBehaviors([connection])
    view = shared.view("Soccer")
    assert (view.group_size, view.num_envs, view.teams) == (2, 4, [0, 1])
    assert view.slot_teams.tolist() == [0, 0, 1, 1]
    assert view.single_action_space == spaces.MultiDiscrete([3, 3])
    record = shared.step({"Soccer": np.zeros((4, 2), dtype=np.int64)})["Soccer"]
    assert record.group_reward.tolist() == [1.0, 1.0, -1.0, -1.0]
    assert record.episode_over.tolist() == [True, True, True, True]
    assert record.terminated.tolist() == [True] * 4
    shared.close()
    side.result()


def test_an_agent_beyond_the_slots_of_the_first_step_is_named(
    connection: UnityConnection, port: int
) -> None:
    outputs = [{"B": [agent(1, [[0.0]])]}, {"B": [agent(1, [[0.0]]), agent(2, [[0.0]])]}]
    side = _build(connection, port, outputs, [brain("B", 1)])
    shared = UnityBehaviors([connection])
    with pytest.raises(UnityDataError) as raised:
        shared.step({"B": np.zeros((1, 1))})
    assert str(raised.value) == (
        "behavior 'B': agent 2 appeared in Unity instance 0, where all 1 x 1 slots of the "
        "behavior are taken; evtrain counts a behavior's slots from the agents at the first "
        "step (the most in an instance: 1): have every agent present and asking for a "
        "decision at the first step (enabled in the scene, its DecisionRequester at offset 0), "
        "or give the behaviors spare copies of slots (env_settings.spare_copies)"
    )
    shared.close()
    side.result()


def test_hybrid_actions_and_several_observations(connection: UnityConnection, port: int) -> None:
    outputs = [{"H": [agent(1, [[0.0, 1.0], [[0.5]]])]}, {"H": [agent(1, [[0.0, 1.0], [[0.5]]])]}]
    side = _build(connection, port, outputs, [brain("H", 2, [4])])
    shared = UnityBehaviors([connection], ["H"])
    view = shared.view("H")
    assert set(view.single_observation_space.keys()) == {"obs_0", "obs_1", "action_mask"}  # type: ignore[attr-defined]
    assert view.single_action_space == spaces.Dict(
        {
            "continuous": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "discrete": spaces.MultiDiscrete([4]),
        }
    )
    shared.step({"H": {"continuous": np.array([[2.0, -0.5]]), "discrete": np.array([[3]])}})
    shared.close()
    sent = side.result()[0]["H"].value[0]
    assert list(sent.continuous_actions) == [1.0, -0.5]  # clipped to [-1, 1]
    assert list(sent.discrete_actions) == [3]


def test_a_behavior_the_build_lacks_is_a_config_error(
    connection: UnityConnection, port: int
) -> None:
    side = _build(connection, port, [{"B": [agent(1, [[0.0]])]}], [brain("B", 1)])
    with pytest.raises(ConfigError) as raised:
        UnityBehaviors([connection], ["B", "Walker"])
    assert (
        str(raised.value)
        == "behaviors.Walker: the Unity build has no behavior 'Walker' (it has: B)"
    )
    connection.close()
    side.result()
