"""A fixed-capacity replay buffer of transitions ``(s, a, r, s', terminated)``."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

_ARRAYS = ("obs", "actions", "rewards", "next_obs", "terminated")


class Transitions(Protocol):
    """What samples single transitions: a :class:`ReplayBuffer`, or the replay of sequences
    of a recurrent SAC (:class:`~evtrain.trainers.sac.memory.SequenceReplayBuffer`)."""

    def __len__(self) -> int: ...

    def sample(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(obs, actions, rewards, next_obs, terminated)`` of ``batch_size`` transitions."""
        ...


class ReplayBuffer:
    """Ring buffer: once full, each new transition overwrites the oldest.

    :param capacity: transitions held at most.
    :param obs_dim: length of a flattened observation.
    :param action_dim: length of an action.
    :param byte_columns: the last ``byte_columns`` of an observation are whole numbers in
        ``[0, 255]`` (``uint8`` images): kept as bytes, a quarter of their float32 memory.
    """

    def __init__(
        self, capacity: int, obs_dim: int, action_dim: int, *, byte_columns: int = 0
    ) -> None:
        self.capacity = capacity
        self.byte_columns = byte_columns
        float_dim = obs_dim - byte_columns
        # One row per transition, [s | a | r | s' | terminated]: a minibatch is one gather.
        # numpy allocates it lazily (pages are touched as rows are written); the named arrays
        # and the tensor are views of the same memory.
        widths = np.cumsum([0, float_dim, action_dim, 1, float_dim, 1])
        rows = np.zeros((capacity, int(widths[-1])), dtype=np.float32)
        self._rows = torch.from_numpy(rows)
        self.obs = rows[:, widths[0] : widths[1]]
        self.actions = rows[:, widths[1] : widths[2]]
        self.rewards = rows[:, widths[2]]
        self.next_obs = rows[:, widths[3] : widths[4]]
        self.terminated = rows[:, widths[4]]
        """1.0 where ``s'`` is terminal (no bootstrap); truncation is not termination."""
        self._widths = [int(w) for w in np.diff(widths)]
        # The byte columns of s and s', one row per transition likewise: [s bytes | s' bytes].
        pixels = np.zeros((capacity, 2 * byte_columns), dtype=np.uint8)
        self._pixels = torch.from_numpy(pixels)
        self.obs_bytes = pixels[:, :byte_columns]
        self.next_obs_bytes = pixels[:, byte_columns:]
        self._arrays = _ARRAYS + (("obs_bytes", "next_obs_bytes") if byte_columns else ())
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
        obs = np.asarray(obs).reshape(n, -1)
        next_obs = np.asarray(next_obs).reshape(n, -1)
        split = obs.shape[1] - self.byte_columns
        self.obs[idx] = obs[:, :split]
        self.actions[idx] = np.asarray(actions).reshape(n, -1)
        self.rewards[idx] = rewards
        self.next_obs[idx] = next_obs[:, :split]
        self.terminated[idx] = terminated
        if self.byte_columns:
            self.obs_bytes[idx] = obs[:, split:]
            self.next_obs_bytes[idx] = next_obs[:, split:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement:
        ``(obs, actions, rewards, next_obs, terminated)``, float32 CPU tensors.

        They are views of one buffer that the next call overwrites: use them (or copy them)
        before sampling again.  (With byte columns, the observations are new tensors.)
        """
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.from_numpy(rng.integers(0, self.size, size=batch_size))
        if self._batch.shape[0] != batch_size:
            self._batch = self._rows.new_empty((batch_size, self._rows.shape[1]))
        batch = torch.index_select(self._rows, 0, idx, out=self._batch)
        obs, actions, rewards, next_obs, terminated = torch.split(batch, self._widths, dim=1)
        if self.byte_columns:
            pixels = torch.index_select(self._pixels, 0, idx).to(torch.float32)
            obs = torch.cat([obs, pixels[:, : self.byte_columns]], dim=1)
            next_obs = torch.cat([next_obs, pixels[:, self.byte_columns :]], dim=1)
        return obs, actions, rewards.squeeze(1), next_obs, terminated.squeeze(1)

    def state_dict(self) -> dict[str, Any]:
        """The held transitions (the filled part, as tensors so that ``torch.load`` with
        ``weights_only=True`` reads them) and the write position."""
        n = self.size
        state: dict[str, Any] = {"pos": self.pos, "size": n}
        for name in self._arrays:
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
        for name in self._arrays:
            getattr(self, name)[:n] = np.asarray(state[name])
        self.size = n
        self.pos = int(state["pos"]) % self.capacity
