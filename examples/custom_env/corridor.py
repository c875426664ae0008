"""A Gymnasium environment of your own, for ``evtrain learn`` (see docs/environments.md).

The agent starts at the left end of a corridor of ``length`` cells and is paid 1 for reaching
the right end, less a small cost per step; its ``info`` says ``is_success`` (whether it just
arrived), which ``behaviors.<name>.info_stats`` can record (``corridor_stop.yaml``).
``env_settings.env_id`` names either the class
(``examples.custom_env.corridor:Corridor``) or the factory below, which adds wrappers; the
keys of ``env_settings.env_kwargs`` are passed to either as keyword arguments.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

Observation = npt.NDArray[np.float32]


class Corridor(gym.Env[Observation, np.int64]):
    """Move left (action 0) or right (action 1); the episode ends at the right end."""

    def __init__(self, length: int = 5) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._position = 0

    def _observation(self) -> Observation:
        return np.array([self._position / self.length], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random, as evtrain's env_settings.seed asks
        self._position = 0
        return self._observation(), {}

    def step(self, action: np.int64) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self._position = max(0, self._position + (1 if action == 1 else -1))
        arrived = self._position >= self.length
        info = {"is_success": arrived}
        return self._observation(), 1.0 if arrived else -0.01, arrived, False, info


def make_corridor(length: int = 5, max_episode_steps: int = 50) -> gym.Env[Any, Any]:
    """The factory form: build the environment, then wrap it (a time limit here, so that an
    agent walking left for ever still ends its episodes)."""
    return gym.wrappers.TimeLimit(Corridor(length), max_episode_steps=max_episode_steps)
