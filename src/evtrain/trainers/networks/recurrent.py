"""PPO's actor-critic with ``network_settings.memory``: an LSTM in the policy and one in the
critic (see :mod:`evtrain.trainers.networks.memory`).

As ML-Agents' separate critic, the critic has a memory of its own, of the same
``memory_size``: the two networks share nothing but the observations.  The distributions over
actions are :class:`~evtrain.trainers.networks.policies.ActorCritic`'s, masked as its are by
an ``action_mask`` observation.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.action_heads import action_heads
from evtrain.trainers.networks.masks import masked_logits
from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.networks.policies import action_bounds, clip_actions
from evtrain.trainers.observations import observation_layout
from evtrain.trainers.settings import NetworkSettings


class RecurrentActorCritic(nn.Module):
    """Policy ``pi(a | s, memory)`` and value ``V(s, memory)``, each with its own memory.

    ``num_values`` value heads, one per reward provider (extrinsic first).
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        network: NetworkSettings,
        generator: torch.Generator,
        *,
        num_values: int = 1,
    ) -> None:
        super().__init__()
        if network.memory is None:
            raise ValueError("RecurrentActorCritic needs network_settings.memory")
        layout = observation_layout(observation_space, action_space)
        obs_dim = layout.features(network)
        self.heads = action_heads(action_space)
        """How the policy's output layer reads as actions."""
        self.discrete = self.heads.kind == "discrete"
        """A ``Discrete`` action space (one categorical, an action ``[B]``)."""
        policy_out = self.heads.width
        self.normalizer = layout.normalizer(network.normalize)
        self.mask = layout.mask
        """The action mask's columns of an observation row; ``None`` without one."""
        # Drawn in ActorCritic's order: critic, then actor.
        self.critic = RecurrentMLP(
            obs_dim, num_values, network, network.memory, out_gain=1.0, generator=generator
        )
        self.actor = RecurrentMLP(
            obs_dim, policy_out, network, network.memory, out_gain=0.01, generator=generator
        )
        self.log_std = nn.Parameter(torch.zeros(self.heads.continuous))
        # Image encoders, drawn after everything else as ActorCritic draws its own.
        self.critic.encoder = layout.encoder(network, generator)
        self.actor.encoder = layout.encoder(network, generator)
        self.flatten = layout.flattener()
        """The exported policy's inputs to an observation row."""

    @property
    def memory_size(self) -> int:
        """Width of the policy's memory (the critic's is as wide)."""
        return self.actor.memory_size

    def allowed_actions(self, x: torch.Tensor) -> torch.Tensor | None:
        """The allowed columns of the output layer for observation rows ``x`` (any leading
        dimensions); ``None`` without a mask."""
        return None if self.mask is None else self.heads.allowed(x[..., self.mask])

    def act(
        self, x: torch.Tensor, memory: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions for one step of normalised observations:
        ``(action, log_prob, next memory)``."""
        out, memory = self.actor.step(x, memory)
        ok = self.allowed_actions(x)
        out = masked_logits(out, ok)
        action, log_prob = self.heads.sample(out, self.log_std, generator, ok)
        return action, log_prob, memory

    def value(self, x: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``V(s)`` of one step of normalised observations, and the critic's next memory:
        values ``(B,)`` with one value head, ``(B, K)`` with ``K``."""
        value, memory = self.critic.step(x, memory)
        return value.squeeze(-1), memory

    def evaluate(
        self,
        x: torch.Tensor,
        actor_memory: torch.Tensor,
        critic_memory: torch.Tensor,
        mask: torch.Tensor,
        action: torch.Tensor,
        *,
        entropy: bool = True,
        entropy_grad: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """``(log_prob, entropy, value)`` of the steps of sequences under the current networks.

        :param x: ``[S, L, obs]`` normalised observations, padded.
        :param actor_memory: ``[S, M]`` the policy's memory at each sequence's first step.
        :param critic_memory: ``[S, M]`` the critic's memory there.
        :param mask: ``[S, L]`` which positions hold steps; the results are those steps'
            alone, in row-major order of ``mask``.
        :param action: the actions taken at those steps.
        :param entropy: as :meth:`~evtrain.trainers.networks.policies.ActorCritic.evaluate`.
        :param entropy_grad: as :meth:`~evtrain.trainers.networks.policies.ActorCritic.evaluate`.
        """
        ok = self.allowed_actions(x)
        out = masked_logits(
            self.actor.sequences(x, actor_memory)[mask], None if ok is None else ok[mask]
        )
        value = self.critic.sequences(x, critic_memory)[mask].squeeze(-1)
        log_prob, ent = self.heads.score(out, self.log_std, action, entropy, entropy_grad)
        return log_prob, ent, value

    def deterministic(
        self, x: torch.Tensor, memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The most likely action of one step of normalised observations (argmax, or the
        mean; never a masked one), and the policy's next memory."""
        out, memory = self.actor.step(x, memory)
        out = masked_logits(out, self.allowed_actions(x))
        return self.heads.mode(out), memory


class RecurrentPolicy(nn.Module):
    """Export view of a :class:`RecurrentActorCritic`: raw observations (one tensor per input,
    as :class:`~.policies.DeterministicPolicy` takes them) and the memory in,
    the action to take and the next memory out.

    ``Box`` actions (a hybrid space's continuous ones) are clipped to the action bounds, as
    during training; the actions are laid out as
    :class:`~evtrain.trainers.networks.policies.DeterministicPolicy`'s.
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, agent: RecurrentActorCritic, action_space: spaces.Space[Any]) -> None:
        super().__init__()
        self.agent = agent
        self.memory_size = agent.memory_size
        """Width of ``memory_in`` and ``memory_out`` (what marks a recurrent policy)."""
        self.heads = agent.heads
        """The action space's parts: ``continuous`` columns, then one per branch."""
        self.clip, low, high = action_bounds(action_space)
        self.hybrid = self.heads.continuous if self.heads.kind == "hybrid" else None
        """A hybrid action's continuous columns (what is clipped); ``None`` otherwise."""
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs``: the observations (float32), then the memory ``[B, memory_size]``."""
        *obs, memory = inputs
        x = self.agent.normalizer(self.agent.flatten(*obs))
        action, memory = self.agent.deterministic(x, memory)
        return (
            clip_actions(action, self.low, self.high, self.hybrid) if self.clip else action
        ), memory
