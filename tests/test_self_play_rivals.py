"""Self-play across behaviors (ML-Agents' StrikersVsGoalie): two behaviors that are one team
each play each other's snapshots, drawn by the other behavior's rules, and each is rated
against the opponent that played; on the grid soccer game of :mod:`tests.team_envs`, by the
controllers directly and through ``evtrain learn`` (both ratings written and resumed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from evtrain import Bus, ConfigError, StatsReporter
from evtrain.multiagent.copies import EpisodeResult
from evtrain.multiagent.slots import AgentSlots
from evtrain.run.environments.co_players import CoPlayerWiring
from evtrain.trainers import PPOTrainer
from evtrain.trainers.ghost import (
    ELO,
    LATEST,
    GhostController,
    face_rivals,
    rating_change,
    team_slots,
)
from evtrain.trainers.settings import NetworkSettings, PPOSettings, SelfPlaySettings
from tests.helpers import run_config
from tests.team_envs import soccer
from tests.trainers.helpers import small_ppo

STRIKERS_VS_GOALIE = {
    "Striker_0": "Striker?team=0",
    "Striker_1": "Striker?team=0",
    "Goalie_0": "Goalie?team=1",
}
"""ML-Agents' StrikersVsGoalie: two Strikers (team 0) against a Goalie (team 1)."""
SIDES = {"blue": ["Striker", 2], "purple": ["Goalie", 1]}


def slots(
    behavior: str,
    mapping: dict[str, str] = STRIKERS_VS_GOALIE,
    playing: tuple[str, ...] = ("Striker", "Goalie"),
    goalies: int = 1,
) -> AgentSlots:
    """``behavior``'s 4 copies of the soccer game, ``playing`` the behaviors with self_play."""
    copies = [soccer(("Striker", 2), ("Goalie", goalies), max_cycles=12) for _ in range(4)]
    return AgentSlots(
        copies,
        behavior,
        agent_behaviors=mapping,
        self_play=behavior in playing,
        self_play_behaviors=playing,
    )


def player(
    behavior: str, reporter: StatsReporter, **self_play: Any
) -> tuple[PPOTrainer, GhostController]:
    """A small PPO of ``behavior`` (64 slot steps per update) and its started controller."""
    settings = PPOSettings(batch_size=32, buffer_size=64, learning_rate=0.01)
    config = small_ppo(
        hyperparameters=settings,
        network_settings=NetworkSettings(hidden_units=16, num_layers=1),
        self_play=SelfPlaySettings(**self_play),
    )
    trainer = PPOTrainer(behavior, config, slots(behavior), reporter, seed=3)
    assert config.self_play is not None
    controller = GhostController(trainer, config.self_play)
    controller.start()
    return trainer, controller


def test_each_behavior_plays_the_others_snapshots_by_the_others_rules(bus: Bus) -> None:
    strikers, striker = player("Striker", StatsReporter(bus, "Striker"), team_change=64)
    goalies, goalie = player(
        "Goalie", StatsReporter(bus, "Goalie"), swap_steps=100, play_against_latest_model_ratio=0
    )
    assert (striker.seats, goalie.seats, striker.facing) == ({}, {}, None)  # one team each
    face_rivals({"Striker": strikers, "Goalie": goalies})
    # the Goalie's policy plays in the Strikers' copies, and the other way round
    in_strikers, in_goalies = goalie.seats["Striker"], striker.seats["Goalie"]
    assert (striker.facing, goalie.facing) == (in_strikers, in_goalies)
    assert strikers.envs.co_players == {"Goalie": in_strikers.opponent}
    assert goalies.envs.co_players == {"Striker": in_goalies.opponent}
    assert in_strikers.index == 0  # ratio 0: a snapshot of the Goalie's window, never LATEST
    # their current policies are not co-players there: self-play seats them
    wiring = CoPlayerWiring({"Striker": strikers, "Goalie": goalies})
    assert wiring.targets == {}
    # the Goalie's swaps count its own steps in the Strikers' copies (ML-Agents' ghost steps)
    strikers.advance()  # 64 Striker steps: 8 steps of 4 copies, one Goalie each
    assert (strikers.step, in_strikers.opponent.steps) == (64, 32)
    goalie.after_turn()
    assert in_strikers.last_swap == 0  # 32 of its 100 steps
    for _ in range(3):
        strikers.advance()
    goalie.after_turn()
    assert in_strikers.last_swap == in_strikers.opponent.steps == 128
    striker.after_turn()  # team_change passed: a behavior of one team keeps learning
    assert striker.learning_team == strikers.envs.learning_team == 0
    strikers.close()
    goalies.close()
    strikers.envs.close()
    goalies.envs.close()


def test_elo_is_rated_against_the_other_behaviors_opponent_and_moves_its_rating(
    bus: Bus,
) -> None:
    reporter = StatsReporter(bus, "Striker")
    strikers, striker = player("Striker", reporter, play_against_latest_model_ratio=1.0)
    goalies, goalie = player(
        "Goalie", StatsReporter(bus, "Goalie"), play_against_latest_model_ratio=0
    )
    face_rivals({"Striker": strikers, "Goalie": goalies})
    assert (goalie.seats["Striker"].index, striker.seats["Goalie"].index) == (0, LATEST)
    goalie.window.elos[0] = 1300.0  # the Goalie snapshot playing in the Strikers' copies
    striker.episode_ended(EpisodeResult(team=0, reward=2.0, copy=0))  # a Striker win
    gain = rating_change(1200.0, 1300.0, 1.0)
    assert striker.elo == pytest.approx(1200.0 + gain)
    assert goalie.window.elos == [pytest.approx(1300.0 - gain)]  # the snapshot lost as much
    assert goalie.elo == 1200.0
    # against the other behavior's latest policy: its own rating moves (ML-Agents' rule)
    before = striker.elo
    goalie.episode_ended(EpisodeResult(team=1, reward=-1.0, copy=2))  # a Goalie loss
    loss = rating_change(1200.0, before, 0.0)
    assert goalie.elo == pytest.approx(1200.0 + loss) and loss < 0
    assert striker.elo == pytest.approx(before - loss)
    bus.flush()
    strikers.envs.close()
    goalies.envs.close()


def refusal(behavior: str, **kwargs: Any) -> tuple[str, ...]:
    envs = slots(behavior, **kwargs)
    with pytest.raises(ConfigError) as info:
        team_slots(behavior, envs)
    envs.close()
    return info.value.problems


def test_across_behaviors_two_teams_of_one_behavior_each_are_needed() -> None:
    envs = slots("Striker")
    assert envs.self_play_teams == {0: ["Striker"], 1: ["Goalie"]}
    assert (envs.teams, envs.rivals) == ([0], ["Goalie"])
    checked: Any = team_slots("Striker", envs)  # the environments, as self-play sees them
    assert checked is envs
    envs.close()
    # the Goalie without self_play: the Strikers are one team with nobody to play
    assert refusal("Striker", playing=("Striker",)) == (
        "behaviors.Striker.self_play: the self-playing agents of the environment form 1 "
        "team(s) (team 0: Striker); evtrain's self-play plays exactly two teams against each "
        "other (ML-Agents' ELO rates two): with env_settings.agent_behaviors, make them two "
        "teams of the behavior ('Striker?team=0', 'Striker?team=1'), or a team of it against "
        "a team of another behavior with self_play ('Striker?team=0', '<other>?team=1'); or "
        "remove self_play",
    )
    both_zero = {**STRIKERS_VS_GOALIE, "Goalie_0": "Goalie?team=0"}
    assert refusal("Goalie", mapping=both_zero) == (
        "behaviors.Goalie.self_play: team 0 holds agents of self-playing behaviors 'Striker' "
        "and 'Goalie'; a self-play team is the agents of one behavior: give the behaviors "
        "different teams with env_settings.agent_behaviors ('Striker?team=0', "
        "'Goalie?team=1'), or map the agents to one behavior",
    )
    three = {**STRIKERS_VS_GOALIE, "Goalie_1": "Goalie?team=2"}
    assert refusal("Striker", mapping=three, goalies=2)[0].startswith(
        "behaviors.Striker.self_play: the self-playing agents of the environment form 3 "
        "team(s) (team 0: Striker, team 1: Goalie, team 2: Goalie); "
    )


# -- through evtrain learn -----------------------------------------------------------------------


def behavior(max_steps: int, swap_steps: int) -> dict[str, Any]:
    return {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 64, "buffer_size": 256, "learning_rate": 3e-3},
        "network_settings": {"hidden_units": 32, "num_layers": 1},
        "max_steps": max_steps,
        "time_horizon": 16,
        "summary_freq": 512,
        "checkpoint_interval": 512,
        "self_play": {"save_steps": 256, "swap_steps": swap_steps, "window": 4},
    }


def strikers_vs_goalie(max_steps: int) -> dict[str, Any]:
    """ML-Agents' StrikersVsGoalie in small: each side swaps its opponent every 256 of the
    other's steps (ML-Agents' formula: swap_steps = own agents / opponent's x 256)."""
    return {
        "behaviors": {"Striker": behavior(max_steps, 512), "Goalie": behavior(max_steps, 128)},
        "env_settings": {
            "env_id": "tests.team_envs:soccer",
            "env_kwargs": {**SIDES, "width": 5, "height": 3, "max_cycles": 20},
            "agent_behaviors": STRIKERS_VS_GOALIE,
            "num_envs": 4,
            "seed": 2,
        },
        "writers": {"jsonl": {}},
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
    }


def learn(tmp_path: Path, max_steps: int, *flags: str) -> str:
    """``evtrain learn`` of :func:`strikers_vs_goalie` (in this process, which imports the
    game); its output."""
    result = run_config(tmp_path, strikers_vs_goalie(max_steps), *flags)
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def elos(folder: Path) -> dict[int, float]:
    """The mean ``Self-play/ELO`` of each summary in ``stats.jsonl``, by step."""
    lines = [json.loads(line) for line in (folder / "stats.jsonl").read_text().splitlines()]
    return {
        line["step"]: line["stats"][ELO]["mean"]
        for line in lines
        if line.get("stats", {}).get(ELO, {}).get("num")
    }


def saved_elo(folder: Path) -> float:
    state = torch.load(folder / "checkpoint.pt", weights_only=True)
    return float(state["attachments"]["self_play"]["window"]["elo"])


def test_cli_strikers_and_goalie_both_write_elo_and_resume_both_ratings(tmp_path: Path) -> None:
    learn(tmp_path, 1024)
    run = tmp_path / "results" / "run"
    ratings = {}
    for name in ("Striker", "Goalie"):
        assert sorted(elos(run / name)) == [512, 1024]  # an ELO in every summary
        ratings[name] = saved_elo(run / name)
        assert ratings[name] != 1200.0
        assert (run / f"{name}.onnx").is_file()
    said = learn(tmp_path, 1536, "--resume")
    for name in ("Striker", "Goalie"):
        assert f"{name}: self-play resumes at ELO {ratings[name]:.3f}" in said
        assert sorted(elos(run / name)) == [512, 1024, 1536]
        assert saved_elo(run / name) != ratings[name]  # and it keeps moving
