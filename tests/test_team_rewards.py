"""A team game's group reward, as each team sees it: the slots carry their own team's, and a
self-play episode's result counts it (ML-Agents' ghost trainer reads the last step's reward and
group reward alike), on tests/team_envs.py's soccer with ``group_reward=True``."""

from __future__ import annotations

import numpy as np

from evtrain.multiagent import AgentSlots
from evtrain.multiagent.copies import EpisodeResult
from tests.team_envs import soccer

TEAMS = {
    "blue_0": "SoccerTwos?team=0",
    "blue_1": "SoccerTwos?team=0",
    "purple_0": "SoccerTwos?team=1",
    "purple_1": "SoccerTwos?team=1",
}
RIGHT = 4
"""Every player runs to its right: blue attacks that way, purple (mirrored) the other."""


def stay(obs: np.ndarray) -> np.ndarray:
    """A co-player that never moves."""
    return np.zeros(len(obs), np.int64)


def play_until_goal(slots: AgentSlots) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Step with every learner running right until the copy's episode is over."""
    for _ in range(100):
        _, rewards, _, _, infos = slots.step(np.full(slots.num_envs, RIGHT))
        if infos["episode_over"].all():
            return rewards, infos
    raise AssertionError("no goal in 100 steps")


def team_slots() -> tuple[AgentSlots, list[EpisodeResult]]:
    slots = AgentSlots(
        [soccer(group_reward=True, width=5)],
        "SoccerTwos",
        agent_behaviors=TEAMS,
        behaviors=["SoccerTwos"],
        self_play=True,
    )
    heard: list[EpisodeResult] = []
    slots.episode_listeners.append(heard.append)
    slots.co_players["SoccerTwos"] = stay
    return slots, heard


def test_the_scoring_team_sees_its_own_group_reward_and_wins() -> None:
    slots, heard = team_slots()
    slots.reset(seed=0)
    assert slots.learners(0) == ["blue_0", "blue_1"]
    rewards, infos = play_until_goal(slots)
    assert rewards.tolist() == [0.0, 0.0]  # the goal is a group reward only
    assert infos["group_reward"].tolist() == [1.0, 1.0]
    assert heard == [EpisodeResult(team=0, reward=1.0, copy=0)]


def test_the_other_team_sees_its_own_group_reward_too() -> None:
    slots, heard = team_slots()
    slots.reset(seed=0)
    slots.set_learning_team(1)
    play_until_goal(slots)  # blue's episode, then purple learns from the next one
    assert slots.learners(0) == ["purple_0", "purple_1"]
    rewards, infos = play_until_goal(slots)  # purple scores; blue's -1 is not its reward
    assert rewards.tolist() == [0.0, 0.0]
    assert infos["group_reward"].tolist() == [1.0, 1.0]
    assert heard[-1] == EpisodeResult(team=1, reward=1.0, copy=0)
