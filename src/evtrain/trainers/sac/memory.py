"""What SAC needs for ``network_settings.memory``: recurrent twin critics, and the export view
of a recurrent policy.

**Critics.**  Each of the two critics runs the observations through its hidden layers and an
LSTM of its own (:class:`~evtrain.trainers.networks.memory.LSTMMemory`); the action joins after the
LSTM, through one more hidden layer, so the memory depends on the observations alone: the
critics can step along during the rollout, and ``Q(s', a')`` for the target takes the memory
the sequence had at ``s'`` whatever ``a'`` the policy proposes.

**Replay.**  The off-policy loop stores sequences with the memories they started from
(:class:`~evtrain.trainers.loops.replay.SequenceReplayBuffer`): SAC's are ``actor_memory``
(the policy's) and ``critic_memory`` (both critics', side by side).
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.memory import LSTMMemory, RecurrentMLP
from evtrain.trainers.networks.mlp import ACTIVATIONS, hidden_layers, layer_init
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import ObservationFlattener, ObservationLayout
from evtrain.trainers.settings import MemorySettings, NetworkSettings


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
