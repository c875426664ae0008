"""Environments that need memory: the policy sees too little of the state in one observation
(``env_id: tests.memory_envs:masked_cartpole``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

VISIBLE = (0, 2)
"""What :func:`masked_cartpole` shows of CartPole's ``(x, x_dot, theta, theta_dot)``: the cart's
position and the pole's angle, not their velocities."""


class MaskedVelocities(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """CartPole's observation without the two velocities."""

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(
            space.low[list(VISIBLE)], space.high[list(VISIBLE)], dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[list(VISIBLE)].astype(np.float32)


def masked_cartpole(**kwargs: Any) -> gym.Env[np.ndarray, Any]:
    """CartPole-v1 (500-step episodes) that shows the cart's position and the pole's angle
    only: the velocities, which balancing needs, must be inferred from successive
    observations, so a feed-forward policy cannot do well and a recurrent one can."""
    return MaskedVelocities(gym.make("CartPole-v1", **kwargs))
