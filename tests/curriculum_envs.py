"""Environments for tests of ``environment_parameters``: what they were set to shows in their
rewards, so a run's episode returns say which values each episode saw (also from an async
worker process)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

EPISODE_LENGTH = 4


class ParameterEnv(gym.Env[np.ndarray, np.int64]):
    """Episodes of 4 steps whose every reward is ``bonus`` + ``options["tilt"]`` of the reset
    (0 without): an episode's return is 4 x (bonus + tilt).  ``num_tiles`` is an attribute for
    ML-Agents' Sorter curriculum, read by nothing."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.bonus = 0.0
        self.num_tiles = 0.0
        self._tilt = 0.0
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._tilt = float((options or {}).get("tilt", 0.0))
        self._t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._t += 1
        obs = np.full(2, self._t / EPISODE_LENGTH, dtype=np.float32)
        return obs, self.bonus + self._tilt, self._t >= EPISODE_LENGTH, False, {}


def parameter_env() -> gym.Env[Any, Any]:
    """:class:`ParameterEnv` (``env_id: tests.curriculum_envs:parameter_env``)."""
    return ParameterEnv()
