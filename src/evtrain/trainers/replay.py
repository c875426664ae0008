"""A fixed-capacity replay buffer of transitions ``(s, a, r, s', terminated)``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

_ARRAYS = ("obs", "actions", "rewards", "next_obs", "terminated")


class ReplayBuffer:
    """Ring buffer: once full, each new transition overwrites the oldest.

    :param capacity: transitions held at most.
    :param obs_dim: length of a flattened observation.
    :param action_dim: length of an action.
    """

    def __init__(self, capacity: int, obs_dim: int, action_dim: int) -> None:
        self.capacity = capacity
        # One row per transition, [s | a | r | s' | terminated]: a minibatch is one gather.
        # numpy allocates it lazily (pages are touched as rows are written); the named arrays
        # and the tensor are views of the same memory.
        widths = np.cumsum([0, obs_dim, action_dim, 1, obs_dim, 1])
        rows = np.zeros((capacity, int(widths[-1])), dtype=np.float32)
        self._rows = torch.from_numpy(rows)
        self.obs = rows[:, widths[0] : widths[1]]
        self.actions = rows[:, widths[1] : widths[2]]
        self.rewards = rows[:, widths[2]]
        self.next_obs = rows[:, widths[3] : widths[4]]
        self.terminated = rows[:, widths[4]]
        """1.0 where ``s'`` is terminal (no bootstrap); truncation is not termination."""
        self._widths = [int(w) for w in np.diff(widths)]
        self._batch = self._rows.new_empty((0, int(widths[-1])))
        """Where :meth:`sample` gathers its rows (reused while the batch size stays)."""
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
        end = self.pos + n
        idx = (
            slice(self.pos, end)
            if end <= self.capacity
            else np.arange(self.pos, end) % self.capacity
        )
        self.obs[idx] = np.asarray(obs).reshape(n, -1)
        self.actions[idx] = np.asarray(actions).reshape(n, -1)
        self.rewards[idx] = rewards
        self.next_obs[idx] = np.asarray(next_obs).reshape(n, -1)
        self.terminated[idx] = terminated
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement:
        ``(obs, actions, rewards, next_obs, terminated)``, float32 CPU tensors.

        They are views of one buffer that the next call overwrites: use them (or copy them)
        before sampling again.
        """
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.from_numpy(rng.integers(0, self.size, size=batch_size))
        if self._batch.shape[0] != batch_size:
            self._batch = self._rows.new_empty((batch_size, self._rows.shape[1]))
        batch = torch.index_select(self._rows, 0, idx, out=self._batch)
        obs, actions, rewards, next_obs, terminated = torch.split(batch, self._widths, dim=1)
        return obs, actions, rewards.squeeze(1), next_obs, terminated.squeeze(1)

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
