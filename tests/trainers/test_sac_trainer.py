"""SAC end to end on Pendulum-v1: warm-up, updates, stats, entropy tuning, export view."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain.errors import SpaceMismatchError
from evtrain.trainers import NetworkSettings, SACSettings, SACTrainer, make_vector_env
from evtrain.trainers.sac import SquashedGaussianActor
from tests.action_envs import unbounded_pendulum
from tests.trainers.helpers import Recording, make_envs, small_sac

SAC_KEYS = {
    "Losses/Policy Loss",
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Policy/Entropy",
    "Policy/Entropy Coeff",
    "Policy/Extrinsic Value Estimate",
    "Policy/Learning Rate",
}


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_runs_on_pendulum_and_reports(recording: Recording, mode: AutoresetMode) -> None:
    envs = make_envs("Pendulum-v1", 2, mode)
    trainer = SACTrainer("Test", small_sac(), envs, recording.reporter, seed=0)
    while trainer.step < 420:  # two 200-step episodes per environment end
        trainer.advance()
    recording.flush()
    envs.close()

    events = recording.stats
    assert [e.step for e in events] == [100, 200, 300, 400]
    # Warm-up: 100 random steps, then one gradient step per environment step.
    assert set(events[0].values) == {"Is Training", "Step"}
    assert set(events[1].values) >= SAC_KEYS
    assert trainer.num_updates == trainer.step - 100
    assert len(trainer.replay) == trainer.step
    for event in events[1:]:
        for key in SAC_KEYS:
            assert math.isfinite(event.values[key].aggregated_value), key
    episodes = events[-1].values["Environment/Episode Length"]
    assert episodes.full_dist == (200.0, 200.0)
    alpha = events[-1].values["Policy/Entropy Coeff"].aggregated_value
    assert 0.0 < alpha < 1.0  # tuned down from init_entcoef 1.0
    # The final observation, not the reset one, is what a truncated transition leads to.
    terminal = trainer.replay.terminated[: len(trainer.replay)]
    assert not terminal.any()  # Pendulum only ever truncates


def test_policy_module_acts_within_the_action_bounds(recording: Recording) -> None:
    envs = make_vector_env("Pendulum-v1", 1)
    trainer = SACTrainer("Test", small_sac(), envs, recording.reporter, seed=0)
    policy = trainer.policy_module()
    obs = torch.randn(64, 3) * 10
    action = policy(obs)
    assert action.shape == (64, 1)
    assert ((action > -2.0) & (action < 2.0)).all()
    with torch.no_grad():
        expected = torch.tanh(trainer.algorithm.networks.actor.net(obs)[:, :1]) * 2.0
    torch.testing.assert_close(action, expected)
    envs.close()


def test_steps_per_update_spaces_out_gradient_steps(recording: Recording) -> None:
    settings = small_sac(
        hyperparameters=SACSettings(batch_size=16, buffer_init_steps=20, steps_per_update=4.0)
    )
    envs = make_vector_env("Pendulum-v1", 2)
    trainer = SACTrainer("Test", settings, envs, recording.reporter, seed=0)
    for _ in range(50):
        trainer.advance()
    assert trainer.num_updates == (100 - 20) // 4
    envs.close()


def test_unbounded_actions_are_refused(recording: Recording) -> None:
    envs = gym.vector.SyncVectorEnv([unbounded_pendulum])
    with pytest.raises(SpaceMismatchError) as info:
        SACTrainer("Test", small_sac(), envs, recording.reporter, seed=0)
    assert str(info.value) == (
        "SAC needs a bounded Box, a Discrete or a MultiDiscrete action space, got "
        "Box(-inf, inf, (1,), float32); give the Box finite bounds, or use trainer_type: ppo"
    )
    envs.close()


def test_squashed_gaussian_log_prob_matches_change_of_variables() -> None:
    actor = SquashedGaussianActor(
        3, 2, NetworkSettings(hidden_units=8, num_layers=1), torch.Generator().manual_seed(0)
    )
    x = torch.randn(6, 3)
    action, log_prob = actor(x, torch.Generator().manual_seed(1))
    mean, log_std = actor.net(x).chunk(2, dim=-1)
    log_std = -5.0 + 3.5 * (torch.tanh(log_std) + 1)
    u = torch.atanh(action.double().clamp(-1 + 1e-12, 1 - 1e-12))
    normal: Any = torch.distributions.Normal(mean.double(), log_std.exp().double())
    reference = normal.log_prob(u)
    reference = (reference - torch.log1p(-action.double().square())).sum(-1)
    torch.testing.assert_close(log_prob.double(), reference, rtol=1e-4, atol=1e-4)
    assert np.all(np.abs(action.detach().numpy()) < 1.0)
