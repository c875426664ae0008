"""Environments of action spaces Gymnasium's own lack, for tests that name them as
``env_id: tests.action_envs:<function>``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

FORCE_SCALES = (0.5, 1.0, 1.5)
""":func:`branched_cartpole`'s second branch: the push's force, as a multiple of CartPole's."""


class _BranchedCartPole(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.MultiDiscrete([2, len(FORCE_SCALES)])
        self._force: float = env.unwrapped.force_mag  # type: ignore[attr-defined]

    def step(self, action: Any) -> Any:
        direction, strength = (int(a) for a in np.asarray(action))
        self.env.unwrapped.force_mag = self._force * FORCE_SCALES[strength]  # type: ignore[attr-defined]
        return self.env.step(direction)


def branched_cartpole(**kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 with ML-Agents-style branches, ``MultiDiscrete([2, 3])``: the push's
    direction, and its force (half, once or one and a half times CartPole's)."""
    return _BranchedCartPole(gym.make("CartPole-v1", **kwargs))


class _Unbounded(gym.ActionWrapper[Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action(self, action: Any) -> Any:
        return np.clip(action, -2.0, 2.0)


def unbounded_pendulum(**kwargs: Any) -> gym.Env[Any, Any]:
    """Pendulum-v1 whose action space has no bounds (it clips the torque to ``[-2, 2]``)."""
    return _Unbounded(gym.make("Pendulum-v1", **kwargs))
