"""Helpers of the trainer tests: settings builders, a recording bus, small environments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from evtrain import Bus, PropertyEvent, StatsEvent, StatsReporter, signals
from evtrain.trainers import (
    NetworkSettings,
    PPOSettings,
    RewardProviders,
    RewardProviderSettings,
    SACSettings,
    TrainerSettings,
    make_vector_env,
)
from evtrain.trainers.demonstrations import Demonstrations, make_demonstrations
from tests.memory_envs import masked_cartpole


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


def cartpole_demo(episodes: int, seed: int = 0, max_steps: int = 500) -> Demonstrations:
    """Episodes of CartPole under a hand-written controller that keeps the pole up (returns
    ``max_steps``)."""
    env = gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, max_episode_steps=max_steps)
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "rew", "term", "trunc")}
    obs, _ = env.reset(seed=seed)
    done = 0
    while done < episodes:
        action = int(obs[2] + 0.5 * obs[3] > 0)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, terminated, truncated), strict=True):
            rows[key].append(value)
        obs = next_obs
        if terminated or truncated:
            done += 1
            obs, _ = env.reset()
    return make_demonstrations(
        observations=np.stack(rows["obs"]),
        actions=np.array(rows["act"]),
        rewards=rows["rew"],
        terminated=rows["term"],
        truncated=rows["trunc"],
        behavior_name="CartPole",
        env_id="CartPole-v1",
        observation_space=env.observation_space,
        action_space=env.action_space,
        source={"controller": "obs[2] + 0.5 obs[3] > 0"},
    )


PPO_KEYS = {
    "Environment/Cumulative Reward",
    "Environment/Episode Length",
    "Losses/Policy Loss",
    "Losses/Value Loss",
    "Policy/Entropy",
    "Policy/Learning Rate",
    "Policy/Epsilon",
    "Policy/Beta",
    "Policy/Extrinsic Value Estimate",
    "Is Training",
    "Step",
}


def cartpole_transitions(
    action: int, steps: int = 256
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(s, a, s') of CartPole always pushed one way, over several episodes."""
    envs = make_vector_env("CartPole-v1", 8)
    obs, _ = envs.reset(seed=0)
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(steps // 8):
        next_obs, _, _, _, infos = envs.step(np.full(8, action))
        final = next_obs.copy()
        if "final_obs" in infos:
            for i in np.flatnonzero(infos["_final_obs"]):
                final[i] = infos["final_obs"][i]
        rows.append((obs, final))
        obs = next_obs
    envs.close()
    s = torch.tensor(np.concatenate([r[0] for r in rows]), dtype=torch.float32)
    s_next = torch.tensor(np.concatenate([r[1] for r in rows]), dtype=torch.float32)
    return s, torch.full((s.shape[0],), action), s_next


def masked_envs(mode: AutoresetMode, num_envs: int = 4, limit: int = 15) -> Any:
    """Masked CartPole cut at ``limit`` steps: many episode ends, truncations among them."""
    return gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(masked_cartpole(), limit)] * num_envs,
        autoreset_mode=mode,
    )
