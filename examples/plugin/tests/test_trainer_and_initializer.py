from __future__ import annotations

import pytest
from evtrain_example_plugin.reward_clip import RewardClipPPO, RewardClipSettings, trainer_types
from evtrain_example_plugin.slurm import SlurmInitializer, slurm_initializer

from evtrain import Bus, ConfigError, RunOptions, StatsReporter
from evtrain.trainers.envs import make_vector_env
from evtrain.trainers.settings import TrainerSettings


def test_registration_returns_the_trainer_type_by_name() -> None:
    assert trainer_types() == {"ppo_reward_clip": RewardClipPPO}
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
    assert trainer.rewards.shape == (32, 2)
    assert (trainer.rewards == 0.25).all()


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
