"""``environment_parameters`` on PettingZoo environments: each copy behind a behavior's agent
slots set at every reset (an attribute, or a reset option), with the draws a Gymnasium
sub-environment of the same seed gets, a lesson change from each copy's next episode, a CLI
run whose lesson moves and whose environments see it, and a self-play run whose lesson moves
on its ELO (``completion_criteria.measure: Elo``)."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain.config.environment_parameters import Constant
from evtrain.config.options import EnvironmentSettings
from evtrain.multiagent.slots import AgentSlots
from evtrain.run.environments.envs import make_envs
from evtrain.run.parameters.env_parameters import EnvironmentParameters, with_parameters
from evtrain.trainers.settings import TrainerSettings
from tests.curriculum_envs import EPISODE_LENGTH, SAMPLERS, ParameterEnv
from tests.helpers import run_config

GAMES = {
    # env_id: (its class, the behavior trained, agent_behaviors)
    "tests.curriculum_envs:parameter_game": ("ParameterGame", "player", {}),
    "tests.curriculum_envs:parameter_turns": (
        "ParameterTurns",
        "first",
        {"player_0": "first", "player_1": "second"},
    ),
}


def slots(env_id: str, copies: int) -> AgentSlots:
    _, behavior, agent_behaviors = GAMES[env_id]
    settings = EnvironmentSettings(env_id=env_id, num_envs=copies, agent_behaviors=agent_behaviors)
    names = {behavior, *agent_behaviors.values()}
    envs = make_envs(
        settings,
        functools.partial(with_parameters, samplers=SAMPLERS),
        behavior=behavior,
        behaviors={name: TrainerSettings() for name in names},
    )
    assert isinstance(envs, AgentSlots)
    return envs


@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_each_copy_is_set_at_its_resets_and_a_new_lesson_from_its_next_episode(
    env_id: str,
) -> None:
    envs = slots(env_id, copies=2)
    assert envs.call("environment_class") == (GAMES[env_id][0],) * 2
    targets = {"bonus": "attribute", "tilt": "option"}
    assert envs.call("environment_parameter_targets") == (targets, targets)

    envs.reset(seed=3)
    values = envs.call("values")
    # copy k draws what a Gymnasium sub-environment reset with seed 3 + k draws
    for k, drawn in enumerate(values):
        gymnasium = EnvironmentParameters(ParameterEnv(), SAMPLERS)
        gymnasium.reset(seed=3 + k)
        assert drawn == gymnasium.values and 1.0 <= drawn["bonus"] < 2.0
    assert values[0] != values[1]
    games = envs.call("unwrapped")
    assert [game.log.starts for game in games] == [[(v["bonus"], 0.5)] for v in values]
    per_slot = np.repeat([v["bonus"] + 0.5 for v in values], envs.group_size)

    actions = np.zeros(envs.num_envs, dtype=np.int64)
    for step in range(1, EPISODE_LENGTH + 1):
        _, rewards, terminated, _, infos = envs.step(actions)
        # the episode under way keeps its values, the lesson changed after its first step
        assert rewards.tolist() == pytest.approx(per_slot.tolist())
        assert terminated.all() == infos["episode_over"].all() == (step == EPISODE_LENGTH)
        if step == 1:
            envs.call("set_environment_parameters", {"bonus": Constant(value=5.0)})
    assert [game.log.starts[1:] for game in games] == [[(5.0, 0.5)]] * 2
    assert envs.call("values") == ({"bonus": 5.0, "tilt": 0.5},) * 2
    _, rewards, *_ = envs.step(actions)
    assert rewards.tolist() == [5.5] * envs.num_envs
    envs.close()


def learn_cli(tmp_path: Path, options: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``evtrain learn`` of ``options`` in ``tmp_path`` (in this process, which imports the
    tests' environments)."""
    return run_config(tmp_path, options)


def scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [(s.step, s.value) for s in accumulator.Scalars(tag)]


def test_cli_curriculum_on_a_pettingzoo_environment_moves_and_its_copies_see_it(
    tmp_path: Path,
) -> None:
    record = tmp_path / "resets.jsonl"
    # 2 copies x 2 players: 4 slots; a rollout of 32 slot steps is 2 episodes of each copy.
    criteria = {
        "behavior": "player",
        "measure": "reward",
        "threshold": 5.0,
        "min_lesson_length": 8,
        "signal_smoothing": False,
    }
    options = {
        "behaviors": {
            "player": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 16, "buffer_size": 32, "num_epoch": 1},
                "network_settings": {"hidden_units": 8, "num_layers": 1},
                "max_steps": 128,
                "time_horizon": 8,
                "summary_freq": 32,
                "checkpoint_interval": 128,
                "keep_checkpoints": 1,
            }
        },
        "env_settings": {
            "env_id": "tests.curriculum_envs:parameter_game",
            "env_kwargs": {"record": str(record)},
            "num_envs": 2,
            "seed": 1,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
        "environment_parameters": {
            "bonus": {
                "curriculum": [
                    # every return is 4 x (1 + 0.5) = 6 > 5: done at the first summary, after
                    # 8 episodes (2 of each slot)
                    {"name": "one", "value": 1.0, "completion_criteria": criteria},
                    {"name": "two", "value": 2.0},
                ]
            },
            "tilt": 0.5,
        },
    }
    result = learn_cli(tmp_path, options)
    assert result.returncode == 0, result.stderr
    log = result.stdout + result.stderr
    assert (
        "environment_parameters.tilt: tests.curriculum_envs:parameter_game (ParameterGame) has "
        "no attribute 'tilt': its value is passed to reset() as options['tilt'] only (ignored "
        "unless the environment reads it)"
    ) in log
    assert "Parameter 'bonus' is now in lesson 1 ('two') after player's step 32" in log
    starts = [json.loads(line) for line in record.read_text().splitlines()]
    # each copy's first reset, its resets at its episodes' ends (every 4 steps, 8 of a
    # rollout), one in the step that ended the summary's last episodes still in lesson "one"
    assert starts[:6] == [{"bonus": 1.0, "tilt": 0.5}] * 6
    assert starts[6:] and all(s == {"bonus": 2.0, "tilt": 0.5} for s in starts[6:])
    run = tmp_path / "results" / "run"
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    assert status["bonus"] == {"lesson_num": 1}
    lessons = scalars(run / "player", "Environment/Lesson Number/bonus")
    assert lessons == [(32, 0.0), (64, 1.0), (96, 1.0), (128, 1.0)]
    returns = [value for _, value in scalars(run / "player", "Environment/Cumulative Reward")]
    assert returns[0] == 6.0 and returns[-1] == 10.0


def summaries(folder: Path) -> dict[int, dict[str, Any]]:
    """The stats of each summary in the behavior's ``stats.jsonl``, by step."""
    lines = [json.loads(line) for line in (folder / "stats.jsonl").read_text().splitlines()]
    return {line["step"]: line["stats"] for line in lines if "stats" in line}


def test_cli_an_elo_criterion_moves_a_self_play_curriculum_on_a_pettingzoo_game(
    tmp_path: Path,
) -> None:
    # Countdown's first player wins at once when the counter starts at 1: team 0 (player_0)
    # learns all run (team_change beyond max_steps) and every game is rated (no game against
    # the latest policy), so its ELO passes 1210 within the first few of the 64 games before
    # the first summary.  The next lesson starts the counter at 7: longer games.
    criteria = {"behavior": "player", "measure": "Elo", "threshold": 1210.0}
    self_play = {
        "save_steps": 64,
        "swap_steps": 64,
        "team_change": 100_000,
        "play_against_latest_model_ratio": 0.0,
        "initial_elo": 1200.0,
    }
    options = {
        "behaviors": {
            "player": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 1},
                "network_settings": {"hidden_units": 8, "num_layers": 1},
                "max_steps": 256,
                "time_horizon": 8,
                "summary_freq": 64,
                "checkpoint_interval": 256,
                "keep_checkpoints": 1,
                "self_play": self_play,
            }
        },
        "env_settings": {"env_id": "tests.multiagent_envs:countdown", "num_envs": 4, "seed": 1},
        "writers": {"jsonl": {}},
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
        "environment_parameters": {
            "start": {
                "curriculum": [
                    {"name": "first_wins", "value": 1, "completion_criteria": criteria},
                    {"name": "full", "value": 7},
                ]
            }
        },
    }
    result = learn_cli(tmp_path, options)
    assert result.returncode == 0, result.stderr
    assert "Parameter 'start' is now in lesson 1 ('full') after player's step 64" in (
        result.stdout + result.stderr
    )
    run = tmp_path / "results" / "run"
    stats = summaries(run / "player")
    assert sorted(stats) == [64, 128, 192, 256]
    lessons = [stats[step]["Environment/Lesson Number/start"]["mean"] for step in sorted(stats)]
    assert lessons == [0.0, 1.0, 1.0, 1.0]
    first = stats[64]
    assert first["Self-play/ELO"]["value"] > 1210.0
    assert set(first["Environment/Cumulative Reward"]["values"]) == {1.0}  # won at once
    assert first["Environment/Episode Length"]["mean"] == 1.0
    assert stats[256]["Environment/Episode Length"]["mean"] > 1.0  # the counter starts at 7
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    assert status["start"] == {"lesson_num": 1}
