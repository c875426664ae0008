"""Environments for the Ray tests (``env_id: tests.ray_envs:<function>``): a CartPole whose
process dies at a chosen step, once."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym


class _Mortal(gym.Wrapper[Any, Any, Any, Any]):
    """Counts its own steps; at every ``die_at``-th it ends its process with ``os._exit`` (as
    a crashing simulator would) unless ``marker`` exists, which it creates first: of all the
    environments made with one ``marker``, in any process, one dies, once."""

    def __init__(self, env: gym.Env[Any, Any], die_at: int, marker: str) -> None:
        super().__init__(env)
        self.die_at = die_at
        self.marker = marker
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps % self.die_at == 0:
            try:
                with open(self.marker, "x"):
                    pass
            except FileExistsError:
                pass  # another one died already
            else:
                os._exit(17)
        return self.env.step(action)


def mortal(die_at: int, marker: str) -> gym.Env[Any, Any]:
    """CartPole-v1 whose process dies at a multiple of ``die_at`` steps, unless ``marker``
    exists."""
    return _Mortal(gym.make("CartPole-v1"), die_at, marker)
