"""Environments whose observation is a ``Discrete`` index train on its one-hot encoding:
PettingZoo's rock-paper-scissors and Gymnasium's FrozenLake, through ``evtrain learn``, their
exported policies taking the one-hot row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest
import torch
import yaml
from gymnasium import spaces

from evtrain.cli import main
from evtrain.trainers.discrete_observations import one_hot
from evtrain.trainers.observations import observation_layout, policy_inputs
from tests.helpers import tensorboard_steps


def learn(tmp_path: Path, env: dict[str, Any], *behaviors: str, **more: Any) -> Path:
    """``evtrain learn`` of a tiny PPO per behavior on ``env`` for 384 steps; the run folder."""
    settings = {
        **more,
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 32, "buffer_size": 128, "num_epoch": 1},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": 384,
        "time_horizon": 16,
        "summary_freq": 128,
    }
    options = {
        "behaviors": {behavior: settings for behavior in behaviors},
        "env_settings": {"seed": 1, "num_envs": 2, **env},
    }
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(options))
    results = tmp_path / "results"
    flags = ["--run-id", "run", "--results-dir", str(results)]
    assert main(["learn", str(config), *flags]) == 0
    return results / "run"


def actions_of(model: Path, obs: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    assert (given.name, given.shape) == ("obs", ["batch", obs.shape[1]])
    actions: np.ndarray = session.run(None, {"obs": obs})[0]
    return actions


def test_rock_paper_scissors_trains_on_the_one_hot_of_the_opponents_last_move(
    tmp_path: Path,
) -> None:
    """PettingZoo's rps_v2 observes Discrete(4): the opponent's last move (3: none yet).  Two
    behaviors, so that each acts as the co-player in the other's copies."""
    players = {"player_0": "first", "player_1": "second"}
    run = learn(
        tmp_path, {"env_id": "classic/rps-v2", "agent_behaviors": players}, *players.values()
    )
    for behavior in players.values():
        steps = tensorboard_steps(run / behavior, "Environment/Cumulative Reward")
        assert steps == [128, 256, 384]
        chosen = actions_of(run / f"{behavior}.onnx", one_hot(np.arange(4), 4))
        assert chosen.shape == (4,) and set(chosen.tolist()) <= {0, 1, 2}


def test_frozen_lake_trains_and_evaluates_on_the_one_hot_of_its_square(tmp_path: Path) -> None:
    """Gymnasium's FrozenLake-v1 observes Discrete(16): the square the agent stands on.  The
    evaluation plays the policy on observations it encodes the same way."""
    evaluation = {"every": 128, "episodes": 2}
    run = learn(tmp_path, {"env_id": "FrozenLake-v1"}, "FrozenLake", evaluation=evaluation)
    assert tensorboard_steps(run / "FrozenLake", "Environment/Cumulative Reward") == [128, 256, 384]
    assert tensorboard_steps(run / "FrozenLake", "Evaluation/Mean Episode Length") == [
        128,
        256,
        384,
    ]
    chosen = actions_of(run / "FrozenLake.onnx", one_hot(np.arange(16), 16))
    assert chosen.shape == (16,) and set(chosen.tolist()) <= {0, 1, 2, 3}


def test_the_encoding_is_one_column_per_value_from_the_spaces_start() -> None:
    np.testing.assert_array_equal(
        one_hot(np.array([2, 0, 3]), 4),
        [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]],
    )
    np.testing.assert_array_equal(one_hot([-1, 1], 3, first=-1), [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(ValueError, match=r"outside Discrete\(3, start=0\)"):
        one_hot([3], 3)


def test_a_discrete_part_is_n_one_hot_columns_of_the_row_and_of_the_policys_input() -> None:
    space = spaces.Dict({"position": spaces.Box(-1.0, 1.0, (2,)), "square": spaces.Discrete(3)})
    layout = observation_layout(space)
    assert (layout.size, layout.vector_size, layout.plain) == (5, 5, True)
    obs = {"position": np.array([[0.5, -0.5], [0.0, 1.0]]), "square": np.array([2, 0])}
    np.testing.assert_array_equal(layout.rows(obs), [[0.5, -0.5, 0, 0, 1], [0, 1, 1, 0, 0]])
    inputs = policy_inputs(space, obs)
    np.testing.assert_array_equal(inputs["square"], [[0, 0, 1], [1, 0, 0]])
    alone = observation_layout(spaces.Discrete(3, start=1))
    np.testing.assert_array_equal(alone.rows(np.array([1, 3])), [[1, 0, 0], [0, 0, 1]])
    tensor = alone.tensor(np.array([2]), torch.device("cpu"))
    assert tensor.tolist() == [[0.0, 1.0, 0.0]]
    np.testing.assert_array_equal(
        policy_inputs(spaces.Discrete(3, start=1), [3])["obs"], [[0, 0, 1]]
    )
