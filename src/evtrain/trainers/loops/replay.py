"""The off-policy loop's replay: a fixed-capacity buffer of transitions ``(s, a, r, s',
terminated)`` (:class:`ReplayBuffer`), and, for algorithms with ``network_settings.memory``, a
buffer of sequences with the memories they started from (:class:`SequenceReplayBuffer`).

**Sequences.**  As ML-Agents' SAC does, the sequence buffer holds sequences of
``sequence_length`` steps of one environment (an episode's end closes one early; it is padded at
its end) with the algorithm's memories at their first step, and samples whole sequences,
``batch_size / sequence_length`` of them (at least one) per gradient step.  The networks run
each sequence from its stored memories (no burn-in).  Its capacity is ``buffer_size`` steps,
padding included (ML-Agents counts them too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

_ARRAYS = ("obs", "actions", "rewards", "next_obs", "terminated")
_FIELDS = (*_ARRAYS, "mask")


class Transitions(Protocol):
    """What samples single transitions: a :class:`ReplayBuffer`, or a
    :class:`SequenceReplayBuffer`."""

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


class SequenceReplayBuffer:
    """Ring buffer of padded sequences of transitions ``(s, a, r, s', terminated)``, each with
    the memories at its first step (see the module's docstring).

    :meth:`add` takes one vector step at a time: each environment's transitions gather into
    its open sequence, which is stored when it is ``sequence_length`` long or its episode ends.
    An open sequence is not part of :meth:`state_dict` (a resumed run starts new episodes).

    :param capacity: steps held at most, padding included (rounded down to whole sequences,
        at least one).
    :param memory_sizes: each memory's width by name (at least one; the names are those of
        :meth:`sample_sequences` and :meth:`state_dict`).
    """

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        action_dim: int,
        sequence_length: int,
        memory_sizes: Mapping[str, int],
        num_envs: int,
    ) -> None:
        L = sequence_length
        self.sequence_length = L
        self.capacity = max(1, capacity // L)
        """Sequences held at most."""
        C = self.capacity
        self.obs = np.zeros((C, L, obs_dim), dtype=np.float32)
        self.actions = np.zeros((C, L, action_dim), dtype=np.float32)
        self.rewards = np.zeros((C, L), dtype=np.float32)
        self.next_obs = np.zeros((C, L, obs_dim), dtype=np.float32)
        self.terminated = np.zeros((C, L), dtype=np.float32)
        """1.0 where ``s'`` is terminal (no bootstrap); truncation is not termination."""
        self.mask = np.zeros((C, L), dtype=np.bool_)
        """True where a position holds a transition, false where it is padding."""
        self.memories = {
            name: np.zeros((C, size), dtype=np.float32) for name, size in memory_sizes.items()
        }
        """Each memory at each sequence's first step, ``[C, size]``."""
        self.pos = 0
        """Where the next sequence goes."""
        self.size = 0
        """Sequences held."""
        self.transitions = 0
        """Transitions held (padding not counted)."""
        self._open: list[list[tuple[Any, ...]]] = [[] for _ in range(num_envs)]
        self._open_memories: list[dict[str, npt.NDArray[np.float32]]] = [{}] * num_envs

    def __len__(self) -> int:
        return self.transitions

    def add(
        self,
        obs: npt.NDArray[np.float32],
        actions: npt.NDArray[np.float32],
        rewards: npt.NDArray[Any],
        next_obs: npt.NDArray[np.float32],
        terminated: npt.NDArray[np.bool_],
        ended: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_],
        memories: Mapping[str, npt.NDArray[np.float32]],
    ) -> None:
        """One step of every environment (first dimension = environment).

        :param ended: the episode ended at this step (its sequence closes).
        :param valid: this step is a transition (false: the autoreset step of NEXT_STEP mode,
            which is skipped).
        :param memories: the memories the step was taken with, by name (kept where it opens
            a sequence).
        """
        for n in np.flatnonzero(valid):
            steps = self._open[n]
            if not steps:
                self._open_memories[n] = {name: m[n].copy() for name, m in memories.items()}
            steps.append((obs[n], actions[n], rewards[n], next_obs[n], terminated[n]))
            if ended[n] or len(steps) == self.sequence_length:
                self._store(steps, self._open_memories[n])
                self._open[n] = []

    def _store(
        self, steps: list[tuple[Any, ...]], memories: Mapping[str, npt.NDArray[np.float32]]
    ) -> None:
        i, k = self.pos, len(steps)
        if self.size == self.capacity:
            self.transitions -= int(self.mask[i].sum())
        columns = [np.stack(column) for column in zip(*steps, strict=True)]
        for name, value in zip(_ARRAYS, columns, strict=True):
            field = getattr(self, name)
            field[i] = 0.0
            field[i, :k] = value.reshape(k, *field.shape[2:])
        self.mask[i] = False
        self.mask[i, :k] = True
        for name, memory in self.memories.items():
            memory[i] = memories[name]
        self.transitions += k
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {name: getattr(self, name) for name in _FIELDS} | self.memories

    def sample_sequences(self, sequences: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """``sequences`` sequences drawn uniformly with replacement: ``obs``, ``actions``,
        ``next_obs`` ``[S, L, ...]``, ``rewards``, ``terminated``, ``mask`` ``[S, L]``, and each
        memory ``[S, size]`` by its name, as CPU tensors."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=sequences)
        return {name: torch.from_numpy(array[idx]) for name, array in self._arrays().items()}

    def sample(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` single transitions drawn uniformly with replacement from the stored
        sequences (padding never): ``(obs, actions, rewards, next_obs, terminated)``, as
        :meth:`ReplayBuffer.sample` gives them (for the models of reward providers, which look
        at one transition at a time)."""
        if self.transitions == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        sequence, position = np.nonzero(self.mask[: self.size])
        pick = rng.integers(0, len(sequence), size=batch_size)
        where = (sequence[pick], position[pick])
        return (
            torch.from_numpy(self.obs[where]),
            torch.from_numpy(self.actions[where]),
            torch.from_numpy(self.rewards[where]),
            torch.from_numpy(self.next_obs[where]),
            torch.from_numpy(self.terminated[where]),
        )

    def state_dict(self) -> dict[str, Any]:
        """The stored sequences (as tensors, for ``torch.load(weights_only=True)``), the
        memories by name, and the write position."""
        n = self.size
        state: dict[str, Any] = {"pos": self.pos, "size": n, "transitions": self.transitions}
        for name, array in self._arrays().items():
            state[name] = torch.from_numpy(array[:n].copy())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        :raises ValueError: the saved sequences do not fit (``buffer_size``,
            ``sequence_length`` or ``memory_size`` changed).
        """
        n = int(state["size"])
        shape = tuple(state["obs"].shape[1:2]) + tuple(
            state[name].shape[1] for name in self.memories
        )
        ours = (self.sequence_length, *(m.shape[1] for m in self.memories.values()))
        if n > self.capacity or (int(state["pos"]) != n and n != self.capacity) or shape != ours:
            raise ValueError(
                f"saved replay buffer holds {n} sequences of shape {shape}, this one holds "
                f"{self.capacity} of {ours}; resume with the same buffer_size and memory"
            )
        for name, array in self._arrays().items():
            array[:n] = np.asarray(state[name])
        self.size = n
        self.pos = int(state["pos"]) % self.capacity
        self.transitions = int(state["transitions"])
