"""A single-agent Gymnasium task with an action mask, for tests that name it as
``env_id: tests.masked_envs:masked_choice``.

Its observation is PettingZoo's shape, ``Dict(observation=Box, action_mask=Box)``: each step
names a best action ``b`` (one-hot), worth 1; ``b + 1`` (mod ``n``) is worth 0.5, the others
nothing.  Half the steps mask ``b`` itself, so a policy that ignores the mask would often
pick a masked action, and the best allowed one is then ``b + 1``: an optimal policy earns
0.75 a step on average, uniformly random allowed actions about 0.27.  Some steps (``pass_every``)
give an all-zero mask, PettingZoo's "not your move": any action is taken and worth nothing.

The environment raises :class:`MaskedActionError` for a masked action, so a run that ever
samples one fails.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

BEST, SECOND = 1.0, 0.5
"""What the best action and the one after it are worth."""


class MaskedActionError(RuntimeError):
    """An agent took an action its observation's mask forbade."""


class MaskedChoice(gym.Env[dict[str, npt.NDArray[Any]], np.int64]):
    """See the module's docs.

    :param n: actions.
    :param length: steps per episode (then truncated).
    :param pass_every: every this many steps of an episode has an all-zero mask (0: none).
    """

    def __init__(self, n: int = 4, length: int = 8, pass_every: int = 5) -> None:
        self.n, self.length, self.pass_every = n, length, pass_every
        self.action_space = spaces.Discrete(n)
        self.observation_space: spaces.Space[Any] = spaces.Dict(
            {
                "observation": spaces.Box(0.0, 1.0, (n,), np.float32),
                "action_mask": spaces.Box(0, 1, (n,), np.int8),
            }
        )
        self.masked_actions = 0
        """Masked actions asked for (each also raised)."""
        self._t = self._best = 0
        self._mask = np.ones(n, dtype=np.int8)

    def _observe(self) -> dict[str, npt.NDArray[Any]]:
        self._best = int(self.np_random.integers(self.n))
        self._mask = np.ones(self.n, dtype=np.int8)
        if self.pass_every and (self._t + 1) % self.pass_every == 0:
            self._mask[:] = 0
        elif self.np_random.random() < 0.5:
            self._mask[self._best] = 0
        observation = np.zeros(self.n, dtype=np.float32)
        observation[self._best] = 1.0
        return {"observation": observation, "action_mask": self._mask.copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(
        self, action: np.int64
    ) -> tuple[dict[str, npt.NDArray[Any]], float, bool, bool, dict[str, Any]]:
        a = int(action)
        reward = 0.0
        if self._mask.any():
            if not self._mask[a]:
                self.masked_actions += 1
                raise MaskedActionError(f"action {a} is masked by {self._mask.tolist()}")
            reward = BEST if a == self._best else SECOND if a == (self._best + 1) % self.n else 0.0
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


def masked_choice(**kwargs: Any) -> gym.Env[Any, Any]:
    """:class:`MaskedChoice` (``env_kwargs`` are its arguments)."""
    return MaskedChoice(**kwargs)
