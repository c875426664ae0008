"""Single-agent Gymnasium tasks of ML-Agents' action spaces beyond ``Discrete`` and ``Box``, for
tests that name them as ``env_id: tests.branch_envs:<function>``.

* :func:`two_bandits`: ``MultiDiscrete([3, 3])`` (ML-Agents' discrete branches): each step
  shows a context (one-hot of 2); each branch is a bandit whose right arm depends on the
  context, and only the right pair is worth 1.  Uniform random pairs earn 1/9 a step.  With
  ``masked``, the observation holds an ``action_mask`` of 6 entries (the two branches' masks
  side by side) that masks one wrong arm of each branch, and a whole branch now and then
  (all zeros: any arm); a masked arm raises :class:`MaskedActionError`.
* :func:`hybrid_target`: ML-Agents' hybrid actions, ``Dict(continuous=Box(-1, 1, (1,)),
  discrete=MultiDiscrete([3]))``: each step shows a context (one-hot of 3); the right choice
  is worth 0.5 and the continuous action is worth ``0.5 * (1 - |x - target|)``, the target
  ``-0.6, 0, 0.6`` by context.  A uniform policy earns about 0.4 a step, the best 1.

Episodes last :data:`LENGTH` steps (then truncated).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

LENGTH = 8
"""Steps per episode."""
RIGHT_ARMS = ((2, 0), (0, 1))
""":func:`two_bandits`' right pair in each context."""
TARGETS = (-0.6, 0.0, 0.6)
""":func:`hybrid_target`'s continuous target in each context (its right choice: the
context)."""


class MaskedActionError(RuntimeError):
    """An agent took an arm its observation's mask forbade."""


class TwoBandits(gym.Env[Any, npt.NDArray[np.int64]]):
    """See the module's docs."""

    def __init__(self, masked: bool = False) -> None:
        self.masked = masked
        self.action_space = spaces.MultiDiscrete([3, 3])
        context = spaces.Box(0.0, 1.0, (2,), np.float32)
        self.observation_space: spaces.Space[Any] = (
            spaces.Dict({"context": context, "action_mask": spaces.Box(0, 1, (6,), np.int8)})
            if masked
            else context
        )
        self._t = self._context = 0
        self._mask = np.ones(6, dtype=np.int8)

    def _observe(self) -> Any:
        self._context = int(self.np_random.integers(2))
        context = np.eye(2, dtype=np.float32)[self._context]
        if not self.masked:
            return context
        self._mask = np.ones(6, dtype=np.int8)
        for branch, right in enumerate(RIGHT_ARMS[self._context]):
            if self.np_random.random() < 0.2:  # "any arm": a branch of zeros
                self._mask[3 * branch : 3 * branch + 3] = 0
            else:
                wrong = [a for a in range(3) if a != right]
                self._mask[3 * branch + wrong[int(self.np_random.integers(2))]] = 0
        return {"context": context, "action_mask": self._mask.copy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: npt.NDArray[np.int64]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        arms = [int(a) for a in np.asarray(action).reshape(-1)]
        if self.masked:
            for branch, arm in enumerate(arms):
                entries = self._mask[3 * branch : 3 * branch + 3]
                if entries.any() and not entries[arm]:
                    raise MaskedActionError(f"arm {arm} of branch {branch} is masked: {entries}")
        reward = float(tuple(arms) == RIGHT_ARMS[self._context])
        self._t += 1
        return self._observe(), reward, False, self._t >= LENGTH, {}


class HybridTarget(gym.Env[npt.NDArray[np.float32], dict[str, Any]]):
    """See the module's docs."""

    def __init__(self) -> None:
        self.action_space = spaces.Dict(
            {
                "continuous": spaces.Box(-1.0, 1.0, (1,), np.float32),
                "discrete": spaces.MultiDiscrete([3]),
            }
        )
        self.observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
        self._t = self._context = 0

    def _observe(self) -> npt.NDArray[np.float32]:
        self._context = int(self.np_random.integers(3))
        context = np.zeros(3, dtype=np.float32)
        context[self._context] = 1.0
        return context

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(
        self, action: dict[str, Any]
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        x = float(np.asarray(action["continuous"]).reshape(-1)[0])
        if not -1.0 <= x <= 1.0:
            raise ValueError(f"continuous action {x} outside [-1, 1]")
        choice = int(np.asarray(action["discrete"]).reshape(-1)[0])
        reward = 0.5 * (choice == self._context) + 0.5 * (1.0 - abs(x - TARGETS[self._context]))
        self._t += 1
        return self._observe(), reward, False, self._t >= LENGTH, {}


def two_bandits(**kwargs: Any) -> gym.Env[Any, Any]:
    """:class:`TwoBandits` (see the module's docs)."""
    return TwoBandits(**kwargs)


def hybrid_target(**kwargs: Any) -> gym.Env[Any, Any]:
    """:class:`HybridTarget` (see the module's docs)."""
    return HybridTarget(**kwargs)
