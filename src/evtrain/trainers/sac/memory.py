"""What SAC needs for ``network_settings.memory``: recurrent twin critics, and a replay buffer
of sequences with the memories they started from.

**Critics.**  Each of the two critics runs the observations through its hidden layers and an
LSTM of its own (:class:`~evtrain.trainers.networks.memory.LSTMMemory`); the action joins after the
LSTM, through one more hidden layer, so the memory depends on the observations alone: the
critics can step along during the rollout, and ``Q(s', a')`` for the target takes the memory
the sequence had at ``s'`` whatever ``a'`` the policy proposes.

**Replay.**  As ML-Agents' SAC does, the buffer holds sequences of ``sequence_length`` steps of
one environment (an episode's end closes one early; it is padded at its end) with the policy's
and the critics' memories at their first step, and samples whole sequences, ``batch_size /
sequence_length`` of them (at least one) per gradient step.  The networks run each sequence
from its stored memories (no burn-in).  Its capacity is ``buffer_size`` steps, padding
included (ML-Agents counts them too).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.memory import LSTMMemory, RecurrentMLP, forget
from evtrain.trainers.networks.mlp import ACTIVATIONS, hidden_layers, layer_init
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import ObservationFlattener, ObservationLayout
from evtrain.trainers.settings import MemorySettings, NetworkSettings

_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "mask")
_MEMORIES = ("actor_memory", "critic_memory")


class _RecurrentQ(nn.Module):
    """One critic: hidden layers on the observation, an LSTM, then ``[h, action]`` through
    one hidden layer to ``Q`` (discrete actions, ``num_actions``: ``h`` alone, to the value of
    every action)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: NetworkSettings,
        memory: MemorySettings,
        generator: torch.Generator,
        num_actions: int = 0,
    ) -> None:
        super().__init__()
        widths = [obs_dim] + [network.hidden_units] * network.num_layers
        self.hidden = hidden_layers(widths, generator)
        self.memory = LSTMMemory(widths[-1], memory.memory_size, generator)
        self.head = layer_init(
            nn.Linear(self.memory.hidden_size + action_dim, network.hidden_units),
            math.sqrt(2),
            generator,
        )
        self.out = layer_init(nn.Linear(network.hidden_units, num_actions or 1), 1.0, generator)
        self.activation = ACTIVATIONS[network.activation]
        self.encoder: nn.Module | None = None
        """The image encoders in front of the hidden layers (``None``: vector observations)."""

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        if self.encoder is not None:
            lead = x.shape[:-1]
            x = self.encoder(x.reshape(-1, x.shape[-1])).reshape(*lead, -1)
        for layer in cast("list[nn.Linear]", self.hidden):
            x = self.activation(F.linear(x, layer.weight, layer.bias))
        return x

    def step(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """The memory after observing one step of ``x`` ``[B, obs]``."""
        _, memory = self.memory.step(self._body(x), memory)
        return memory

    def features(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """The LSTM's outputs over sequences ``x`` ``[S, L, obs]``: ``[S, L, H]``."""
        out: tuple[torch.Tensor, torch.Tensor] = self.memory(self._body(x), memory)
        return out[0]

    def q(self, features: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``Q`` of :meth:`features` and actions: ``[...]``."""
        h = self.activation(self.head(torch.cat([features, action], dim=-1)))
        out: torch.Tensor = self.out(h)
        return out.squeeze(-1)

    def action_values(self, features: torch.Tensor) -> torch.Tensor:
        """A discrete critic's value of every action of :meth:`features`: ``[..., n]``."""
        out: torch.Tensor = self.out(self.activation(self.head(features)))
        return out


class RecurrentTwinQ(nn.Module):
    """Two recurrent ``Q(s, a)`` estimates, each with its own memory: the critics' memory is
    both side by side, ``[B, 2 * memory_size]``.

    :param num_actions: for discrete actions (:mod:`evtrain.trainers.sac.discrete`): the
        critics take no action (``action_dim`` 0) and output the value of each of
        ``num_actions`` actions, read with :meth:`action_values`.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: NetworkSettings,
        memory: MemorySettings,
        generator: torch.Generator,
        layout: ObservationLayout | None = None,
        *,
        num_actions: int = 0,
    ) -> None:
        super().__init__()
        critics = [
            _RecurrentQ(obs_dim, action_dim, network, memory, generator, num_actions)
            for _ in range(2)
        ]
        if layout is not None:  # each critic's own image encoders, drawn after the rest
            for critic in critics:
                critic.encoder = layout.encoder(network, generator)
        self.critics = nn.ModuleList(critics)
        self.critic_memory_size = memory.memory_size
        self.memory_size = 2 * memory.memory_size
        """Width of the critics' memory together."""

    def _each(self, memory: torch.Tensor) -> list[tuple[_RecurrentQ, torch.Tensor]]:
        size = self.critic_memory_size
        critics = cast("list[_RecurrentQ]", list(self.critics))
        return [(critic, memory[:, k * size : (k + 1) * size]) for k, critic in enumerate(critics)]

    def step(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """Both critics' memory after observing one step of ``x`` ``[B, obs]``."""
        return torch.cat([critic.step(x, m) for critic, m in self._each(memory)], dim=-1)

    def features(self, x: torch.Tensor, memory: torch.Tensor) -> list[torch.Tensor]:
        """Each critic's LSTM outputs over sequences ``x`` ``[S, L, obs]`` from ``memory``
        ``[S, 2 * memory_size]``."""
        return [critic.features(x, m) for critic, m in self._each(memory)]

    def values(self, features: list[torch.Tensor], action: torch.Tensor) -> torch.Tensor:
        """Both estimates of :meth:`features` and actions as one ``[2, ...]`` tensor."""
        critics = cast("list[_RecurrentQ]", list(self.critics))
        return torch.stack([c.q(f, action) for c, f in zip(critics, features, strict=True)])

    def action_values(self, features: list[torch.Tensor]) -> torch.Tensor:
        """Both discrete critics' values of every action, ``[2, ..., num_actions]``."""
        critics = cast("list[_RecurrentQ]", list(self.critics))
        return torch.stack([c.action_values(f) for c, f in zip(critics, features, strict=True)])


class CarriedMemories:
    """Each environment's policy and critics' memories during a run (``[N, M]`` each)."""

    def __init__(self, num_envs: int, sizes: tuple[int, int], device: torch.device) -> None:
        self.actor = torch.zeros((num_envs, sizes[0]), device=device)
        self.critic = torch.zeros((num_envs, sizes[1]), device=device)
        self.taken = (self.actor, self.critic)
        """The memories the last step was taken with."""

    def forget(self, ended: npt.NDArray[np.bool_]) -> None:
        """Zero the memories of the environments whose episode ``ended``."""
        self.actor = forget(self.actor, ended)
        self.critic = forget(self.critic, ended)


class RecurrentSACPolicy(nn.Module):
    """Export view of a recurrent SAC policy: raw observations and the memory in, the
    deterministic action ``tanh(mean)`` in the environment's bounds and the next memory out."""

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self,
        normalizer: ObservationNormalizer,
        actor: RecurrentMLP,
        space: spaces.Box,
        flatten: ObservationFlattener,
    ) -> None:
        super().__init__()
        self.flatten = flatten
        """Its observation inputs (the ``Box``, or the ``Dict``'s keys in order) to a row."""
        self.normalizer = normalizer
        self.actor = actor
        self.memory_size = actor.memory_size
        """Width of ``memory_in`` and ``memory_out`` (what marks a recurrent policy)."""
        low = torch.as_tensor(space.low.reshape(-1), dtype=torch.float32)
        high = torch.as_tensor(space.high.reshape(-1), dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs``: the observations (float32), then the memory ``[B, memory_size]``."""
        *obs, memory = inputs
        out, memory = self.actor.step(self.normalizer(self.flatten(*obs)), memory)
        mean, _ = out.chunk(2, dim=-1)
        return torch.tanh(mean) * self.scale + self.bias, memory


class SequenceReplayBuffer:
    """Ring buffer of padded sequences of transitions ``(s, a, r, s', terminated)``, each with
    the policy's and the critics' memories at its first step.

    :meth:`add` takes one vector step at a time: each environment's transitions gather into
    its open sequence, which is stored when it is ``sequence_length`` long or its episode ends.
    An open sequence is not part of :meth:`state_dict` (a resumed run starts new episodes).

    :param capacity: steps held at most, padding included (rounded down to whole sequences,
        at least one).
    """

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        action_dim: int,
        sequence_length: int,
        memory_sizes: tuple[int, int],
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
        self.actor_memory = np.zeros((C, memory_sizes[0]), dtype=np.float32)
        self.critic_memory = np.zeros((C, memory_sizes[1]), dtype=np.float32)
        self.pos = 0
        """Where the next sequence goes."""
        self.size = 0
        """Sequences held."""
        self.transitions = 0
        """Transitions held (padding not counted)."""
        self._open: list[list[tuple[Any, ...]]] = [[] for _ in range(num_envs)]
        self._open_memories: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = [
            (self.actor_memory[0], self.critic_memory[0])
        ] * num_envs

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
        actor_memory: npt.NDArray[np.float32],
        critic_memory: npt.NDArray[np.float32],
    ) -> None:
        """One step of every environment (first dimension = environment).

        :param ended: the episode ended at this step (its sequence closes).
        :param valid: this step is a transition (false: the autoreset step of NEXT_STEP mode,
            which is skipped).
        :param actor_memory: the memories the step was taken with (kept where it opens a
            sequence).
        """
        for n in np.flatnonzero(valid):
            steps = self._open[n]
            if not steps:
                self._open_memories[n] = (actor_memory[n].copy(), critic_memory[n].copy())
            steps.append((obs[n], actions[n], rewards[n], next_obs[n], terminated[n]))
            if ended[n] or len(steps) == self.sequence_length:
                self._store(steps, self._open_memories[n])
                self._open[n] = []

    def _store(
        self,
        steps: list[tuple[Any, ...]],
        memories: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
    ) -> None:
        i, k = self.pos, len(steps)
        if self.size == self.capacity:
            self.transitions -= int(self.mask[i].sum())
        columns = [np.stack(column) for column in zip(*steps, strict=True)]
        for name, value in zip(_FIELDS[:5], columns, strict=True):
            field = getattr(self, name)
            field[i] = 0.0
            field[i, :k] = value.reshape(k, *field.shape[2:])
        self.mask[i] = False
        self.mask[i, :k] = True
        self.actor_memory[i], self.critic_memory[i] = memories
        self.transitions += k
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample_sequences(self, sequences: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """``sequences`` sequences drawn uniformly with replacement: ``obs``, ``actions``,
        ``next_obs`` ``[S, L, ...]``, ``rewards``, ``terminated``, ``mask`` ``[S, L]``,
        ``actor_memory``, ``critic_memory`` ``[S, M]``, as CPU tensors."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=sequences)
        return {name: torch.from_numpy(getattr(self, name)[idx]) for name in _FIELDS + _MEMORIES}

    def sample(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` single transitions drawn uniformly with replacement from the stored
        sequences (padding never): ``(obs, actions, rewards, next_obs, terminated)``, as
        :meth:`~evtrain.trainers.loops.replay.ReplayBuffer.sample` gives them (for the models of the
        reward providers, which look at one transition at a time)."""
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
        """The stored sequences (as tensors, for ``torch.load(weights_only=True)``) and the
        write position."""
        n = self.size
        state: dict[str, Any] = {"pos": self.pos, "size": n, "transitions": self.transitions}
        for name in _FIELDS + _MEMORIES:
            state[name] = torch.from_numpy(getattr(self, name)[:n].copy())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        :raises ValueError: the saved sequences do not fit (``buffer_size``,
            ``sequence_length`` or ``memory_size`` changed).
        """
        n = int(state["size"])
        shape = tuple(state["obs"].shape[1:2]) + tuple(state["actor_memory"].shape[1:])
        ours = (self.sequence_length, self.actor_memory.shape[1])
        if n > self.capacity or (int(state["pos"]) != n and n != self.capacity) or shape != ours:
            raise ValueError(
                f"saved replay buffer holds {n} sequences of shape {shape}, this one holds "
                f"{self.capacity} of {ours}; resume with the same buffer_size and memory"
            )
        for name in _FIELDS + _MEMORIES:
            getattr(self, name)[:n] = np.asarray(state[name])
        self.size = n
        self.pos = int(state["pos"]) % self.capacity
        self.transitions = int(state["transitions"])
