"""``env_settings.shared_env`` with the group trainers (POCA, MAPPO) and self-play: each
behavior's trainer acts for its own agents in the shared step, a group trainer's groups are an
instance's agents of its behavior with their group reward, and a self-playing behavior's team
that does not learn acts with its ghost opponent, the teams swapping as ML-Agents' ghost
trainer does."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from evtrain import Bus
from evtrain.errors import ConfigError
from evtrain.events.payloads import RunStatus, StatsEvent
from evtrain.multiagent.copies import EpisodeResult
from evtrain.multiagent.shared import SharedEnvironment
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from evtrain.trainers.ghost import ELO
from evtrain.trainers.loops.group_rollout import GROUP_CUMULATIVE_REWARD
from tests.team_envs import Soccer

SOCCER = "tests.team_envs:soccer"
TWO_TEAMS = {
    "blue_0": "SoccerTwos?team=0",
    "blue_1": "SoccerTwos?team=0",
    "purple_0": "SoccerTwos?team=1",
    "purple_1": "SoccerTwos?team=1",
}
"""ML-Agents' SoccerTwos: two teams of two of one behavior."""


class PlayedSoccer(Soccer):
    """The soccer game, keeping every joint action it was given."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.played: list[dict[str, int]] = []

    def step(self, actions: dict[str, int]) -> Any:
        self.played.append({agent: int(action) for agent, action in actions.items()})
        return super().step(actions)


def test_one_team_learns_the_other_acts_with_its_opponent_and_teams_swap_between_episodes() -> None:
    # one player a team; up and down never reach the ball: every episode is truncated at 3
    env = PlayedSoccer(blue=("blue", 1), purple=("purple", 1), width=5, max_cycles=3)
    shared = SharedEnvironment(
        [env],
        ["player"],
        agent_behaviors={"blue_0": "player?team=0", "purple_0": "player?team=1"},
        self_play=["player"],
    )
    view = shared.view("player")
    assert (view.teams, view.learning_team, view.group_size, view.num_envs) == ([0, 1], 0, 1, 1)
    results: list[EpisodeResult] = []
    view.episode_listeners.append(results.append)
    seen: list[npt.NDArray[Any]] = []

    def opponent(obs: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        seen.append(np.array(obs))
        return np.full(len(obs), 2)

    view.co_players = {"player": opponent}
    obs, _ = view.reset(seed=0)
    assert obs.tolist() == [env._observe("blue_0").tolist()]  # the learning team's
    purple_first = env._observe("purple_0")
    for step in range(6):
        shared.step({"player": np.array([1])})
        if step == 0:
            view.set_learning_team(1)  # from the next episode on
    assert env.played == [{"blue_0": 1, "purple_0": 2}] * 3 + [{"purple_0": 1, "blue_0": 2}] * 3
    assert len(seen) == 6 and seen[0].shape == (1, 6)
    assert seen[0][0].tolist() == purple_first.tolist()  # the other team's own observation
    assert results == [
        EpisodeResult(team=0, reward=0.0, copy=0),
        EpisodeResult(team=1, reward=0.0, copy=0),
    ]
    assert view.learning_team == 1
    with pytest.raises(ValueError, match=r"behavior 'player' has teams \[0, 1\], not 2"):
        view.set_learning_team(2)


def test_a_shared_environment_refuses_self_play_between_two_behaviors() -> None:
    env = Soccer(blue=("Striker", 2), purple=("Goalie", 1))
    with pytest.raises(ConfigError) as info:
        SharedEnvironment(
            [env],
            ["Striker", "Goalie"],
            agent_behaviors={
                "Striker_0": "Striker?team=0",
                "Striker_1": "Striker?team=0",
                "Goalie_0": "Goalie?team=1",
            },
            self_play=["Striker", "Goalie"],
        )
    assert info.value.problems == (
        "behaviors.Striker.self_play: in a shared environment (env_settings.shared_env) "
        "self-play plays the teams of one behavior against each other; behavior 'Striker' has "
        "one team, playing behavior 'Goalie''s, which is not supported yet: remove self_play "
        "from both (each then plays against the other's current policy in the shared step), or "
        "remove env_settings.shared_env (each behavior then trains on copies of its own)",
    )


def small(kind: str, max_steps: int, summary_freq: int, **extra: Any) -> dict[str, Any]:
    """A small behavior of trainer type ``kind``: 256 steps a rollout."""
    return {
        "trainer_type": kind,
        "hyperparameters": {"batch_size": 64, "buffer_size": 256, "num_epoch": 2},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": max_steps,
        "time_horizon": 32,
        "summary_freq": summary_freq,
        "checkpoint_interval": 10**6,
        "keep_checkpoints": 1,
        **extra,
    }


def soccer_run(results: Path, behaviors: dict[str, Any], **env: Any) -> dict[str, Any]:
    """Soccer on a 5-wide field, goals scored as group rewards, 30 steps at most an episode,
    in 4 shared instances."""
    return {
        "behaviors": behaviors,
        "env_settings": {
            "env_id": SOCCER,
            "env_kwargs": {"group_reward": True, "width": 5, "max_cycles": 30},
            "num_envs": 4,
            "seed": 1,
            "shared_env": True,
            **env,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(results)},
    }


def run_recorded(options: dict[str, Any]) -> tuple[Any, list[StatsEvent]]:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(options, bus)
    return result, recorder.of(StatsEvent)


def values(event: StatsEvent, key: str) -> list[float]:
    return list(event.values[key].full_dist)


def test_a_poca_and_a_mappo_team_train_in_one_shared_step_each_with_its_group_reward(
    tmp_path: Path,
) -> None:
    behaviors = {"blue": small("poca", 1024, 512), "purple": small("mappo", 1024, 512)}
    result, stats = run_recorded(soccer_run(tmp_path, behaviors))
    assert result.status is RunStatus.COMPLETED
    assert result.steps == {"blue": 1024, "purple": 1024}  # two agents each, every step
    assert [(e.category, e.step) for e in stats] == [
        ("blue", 512),
        ("purple", 512),
        ("blue", 1024),
        ("purple", 1024),
    ]
    blue = [g for e in stats if e.category == "blue" for g in values(e, GROUP_CUMULATIVE_REWARD)]
    purple = [
        g for e in stats if e.category == "purple" for g in values(e, GROUP_CUMULATIVE_REWARD)
    ]
    # the same instance episodes, each group's reward its own: a goal is +1 to one, -1 to the other
    assert len(blue) == len(purple) > 0
    assert sorted(blue) == sorted(-g for g in purple)
    assert any(g != 0 for g in blue)  # goals were scored, and their group rewards arrived
    assert all(set(values(e, "Environment/Cumulative Reward")) == {0.0} for e in stats)
    last = {e.category: e for e in stats}
    assert "Losses/Baseline Loss" in last["blue"].values  # POCA's counterfactual baseline
    assert "Losses/Value Loss" in last["purple"].values
    for name in ("blue", "purple"):
        state = torch.load(tmp_path / "run" / name / "checkpoint.pt", weights_only=False)
        assert state["step"] == 1024


@pytest.mark.parametrize("kind", ["ppo", "poca"])
def test_self_play_in_a_shared_environment_moves_elo_and_swaps_the_learning_team(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    self_play = {"save_steps": 256, "team_change": 512, "swap_steps": 256, "window": 3}
    behaviors = {"SoccerTwos": small(kind, 2048, 512, self_play=self_play)}
    options = soccer_run(tmp_path, behaviors, agent_behaviors=TWO_TEAMS)
    with caplog.at_level(logging.DEBUG, logger="evtrain"):
        result, stats = run_recorded(options)
    assert result.steps == {"SoccerTwos": 2048}  # the learning team's two agents' steps
    assert [e.step for e in stats] == [512, 1024, 1536, 2048]
    ratings = [r for e in stats for r in values(e, ELO)]
    assert len(ratings) > 8 and set(ratings) != {1200.0}  # one per episode, and they move
    changes = [r.getMessage() for r in caplog.records if "learns from step" in r.getMessage()]
    assert changes == [
        "SoccerTwos: team 1 learns from step 512",
        "SoccerTwos: team 0 learns from step 1024",
        "SoccerTwos: team 1 learns from step 1536",
        "SoccerTwos: team 0 learns from step 2048",
    ]
    state = torch.load(tmp_path / "run" / "SoccerTwos" / "checkpoint.pt", weights_only=False)
    saved = state["attachments"]["self_play"]
    assert saved["learning_team"] == 0 and saved["last_team_change"] == 2048
    assert len(saved["window"]["snapshots"]) == 3
    if kind == "poca":  # SoccerTwos with POCA: a team is a group, its goals group rewards
        groups = [g for e in stats for g in values(e, GROUP_CUMULATIVE_REWARD)]
        assert any(g != 0 for g in groups)


def test_a_poca_group_with_agents_coming_and_going_and_a_sac_behavior_share_the_step(
    tmp_path: Path,
) -> None:
    """``Walkers``: three walkers (one leaves early, one comes late) as a POCA group, and a SAC
    guide, in one instance."""
    walker = small("poca", 66, 22)
    walker["hyperparameters"] = {"batch_size": 12, "buffer_size": 36, "num_epoch": 1}
    walker["time_horizon"] = 12
    guide = {
        "trainer_type": "sac",
        "hyperparameters": {"batch_size": 8, "buffer_size": 100, "buffer_init_steps": 8},
        "network_settings": {"hidden_units": 8, "num_layers": 1},
        "max_steps": 24,
        "summary_freq": 12,
    }
    options = {
        "behaviors": {"walker": walker, "guide": guide},
        "env_settings": {
            "env_id": "tests.multiagent_envs:made_walkers",
            "shared_env": True,
            "seed": 1,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path)},
    }
    result, stats = run_recorded(options)
    assert result.steps == {"walker": 66, "guide": 24}
    last = {e.category: e for e in stats}
    assert "Losses/Baseline Loss" in last["walker"].values  # POCA learned
    assert "Losses/Q1 Loss" in last["guide"].values  # and SAC
    # one group reward per instance episode (Walkers gives none): 6 steps an episode
    assert [len(values(e, GROUP_CUMULATIVE_REWARD)) for e in stats if e.category == "walker"] == [
        2,
        2,
        2,
    ]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_a_group_learns_to_score_against_a_team_that_learns_no_more(
    kind: str, tmp_path: Path
) -> None:
    """Blue (POCA or MAPPO) against purple, which is done after its first update and plays on
    with its final policy, on a 5x3 field: blue's group reward (goals scored minus conceded,
    per episode) rises."""
    hyperparameters = {"batch_size": 128, "buffer_size": 512, "num_epoch": 3}
    blue = small(kind, 12000, 2400, hyperparameters={**hyperparameters, "learning_rate": 1e-3})
    blue["network_settings"] = {"hidden_units": 32, "num_layers": 2}
    purple = small("ppo", 256, 256)
    options = soccer_run(tmp_path, {"blue": blue, "purple": purple})
    options["env_settings"]["env_kwargs"].update(height=3, max_cycles=20)
    _, stats = run_recorded(options)
    means = [
        float(np.mean(values(e, GROUP_CUMULATIVE_REWARD))) for e in stats if e.category == "blue"
    ]
    assert len(means) == 5
    assert np.mean(means[-2:]) > means[0] + 0.1, (kind, means)
