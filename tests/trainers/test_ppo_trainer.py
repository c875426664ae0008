"""PPO end to end: it learns CartPole, reports ML-Agents' stats, handles Box actions and both
Gymnasium autoreset modes, bootstraps truncated episodes from the final observation."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain import StatsAggregationMethod, StatsPropertyType
from evtrain.trainers import (
    NetworkSettings,
    PPOSettings,
    PPOTrainer,
    SACSettings,
    make_vector_env,
)
from evtrain.trainers.optim import LEARNING_RATE_FLOOR
from evtrain.trainers.ppo import BETA_FLOOR, EPSILON_FLOOR
from tests.trainers.helpers import (
    PPO_KEYS,
    Recording,
    counting_envs,
    make_envs,
    small_ppo,
    zoo_cartpole,
)


def test_learns_cartpole_and_reports_every_summary_period(recording: Recording) -> None:
    envs = make_vector_env("CartPole-v1", 8)
    trainer = PPOTrainer("Test", zoo_cartpole(), envs, recording.reporter, seed=1)
    returns: list[float] = []
    while trainer.step < 20_000:
        trainer.advance()
    recording.flush()
    envs.close()

    events = recording.stats
    assert [e.step for e in events] == [5000, 10000, 15000, 20000]
    assert all(e.category == "Test" for e in events)
    for event in events:
        assert set(event.values) == PPO_KEYS
        returns += event.values["Environment/Cumulative Reward"].full_dist
    assert events[-1].values["Step"].aggregated_value == trainer.step == 20224
    reward = events[-1].values["Environment/Cumulative Reward"]
    assert reward.aggregation_method is StatsAggregationMethod.HISTOGRAM
    assert events[-1].values["Is Training"].aggregated_value == 1.0
    # Linear schedules over max_steps 100k: the clip range falls from 0.2 towards 0.1.
    epsilon = events[-1].values["Policy/Epsilon"].aggregated_value
    assert 0.17 < epsilon < 0.19
    assert events[-1].values["Policy/Beta"].aggregated_value == 0.0
    assert np.mean(returns[-20:]) > 150, returns[-20:]

    [prop] = recording.properties
    assert prop.property_type is StatsPropertyType.HYPERPARAMETERS
    assert prop.value["hyperparameters"]["lambd"] == 0.8
    assert prop.value["reward_signals"] == {"extrinsic": {"gamma": 0.98, "strength": 1.0}}


def test_schedules_are_taken_at_update_time(recording: Recording) -> None:
    # Two 64-step rollouts over max_steps 128.  As in ML-Agents and SB3, an update uses the
    # scheduled values of the step count after its rollout: half decayed for the first update
    # (step 64), the floors for the second (step 128 = max_steps), not 0.2 and 0.15.
    settings = small_ppo(
        hyperparameters=PPOSettings(
            batch_size=32, buffer_size=64, num_epoch=1, learning_rate=1e-3, beta=1e-2, epsilon=0.2
        ),
        max_steps=128,
    )
    envs = make_vector_env("CartPole-v1", 2)
    trainer = PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    learning_rates = []
    while not trainer.should_stop:
        trainer.advance()
        learning_rates.append(trainer.algorithm.optimizer.lr)
    recording.flush()
    envs.close()

    assert [e.step for e in recording.stats] == [64, 128]
    first, last = (e.values for e in recording.stats)
    assert learning_rates == pytest.approx([(1e-3 + LEARNING_RATE_FLOOR) / 2, LEARNING_RATE_FLOOR])
    assert first["Policy/Learning Rate"].aggregated_value == pytest.approx(learning_rates[0])
    assert first["Policy/Epsilon"].aggregated_value == pytest.approx((0.2 + EPSILON_FLOOR) / 2)
    assert first["Policy/Beta"].aggregated_value == pytest.approx((1e-2 + BETA_FLOOR) / 2)
    assert last["Policy/Learning Rate"].aggregated_value == pytest.approx(LEARNING_RATE_FLOOR)
    assert last["Policy/Epsilon"].aggregated_value == pytest.approx(EPSILON_FLOOR)
    assert last["Policy/Beta"].aggregated_value == pytest.approx(BETA_FLOOR)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_box_actions_on_pendulum(recording: Recording, mode: AutoresetMode) -> None:
    settings = small_ppo(
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, normalize=True)
    )
    envs = make_envs("Pendulum-v1", 2, mode)
    trainer = PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    for _ in range(8):  # 256 steps per environment: one 200-step episode each (truncated)
        trainer.advance()
    recording.flush()

    values: dict[str, list[float]] = {}
    for event in recording.stats:
        for key, summary in event.values.items():
            values.setdefault(key, []).extend(summary.full_dist)
    assert set(values) == PPO_KEYS
    assert values["Environment/Episode Length"] == [200.0, 200.0]
    assert all(np.isfinite(v).all() for v in values.values())
    # NEXT_STEP spends one vector step per episode end on the reset, which is no transition.
    assert trainer.step == (512 if mode is AutoresetMode.SAME_STEP else 510)
    assert trainer.agent.normalizer.count.item() == 512

    policy = trainer.policy_module()
    obs = torch.tensor(np.asarray(trainer.next_obs), dtype=torch.float32)
    action = policy(obs)
    assert action.shape == (2, 1)
    assert ((action >= -2.0) & (action <= 2.0)).all()
    envs.close()


def test_policy_module_bakes_in_observation_normalisation(recording: Recording) -> None:
    settings = small_ppo(
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, normalize=True)
    )
    envs = make_vector_env("CartPole-v1", 2)
    trainer = PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    trainer.advance()
    agent = trainer.agent
    obs = torch.randn(5, 4)
    mean = agent.normalizer.mean.float()
    std = (agent.normalizer.var + 1e-8).sqrt().float()
    expected_x = ((obs - mean) / std).clamp(-5, 5)
    expected = agent.actor(expected_x).argmax(-1)

    policy = trainer.policy_module()
    assert not policy.training
    assert torch.equal(policy(obs), expected)
    assert agent.normalizer.count.item() == 64
    envs.close()


def bootstrap_trainer(recording: Recording, mode: AutoresetMode) -> PPOTrainer:
    # One environment whose episodes are truncated after 3 steps; one 4-step rollout.
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=4, buffer_size=4, lambd=0.5),
        time_horizon=4,
    )
    return PPOTrainer("Test", settings, counting_envs(mode), recording.reporter, seed=0)


def test_truncation_bootstraps_from_final_observation_same_step(recording: Recording) -> None:
    trainer = bootstrap_trainer(recording, AutoresetMode.SAME_STEP)
    next_value = trainer._collect_rollout()
    # Observations 0, 1, 2 | reset 0: step 2 is truncated with final observation [3].
    assert trainer.rollout.b_obs[:, 0, 0].tolist() == [0.0, 1.0, 2.0, 0.0]
    with torch.no_grad():
        v_final = trainer.agent.value(torch.tensor([[3.0]])).item()
    assert trainer.rollout.truncated[:, 0].tolist() == [False, False, True, False]
    assert trainer.rollout.bootstrap[2, 0] == pytest.approx(v_final)
    assert trainer.rollout.valid.all()

    advantages, _ = trainer._advantages(next_value)
    v = trainer.rollout.b_values[:, 0].tolist()
    gamma, lambd = 0.99, 0.5
    delta2 = 1 + gamma * v_final - v[2]
    delta1 = 1 + gamma * v[2] - v[1]
    assert advantages[2, 0].item() == pytest.approx(delta2, rel=1e-5)
    assert advantages[1, 0].item() == pytest.approx(delta1 + gamma * lambd * delta2, rel=1e-5)


def test_truncation_bootstraps_from_final_observation_next_step(recording: Recording) -> None:
    trainer = bootstrap_trainer(recording, AutoresetMode.NEXT_STEP)
    next_value = trainer._collect_rollout()
    # Observations 0, 1, 2, 3 (final): step 3 only resets and is no transition.
    assert trainer.rollout.b_obs[:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert trainer.rollout.valid[:, 0].tolist() == [True, True, True, False]
    assert trainer.step == 3

    advantages, _ = trainer._advantages(next_value)
    v = trainer.rollout.b_values[:, 0].tolist()  # v[3] = V(final observation)
    assert advantages[2, 0].item() == pytest.approx(1 + 0.99 * v[3] - v[2], rel=1e-5)


def test_time_horizon_cuts_the_rollout_into_bootstrapped_trajectories(
    recording: Recording,
) -> None:
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=8, buffer_size=8, lambd=0.5), time_horizon=4
    )
    trainer = PPOTrainer(
        "Test", settings, counting_envs(AutoresetMode.SAME_STEP, 1, 100), recording.reporter, seed=0
    )
    next_value = trainer._collect_rollout()
    advantages, _ = trainer._advantages(next_value)
    v = trainer.rollout.b_values[:, 0].tolist()
    # Step 3 ends a 4-step trajectory: its target is r + gamma V(s4), nothing flows back.
    assert advantages[3, 0].item() == pytest.approx(1 + 0.99 * v[4] - v[3], rel=1e-5)


def test_buffer_size_is_rounded_up_to_what_the_rollout_needs(
    recording: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    settings = small_ppo(hyperparameters=PPOSettings(batch_size=32, buffer_size=96))
    envs = make_vector_env("CartPole-v1", 5)
    with caplog.at_level(logging.INFO, logger="evtrain"):
        trainer = PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    assert (trainer.hp.buffer_size, trainer.num_steps) == (160, 32)
    assert settings.hyperparameters == PPOSettings(batch_size=32, buffer_size=96)  # kept
    assert caplog.messages == [
        "behaviors.Test.hyperparameters.buffer_size: 96 rounded up to 160, a multiple of "
        "batch_size (32) and of the number of environments (5)"
    ]
    envs.close()


@pytest.mark.parametrize(
    ("buffer_size", "batch_size", "num_envs", "expected"),
    [
        (12000, 64, 1, 12032),  # ML-Agents' 3DBall
        (256, 64, 3, 384),
        (128, 64, 4, 128),
        (64, 64, 1, 64),
    ],
)
def test_rollout_buffer_size(
    buffer_size: int, batch_size: int, num_envs: int, expected: int
) -> None:
    hp = PPOSettings(batch_size=batch_size, buffer_size=buffer_size)
    assert hp.rollout_buffer_size(num_envs) == expected


def test_sac_hyperparameters_are_refused(recording: Recording) -> None:
    envs = make_vector_env("CartPole-v1", 1)
    settings = small_ppo(trainer_type="sac")
    settings.hyperparameters = SACSettings()
    with pytest.raises(
        TypeError,
        match="PPOTrainer for behavior 'Test' needs hyperparameters "
        "of type PPOSettings, got SACSettings",
    ):
        PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    envs.close()
