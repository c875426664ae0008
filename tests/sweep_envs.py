"""An environment a sweep's parameter changes the returns of, for tests/test_sweep.py:
``env_id: tests.sweep_envs:bonus_cartpole`` with ``env_kwargs: {bonus: 100}``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def bonus_cartpole(bonus: float = 0.0, **kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 paying ``1 + bonus`` a step: a trial with a large ``bonus`` scores far
    above one without, whatever its episodes, so a test knows which trials a pruner prunes."""
    env = gym.make("CartPole-v1", **kwargs)
    return gym.wrappers.TransformReward(env, lambda reward: float(reward) + bonus)
