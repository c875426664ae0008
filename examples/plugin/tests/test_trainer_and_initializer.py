from __future__ import annotations

from typing import Any

import pytest
import torch
from evtrain_example_plugin.a2c import A2C, A2CSettings, A2CTrainer
from evtrain_example_plugin.reward_clip import RewardClipPPO, RewardClipSettings, trainer_types
from evtrain_example_plugin.slurm import SlurmInitializer, slurm_initializer

from evtrain import Bus, ConfigError, RunOptions, StatsEvent, StatsReporter, signals
from evtrain.trainers.envs import make_vector_env
from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.settings import NetworkSettings, TrainerSettings


def test_registration_returns_the_trainer_type_by_name() -> None:
    assert trainer_types() == {"ppo_reward_clip": RewardClipPPO, "a2c": A2CTrainer}
    assert RewardClipPPO.settings_type is RewardClipSettings


def test_reward_clip_must_be_positive() -> None:
    with pytest.raises(ValueError, match="reward_clip: expected a number above 0, got -1"):
        RewardClipSettings(reward_clip=-1.0)


def test_rewards_are_clipped_before_the_advantages() -> None:
    settings = TrainerSettings(
        trainer_type="ppo_reward_clip",
        hyperparameters=RewardClipSettings(batch_size=32, buffer_size=64, reward_clip=0.25),
        max_steps=64,
        time_horizon=32,
    )
    envs = make_vector_env("CartPole-v1", 2)
    try:
        with Bus() as bus:
            reporter = StatsReporter(bus, "CartPole")
            trainer = RewardClipPPO("CartPole", settings, envs, reporter, seed=0)
            trainer.advance()
    finally:
        envs.close()
    # CartPole pays 1 per step: every reward the advantages saw was clipped to 0.25
    assert trainer.rollout.rewards.shape == (32, 2)
    assert (trainer.rollout.rewards == 0.25).all()


def test_slurm_initializer_outside_slurm_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_PORT", "29500")
    initializer = slurm_initializer()
    assert isinstance(initializer, SlurmInitializer)
    with pytest.raises(ConfigError) as info:
        initializer.load(RunOptions())
    assert str(info.value) == (
        "plugins.initializer: 'slurm' needs the variables SLURM_PROCID, SLURM_NTASKS, "
        "MASTER_ADDR; start the run with srun, and export MASTER_ADDR and MASTER_PORT in the "
        "job script"
    )


def a2c(bus: Bus, envs: Any) -> A2CTrainer:
    settings = TrainerSettings(
        trainer_type="a2c",
        hyperparameters=A2CSettings(buffer_size=16),
        network_settings=NetworkSettings(hidden_units=16, num_layers=1),
        max_steps=160,
        summary_freq=80,
    )
    return A2CTrainer("CartPole", settings, envs, StatsReporter(bus, "CartPole"), seed=0)


def test_a2c_is_the_on_policy_loop_and_one_gradient_step_per_rollout() -> None:
    stats: list[StatsEvent] = []
    envs = [make_vector_env("CartPole-v1", 2) for _ in range(2)]
    try:
        with Bus() as bus:
            bus.connect(signals.stats, stats.append)
            trainer = a2c(bus, envs[0])
            agent = trainer.algorithm.agent
            before = {k: p.detach().clone() for k, p in agent.named_parameters()}
            for _ in range(5):  # 5 rollouts of 8 steps in each of 2 environments
                trainer.advance()
            resumed = a2c(bus, envs[1])
            resumed.load_state_dict(trainer.state_dict())
            bus.flush()
    finally:
        for env in envs:
            env.close()
    assert isinstance(trainer, OnPolicyTrainer) and isinstance(trainer.algorithm, A2C)
    assert trainer.agent is agent  # the loop acts with the algorithm's actor-critic
    assert trainer.step == resumed.step == 80
    assert trainer.num_steps == 8  # the loop's rollout: 8 steps of each of 2 environments
    moved = {k for k, p in agent.named_parameters() if not torch.equal(p, before[k])}
    assert moved == set(before) - {"log_std"}  # (a Discrete policy has no standard deviation)
    assert [event.step for event in stats] == [80]
    assert {"Losses/Policy Loss", "Losses/Value Loss", "Policy/Entropy"} <= set(stats[0].values)
    saved, loaded = trainer.state_dict(), resumed.state_dict()
    for key in ("agent", "optimizer"):
        assert repr(saved[key]) == repr(loaded[key])
