"""Trainer settings: ML-Agents defaults, range validators, schedules, the registry."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from evtrain.trainers import (
    NetworkSettings,
    PPOSettings,
    PPOTrainer,
    RewardProviderSettings,
    SACSettings,
    SACTrainer,
    TrainerSettings,
)
from evtrain.trainers.base import linear_decay


def test_ml_agents_defaults() -> None:
    settings = TrainerSettings()
    assert attrs.asdict(settings) == {
        "trainer_type": "ppo",
        "hyperparameters": {
            "batch_size": 1024,
            "buffer_size": 10240,
            "learning_rate": 3.0e-4,
            "learning_rate_schedule": "linear",
            "beta": 5.0e-3,
            "beta_schedule": "linear",
            "epsilon": 0.2,
            "epsilon_schedule": "linear",
            "lambd": 0.95,
            "num_epoch": 3,
            "normalize_advantage": True,
            "max_grad_norm": 0.5,
            "vf_coef": 0.5,
            "shared_critic": False,
        },
        "network_settings": {
            "hidden_units": 128,
            "num_layers": 2,
            "normalize": False,
            "activation": "tanh",
            "goal_conditioning_type": "hyper",
            "vis_encode_type": "simple",
            "deterministic": False,
            "memory": None,
        },
        "reward_signals": {
            "extrinsic": {"gamma": 0.99, "strength": 1.0, "network_settings": None},
            "curiosity": None,
            "rnd": None,
            "gail": None,
        },
        "behavioral_cloning": None,
        "self_play": None,
        "evaluation": None,
        "max_steps": 500000,
        "time_horizon": 64,
        "summary_freq": 50000,
        "checkpoint_interval": 500000,
        "keep_checkpoints": 5,
        "even_checkpoints": False,
        "init_path": None,
        "threaded": False,
        "on_nonfinite": "stop",
        "info_stats": None,
        "stop": None,
    }


def test_sac_defaults_follow_trainer_type() -> None:
    settings = TrainerSettings(trainer_type="sac")
    assert settings.hyperparameters == SACSettings()
    assert attrs.asdict(SACSettings()) == {
        "batch_size": 128,
        "buffer_size": 50000,
        "buffer_init_steps": 0,
        "learning_rate": 3.0e-4,
        "learning_rate_schedule": "constant",
        "tau": 0.005,
        "steps_per_update": 1.0,
        "init_entcoef": 1.0,
        "target_entropy": None,
        "save_replay_buffer": False,
        "max_grad_norm": None,
        "reward_signal_steps_per_update": 1.0,
    }
    # ML-Agents: reward_signal_steps_per_update defaults to steps_per_update
    assert SACSettings(steps_per_update=4.0).reward_signal_steps_per_update == 4.0


def test_unset_schedules_follow_the_learning_rate_schedule() -> None:
    settings = PPOSettings(learning_rate_schedule="constant")
    assert settings.beta_schedule == settings.epsilon_schedule == "constant"
    settings = PPOSettings(learning_rate_schedule="constant", epsilon_schedule="linear")
    assert (settings.beta_schedule, settings.epsilon_schedule) == ("constant", "linear")


@pytest.mark.parametrize(
    ("cls", "options", "message"),
    [
        (PPOSettings, {"batch_size": 0}, "'batch_size' must be > 0: 0"),
        (PPOSettings, {"num_epoch": 1.5}, "'num_epoch' must be <class 'int'>"),
        (PPOSettings, {"epsilon": 1.5}, "'epsilon' must be <= 1.0: 1.5"),
        (PPOSettings, {"lambd": -0.1}, "'lambd' must be >= 0.0: -0.1"),
        (PPOSettings, {"beta": -1.0}, "'beta' must be >= 0.0: -1.0"),
        (
            PPOSettings,
            {"learning_rate_schedule": "cosine"},
            "'learning_rate_schedule' must be in ('linear', 'constant') (got 'cosine')",
        ),
        (
            NetworkSettings,
            {"goal_conditioning_type": "soft"},
            "'goal_conditioning_type' must be in ('hyper', 'none') (got 'soft')",
        ),
        (SACSettings, {"tau": 0.0}, "'tau' must be > 0.0: 0.0"),
        (SACSettings, {"buffer_init_steps": -1}, "'buffer_init_steps' must be >= 0: -1"),
        (SACSettings, {"init_entcoef": 0.0}, "'init_entcoef' must be > 0.0: 0.0"),
        (NetworkSettings, {"activation": "gelu"}, "'activation' must be in"),
        (NetworkSettings, {"hidden_units": 0}, "'hidden_units' must be > 0: 0"),
        (RewardProviderSettings, {"gamma": 1.01}, "'gamma' must be <= 1.0: 1.01"),
        (TrainerSettings, {"max_steps": 0}, "'max_steps' must be > 0: 0"),
        (TrainerSettings, {"summary_freq": -5}, "'summary_freq' must be > 0: -5"),
    ],
)
def test_validators(cls: type[Any], options: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        cls(**options)
    assert str(info.value.args[0]).startswith(message)


def test_hyperparameters_must_be_a_settings_class() -> None:
    with pytest.raises(
        TypeError,
        match="hyperparameters must be an attrs settings instance such as PPOSettings, got dict",
    ):
        TrainerSettings(hyperparameters={"batch_size": 32})


def test_registered_trainer_types() -> None:
    from evtrain.trainers.mappo import MAPPOTrainer
    from evtrain.trainers.poca import POCATrainer
    from evtrain.trainers.registry import TRAINER_TYPES
    from evtrain.trainers.settings import MAPPOSettings, POCASettings

    assert {name: (t.settings, t.load()) for name, t in TRAINER_TYPES.items()} == {
        "ppo": (PPOSettings, PPOTrainer),
        "sac": (SACSettings, SACTrainer),
        "poca": (POCASettings, POCATrainer),
        "mappo": (MAPPOSettings, MAPPOTrainer),
    }


@pytest.mark.parametrize(
    ("step", "expected"), [(0, 0.2), (25, 0.175), (50, 0.15), (100, 0.1), (150, 0.1)]
)
def test_linear_decay_reaches_its_floor_at_max_steps(step: int, expected: float) -> None:
    assert linear_decay(0.2, 0.1, step, 100) == pytest.approx(expected)


def test_linear_decay_never_raises_a_value() -> None:
    assert linear_decay(0.0, 1e-5, 50, 100) == 0.0


@pytest.mark.parametrize(
    ("batch_size", "buffer_size", "num_envs", "rollout"),
    [
        (512, 256, 1, 512),  # batch above buffer: one minibatch (ML-Agents validates nothing)
        (64, 12000, 1, 12032),  # ML-Agents' 3DBall
        (64, 128, 3, 192),
        (100, 30, 4, 100),
    ],
)
def test_every_positive_buffer_size_is_rounded_to_what_the_rollout_needs(
    batch_size: int, buffer_size: int, num_envs: int, rollout: int
) -> None:
    settings = PPOSettings(batch_size=batch_size, buffer_size=buffer_size)
    assert settings.rollout_buffer_size(num_envs) == rollout


def test_even_checkpoints_space_keep_checkpoints_over_max_steps() -> None:
    settings = TrainerSettings(max_steps=1000, keep_checkpoints=4, checkpoint_interval=300)
    assert settings.checkpoint_every == 300
    assert attrs.evolve(settings, even_checkpoints=True).checkpoint_every == 250
    tiny = TrainerSettings(max_steps=3, keep_checkpoints=5, even_checkpoints=True)
    assert tiny.checkpoint_every == 1
