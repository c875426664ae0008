"""PPO's actor-critic: policy and value MLPs over (optionally normalised) observations,
separate, or with ``hyperparameters.shared_critic`` sharing one body.

``Discrete`` actions use a categorical policy, ``MultiDiscrete`` ones (ML-Agents' branches)
one categorical per branch, masked by the observation's ``action_mask`` when it has one
(:mod:`evtrain.trainers.networks.masks`).  ``Box`` actions use a **clipped**
diagonal Gaussian, as SB3 and cleanrl do: the unclipped sample is what is stored and scored,
and it is clipped to the action bounds only on its way to the environment.  (A tanh-squashed
Gaussian, as in SAC, changes the log-probabilities and needs no clipping; PPO does well
without it.)  ML-Agents' hybrid actions, a ``Dict`` of a ``Box`` and a ``MultiDiscrete``,
use both (:mod:`evtrain.trainers.networks.action_heads`).

Distributions are written out instead of using ``torch.distributions``: the rollout calls them
every step and their argument validation and object construction cost more than the maths.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.action_heads import (
    action_heads,
    sample_action,
    score_actions,
)
from evtrain.trainers.networks.masks import masked_logits
from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.observations import observation_layout
from evtrain.trainers.settings import NetworkSettings


def flat_obs_dim(space: spaces.Space[Any]) -> int:
    """Length of a flattened observation (the row of :mod:`evtrain.trainers.observations`).

    :raises SpaceMismatchError: the observation space is not a ``Box`` or a ``Dict`` of them.
    """
    return observation_layout(space).size


__all__ = [
    "ActorCritic",
    "DeterministicPolicy",
    "action_bounds",
    "clip_actions",
    "flat_obs_dim",
    "policy_outputs",
    "sample_action",
    "score_actions",
]


def policy_outputs(action_space: spaces.Space[Any]) -> tuple[bool, int]:
    """``(a Discrete space, width of the policy's output layer)`` for an action space (see
    :func:`~evtrain.trainers.networks.action_heads.action_heads` for more).

    :raises SpaceMismatchError: an action space the trainers cannot learn.
    """
    heads = action_heads(action_space)
    return heads.kind == "discrete", heads.width


def action_bounds(action_space: spaces.Space[Any]) -> tuple[bool, torch.Tensor, torch.Tensor]:
    """``(clip, low, high)`` of an exported policy's continuous actions: a ``Box``'s bounds,
    flattened, or a hybrid space's ``Box``'s; nothing to clip otherwise (empty bounds)."""
    box = action_space
    if isinstance(action_space, spaces.Dict) and "continuous" in action_space.spaces:
        box = action_space.spaces["continuous"]
    low = high = np.zeros(0, dtype=np.float32)
    if isinstance(box, spaces.Box):
        low = box.low.reshape(-1).astype(np.float32)
        high = box.high.reshape(-1).astype(np.float32)
    return isinstance(box, spaces.Box), torch.from_numpy(low), torch.from_numpy(high)


def clip_actions(
    action: torch.Tensor, low: torch.Tensor, high: torch.Tensor, hybrid: int | None = None
) -> torch.Tensor:
    """Actions ``[B, c]`` clipped to the bounds ``[c]``; with ``hybrid`` (``c``), a hybrid
    ``[B, c + k]`` action's first ``c`` columns clipped, its branches' indices as they are."""
    if hybrid is None:
        return torch.clamp(action, low, high)
    return torch.cat([torch.clamp(action[..., :hybrid], low, high), action[..., hybrid:]], -1)


class ActorCritic(nn.Module):
    """Policy ``pi(a|s)`` and value ``V(s)`` for a ``Discrete`` or ``Box`` action space.

    ``num_values`` value heads, one per reward provider (extrinsic first).  The methods take
    normalised observation rows (:mod:`evtrain.trainers.observations`).  By default the
    actor and the critic are separate networks, as ML-Agents' actor and critic each have
    their own ``NetworkBody``: with images each puts its own image encoders in front of its
    hidden layers.  With ``shared_critic`` (ML-Agents' PPO option of that name, its
    ``SharedActorCritic``) the value heads sit on the policy's body, the policy's encoders
    and hidden layers, so the policy loss and the value loss both train that one body:
    :attr:`critic` is then the value heads alone.

    A ``Discrete`` or ``MultiDiscrete`` policy (or a hybrid one's branches) whose observations
    hold an ``action_mask`` reads it from the row (:attr:`mask`) and never takes a masked
    action (:mod:`evtrain.trainers.networks.masks`).
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        network: NetworkSettings,
        generator: torch.Generator,
        *,
        num_values: int = 1,
        shared_critic: bool = False,
    ) -> None:
        super().__init__()
        layout = observation_layout(observation_space, action_space)
        obs_dim = layout.features(network)
        self.heads = action_heads(action_space)
        """How the policy's output layer reads as actions."""
        self.discrete = self.heads.kind == "discrete"
        """A ``Discrete`` action space (one categorical, an action ``[B]``)."""
        policy_out = self.heads.width
        self.normalizer = layout.normalizer(network.normalize)
        self.shared_critic = shared_critic
        """The value heads take the policy's body's output (see the class's docs)."""
        self.mask = layout.mask
        """The action mask's columns of an observation row; ``None`` without one."""
        # One value head per reward provider on a shared body, as ML-Agents' critic has.
        if shared_critic:
            heads_in = network.hidden_units  # the policy's body's output
            self.critic = MLP(
                heads_in, num_values, network, out_gain=1.0, generator=generator, num_layers=0
            )
        else:
            self.critic = MLP(obs_dim, num_values, network, out_gain=1.0, generator=generator)
        self.actor = MLP(obs_dim, policy_out, network, out_gain=0.01, generator=generator)
        # State-independent log standard deviation, starting at std 1 (SB3's default); empty
        # without continuous actions, which keeps one state_dict layout for every kind.
        self.log_std = nn.Parameter(torch.zeros(self.heads.continuous))
        # Image encoders, drawn after everything else: none for vector observations, whose
        # networks stay exactly what they were.
        self.critic_encoder = None if shared_critic else layout.encoder(network, generator)
        self.actor_encoder = layout.encoder(network, generator)
        self.flatten = layout.flattener()
        """The exported policy's inputs to an observation row."""

    @staticmethod
    def _encoded(encoder: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
        if encoder is None:
            return x
        features: torch.Tensor = encoder(x)
        return features

    def allowed_actions(self, x: torch.Tensor) -> torch.Tensor | None:
        """The allowed columns ``[B, width]`` of the output layer for observation rows ``x``
        (their mask's columns, a branch's zeros as all allowed; see
        :meth:`~evtrain.trainers.networks.action_heads.ActionHeads.allowed`); ``None`` without
        a mask."""
        return None if self.mask is None else self.heads.allowed(x[..., self.mask])

    def policy_output(self, x: torch.Tensor) -> torch.Tensor:
        """The policy's output layer of normalised observations: the logits, masked (see
        :mod:`~evtrain.trainers.networks.masks`), or the Gaussian's mean."""
        out: torch.Tensor = self.actor(self._encoded(self.actor_encoder, x))
        return masked_logits(out, self.allowed_actions(x))

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """``V(s)`` of normalised observations: shape ``(B,)`` with one value head, ``(B, K)``
        with ``K``."""
        if self.shared_critic:
            value: torch.Tensor = self.critic(self.actor.body(self._encoded(self.actor_encoder, x)))
        else:
            value = self.critic(self._encoded(self.critic_encoder, x))
        return value.squeeze(-1)

    def act(self, x: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions for normalised observations: ``(action, log_prob)``."""
        ok = self.allowed_actions(x)
        out = masked_logits(self.actor(self._encoded(self.actor_encoder, x)), ok)
        return self.heads.sample(out, self.log_std, generator, ok)

    def evaluate(
        self,
        x: torch.Tensor,
        action: torch.Tensor,
        *,
        entropy: bool = True,
        entropy_grad: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """``(log_prob, entropy, value)`` of taken actions under the current networks (with a
        mask, of the masked distribution).

        :param entropy: compute the entropy (``None`` in its place otherwise).
        :param entropy_grad: keep the entropy in the autograd graph; without it the entropy is
            only a statistic, and computing it outside the graph costs far less.
        """
        if self.shared_critic:  # one pass through the body for both heads
            h = self.actor.body(self._encoded(self.actor_encoder, x))
            out, value = masked_logits(self.actor.head(h), self.allowed_actions(x)), self.critic(h)
            value = value.squeeze(-1)
        else:
            out, value = self.policy_output(x), self.value(x)
        log_prob, ent = self.heads.score(out, self.log_std, action, entropy, entropy_grad)
        return log_prob, ent, value

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The most likely action of normalised observations (argmax, or the mean; each
        branch's argmax); never a masked one."""
        return self.heads.mode(self.policy_output(x))


class DeterministicPolicy(nn.Module):
    """Export view of an :class:`ActorCritic`: raw observations in, the action to take out
    (one tensor, laid out as :mod:`~evtrain.trainers.networks.action_heads` says: a
    ``Discrete``'s ``[B]`` int64, a ``MultiDiscrete``'s ``[B, k]`` int64, a ``Box``'s
    ``[B, c]``, a hybrid space's ``[B, c + k]`` float32: the continuous values, then each
    branch's index; :attr:`heads` tells them apart, and
    :func:`~evtrain.trainers.networks.action_heads.to_env` makes the last a ``Dict``'s).

    ``Box`` actions (a hybrid space's continuous ones) are clipped to the action bounds, as
    during training.  An ``action_mask`` observation is the exported graph's input of that
    name, and the mask of its argmax (each branch's).
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, agent: ActorCritic, action_space: spaces.Space[Any]) -> None:
        super().__init__()
        self.agent = agent
        self.heads = agent.heads
        """The action space's parts: ``continuous`` columns, then one per branch."""
        self.clip, low, high = action_bounds(action_space)
        self.hybrid = self.heads.continuous if self.heads.kind == "hybrid" else None
        """A hybrid action's continuous columns (what is clipped); ``None`` otherwise."""
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        """Actions for the observations as the environment gives them (a ``Box``'s batch, or
        a ``Dict``'s batches in its key order, float32)."""
        x = self.agent.normalizer(self.agent.flatten(*obs))
        action = self.agent.deterministic(x)
        return clip_actions(action, self.low, self.high, self.hybrid) if self.clip else action
