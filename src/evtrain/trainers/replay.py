"""A fixed-capacity replay buffer of transitions ``(s, a, r, s', terminated)`` in numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

FloatArray = npt.NDArray[np.float32]
_ARRAYS = ("obs", "actions", "rewards", "next_obs", "terminated")


class ReplayBuffer:
    """Ring buffer: once full, each new transition overwrites the oldest.

    :param capacity: transitions held at most.
    :param obs_dim: length of a flattened observation.
    :param action_dim: length of an action.
    """

    def __init__(self, capacity: int, obs_dim: int, action_dim: int) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros((capacity, action_dim), dtype=np.float32)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        """1.0 where ``s'`` is terminal (no bootstrap); truncation is not termination."""
        self.pos = 0
        """Where the next transition goes."""
        self.size = 0
        """Transitions held."""

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: npt.ArrayLike,
        actions: npt.ArrayLike,
        rewards: npt.ArrayLike,
        next_obs: npt.ArrayLike,
        terminated: npt.ArrayLike,
    ) -> None:
        """Append a batch of transitions (first dimension = batch)."""
        n = len(np.asarray(rewards))
        if n == 0:
            return
        if n > self.capacity:
            raise ValueError(f"batch of {n} transitions exceeds capacity {self.capacity}")
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = np.asarray(obs).reshape(n, -1)
        self.actions[idx] = np.asarray(actions).reshape(n, -1)
        self.rewards[idx] = rewards
        self.next_obs[idx] = np.asarray(next_obs).reshape(n, -1)
        self.terminated[idx] = terminated
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
        """``batch_size`` transitions drawn uniformly with replacement:
        ``(obs, actions, rewards, next_obs, terminated)``."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=batch_size)
        return (
            self.obs[idx],
            self.actions[idx],
            self.rewards[idx],
            self.next_obs[idx],
            self.terminated[idx],
        )

    def state_dict(self) -> dict[str, Any]:
        """The held transitions (the filled part, as tensors so that ``torch.load`` with
        ``weights_only=True`` reads them) and the write position."""
        n = self.size
        state: dict[str, Any] = {"pos": self.pos, "size": n}
        for name in _ARRAYS:
            state[name] = torch.from_numpy(getattr(self, name)[:n].copy())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into a buffer at least as large
        (as large exactly once the saved one had wrapped around).

        :raises ValueError: the saved buffer does not fit (``buffer_size`` changed).
        """
        n = int(state["size"])
        # A buffer that never wrapped fits any capacity it fits in; a wrapped one only its own.
        if n > self.capacity or (int(state["pos"]) != n and n != self.capacity):
            raise ValueError(
                f"saved replay buffer holds {n} transitions, this one's capacity is "
                f"{self.capacity}; resume with the same buffer_size"
            )
        for name in _ARRAYS:
            getattr(self, name)[:n] = np.asarray(state[name])
        self.size = n
        self.pos = int(state["pos"]) % self.capacity
