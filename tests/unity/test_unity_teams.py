"""A self-playing behavior of a Unity build (the stand-in's multi scene: ``Striker?team=0``
against ``Striker?team=1``) as self-play sees it: its view holds one team's agent, the other
acts with its co-player on its own observations, each game's end is reported for the learning
team, and a new learning team takes over between games, never in one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from evtrain.errors import UnityDataError
from evtrain.multiagent.copies import EpisodeResult
from evtrain.unity.behaviors import UnityBehaviors
from evtrain.unity.connection import UnityConnection
from evtrain.unity.slots import BehaviorSlots
from evtrain.unity.teams import TeamPlay
from tests.helpers import end_with_the_suite, free_port
from tests.standin import make_build
from tests.standin.launch import launch

DUEL_STEPS = 10


def test_a_self_playing_behavior_trains_one_team_against_its_co_player(tmp_path: Path) -> None:
    build = make_build(tmp_path, "multi")
    port = free_port()
    with UnityConnection(port, timeout=30.0).open() as connection:
        process = end_with_the_suite(launch(build, port, tmp_path / "Player-0.log"))
        connection.handshake(30.0, alive=lambda: process.poll() is None)
        shared = UnityBehaviors([connection], self_play=["Striker"])
        view, coop = shared.view("Striker"), shared.view("Coop")
        assert (view.teams, view.learning_team, view.num_envs) == ([0, 1], 0, 1)
        assert coop.learning_team is None and coop.num_envs == 6
        with pytest.raises(ValueError, match="'Coop' has no self_play"):
            coop.set_learning_team(1)
        seen: list[Any] = []

        def co_player(obs: Any) -> Any:
            seen.append(obs)
            return np.full(len(obs["obs_0"]), 1)

        results: list[EpisodeResult] = []
        view.co_players = {"Striker": co_player}
        view.episode_listeners.append(results.append)
        view.set_learning_team(1)  # from the next game on
        teams: list[int] = []
        finals: list[float] = []
        for _ in range(3 * DUEL_STEPS):
            record = shared.step({"Striker": np.full(1, 2), "Coop": np.zeros(6, np.int64)})
            teams.append(int(view.slot_teams[view.team_play.index[0]]))  # type: ignore[union-attr]
            part = record["Striker"]
            assert part.rewards.shape == (1,)
            if part.episode_over[0]:
                finals.append(float(part.rewards[0] + part.group_reward[0]))
        shared.close()
    assert process.wait(10) == 0
    assert [r.team for r in results] == [0, 1, 1]  # the first game was team 0's to the end
    assert teams.index(1) == DUEL_STEPS - 1  # team 1's agent is the slot's from the first end
    assert all(obs["obs_0"].shape == (1, 6) for obs in seen) and len(seen) == 3 * DUEL_STEPS
    assert [r.reward for r in results] == pytest.approx(finals)  # the learning agent's


def steps(groups: list[int]) -> Any:
    """A behavior's first steps as :class:`BehaviorSlots` counts them: agents of ``groups``."""
    decisions = SimpleNamespace(
        agent_id=np.arange(len(groups), dtype=np.int32),
        group_id=np.asarray(groups, dtype=np.int32),
    )
    none = SimpleNamespace(agent_id=np.zeros(0, np.int32), group_id=np.zeros(0, np.int32))
    return decisions, none


def test_self_play_between_teams_of_different_sizes_is_one_line() -> None:
    first = [{"Soccer?team=0": steps([1, 1, 2, 2]), "Soccer?team=1": steps([3, 3])}]
    slots = BehaviorSlots("Soccer", ["Soccer?team=0", "Soccer?team=1"], first)
    with pytest.raises(UnityDataError) as caught:
        TeamPlay(slots)
    assert str(caught.value) == (
        "behavior 'Soccer' self-plays, but its teams have different numbers of groups in Unity "
        "instance 0 (team 0: 2, team 1: 1); self-play plays each team's group against one of "
        "the other's: give both teams as many, or remove self_play"
    )
    same = [{"Soccer?team=0": steps([1, 1, 2, 2]), "Soccer?team=1": steps([3, 3, 4, 4])}]
    play = TeamPlay(BehaviorSlots("Soccer", ["Soccer?team=0", "Soccer?team=1"], same))
    assert (play.num_slots, play.index.tolist()) == (4, [0, 1, 2, 3])
    play.set_learning_team(1)
    with pytest.raises(ValueError, match=r"'Soccer' has teams \[0, 1\], not 2"):
        play.set_learning_team(2)
