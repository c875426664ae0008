"""Helpers of the trainer tests: settings builders, a recording bus, small environments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from evtrain import Bus, PropertyEvent, StatsEvent, StatsReporter, signals
from evtrain.trainers import (
    NetworkSettings,
    PPOSettings,
    RewardProviders,
    RewardProviderSettings,
    SACSettings,
    TrainerSettings,
)


class Recording:
    """A bus with recording subscribers on ``stats`` and ``hyperparameters``."""

    def __init__(self, bus: Bus, category: str) -> None:
        self.bus = bus
        self.stats: list[StatsEvent] = []
        self.properties: list[PropertyEvent] = []
        bus.connect(signals.stats, self.stats.append)
        bus.connect(signals.hyperparameters, self.properties.append)
        self.reporter = StatsReporter(bus, category)

    def flush(self) -> None:
        self.bus.flush()


def zoo_cartpole(**overrides: Any) -> TrainerSettings:
    """rl-zoo's PPO CartPole-v1 hyperparameters (8 environments)."""
    options: dict[str, Any] = dict(
        trainer_type="ppo",
        hyperparameters=PPOSettings(
            batch_size=256,
            buffer_size=256,
            learning_rate=1e-3,
            beta=0.0,
            epsilon=0.2,
            lambd=0.8,
            num_epoch=20,
        ),
        network_settings=NetworkSettings(hidden_units=64, num_layers=2),
        reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=0.98)),
        max_steps=100_000,
        time_horizon=32,
        summary_freq=5000,
    )
    options.update(overrides)
    return TrainerSettings(**options)


def small_ppo(**overrides: Any) -> TrainerSettings:
    """A tiny PPO configuration for smoke tests (2 environments, 64-step buffer)."""
    options: dict[str, Any] = dict(
        trainer_type="ppo",
        hyperparameters=PPOSettings(batch_size=32, buffer_size=64, num_epoch=2),
        network_settings=NetworkSettings(hidden_units=16, num_layers=1),
        max_steps=10_000,
        time_horizon=32,
        summary_freq=64,
    )
    options.update(overrides)
    return TrainerSettings(**options)


def small_sac(**overrides: Any) -> TrainerSettings:
    """A tiny SAC configuration: learning starts after 100 random steps."""
    options: dict[str, Any] = dict(
        trainer_type="sac",
        hyperparameters=SACSettings(batch_size=32, buffer_size=1000, buffer_init_steps=100),
        network_settings=NetworkSettings(hidden_units=32, num_layers=2, activation="relu"),
        max_steps=10_000,
        summary_freq=100,
    )
    options.update(overrides)
    return TrainerSettings(**options)


def make_envs(
    env_id: str, num_envs: int, mode: AutoresetMode = AutoresetMode.SAME_STEP, **kwargs: Any
) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        **kwargs,
    )


class CountingEnv(gym.Env[np.ndarray, np.int64]):
    """Observation = steps since reset; reward 1; never terminates (wrap in a TimeLimit)."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([float(self.t)], dtype=np.float32), 1.0, False, False, {}


def counting_envs(
    mode: AutoresetMode, num_envs: int = 1, episode_steps: int = 3
) -> gym.vector.VectorEnv[Any, Any, Any]:
    """Vector env of :class:`CountingEnv` truncated after ``episode_steps`` steps."""
    factory: Callable[[], gym.Env[Any, Any]] = lambda: gym.wrappers.TimeLimit(  # noqa: E731
        CountingEnv(), max_episode_steps=episode_steps
    )
    return gym.vector.SyncVectorEnv([factory] * num_envs, autoreset_mode=mode)
