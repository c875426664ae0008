"""PPO's actor-critic: policy and value MLPs over (optionally normalised) observations,
separate, or with ``hyperparameters.shared_critic`` sharing one body.

``Discrete`` actions use a categorical policy, masked by the observation's ``action_mask``
when it has one (:mod:`evtrain.trainers.networks.masks`).  ``Box`` actions use a **clipped**
diagonal Gaussian, as SB3 and cleanrl do: the unclipped sample is what is stored and scored,
and it is clipped to the action bounds only on its way to the environment.  (A tanh-squashed
Gaussian, as in SAC, changes the log-probabilities and needs no clipping; PPO does well
without it.)

Distributions are written out instead of using ``torch.distributions``: the rollout calls them
every step and their argument validation and object construction cost more than the maths.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.export.mlagents import ActionDistribution
from evtrain.trainers.networks.masks import allowed_in, masked_logits, masked_scores
from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.observations import observation_layout
from evtrain.trainers.settings import NetworkSettings

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def flat_obs_dim(space: spaces.Space[Any]) -> int:
    """Length of a flattened observation (the row of :mod:`evtrain.trainers.observations`).

    :raises SpaceMismatchError: the observation space is not a ``Box`` or a ``Dict`` of them.
    """
    return observation_layout(space).size


def policy_outputs(action_space: spaces.Space[Any]) -> tuple[bool, int]:
    """``(discrete, width of the policy's output layer)`` for an action space.

    :raises SpaceMismatchError: neither ``Discrete`` nor ``Box``.
    """
    if isinstance(action_space, spaces.Discrete):
        return True, int(action_space.n)
    if isinstance(action_space, spaces.Box):
        return False, int(np.prod(action_space.shape))
    raise SpaceMismatchError(
        f"PPO supports Discrete and Box action spaces, got {type(action_space).__name__}"
    )


def sample_action(
    out: torch.Tensor,
    log_std: torch.Tensor,
    discrete: bool,
    generator: torch.Generator,
    ok: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from the policy's output layer ``out``: ``(action, log_prob)``.

    ``Discrete``: ``out`` are logits (masked already where there is a mask); ``Box``: the
    Gaussian's mean, ``log_std`` its log standard deviation.

    :param ok: the allowed actions (:func:`~evtrain.trainers.networks.masks.allowed`), never
        to be sampled otherwise; ``None``: all.
    """
    if discrete:
        log_probs = torch.log_softmax(out, dim=-1)
        # Gumbel-max: argmax(log p + Gumbel noise) is an exact sample of Categorical(p),
        # cheaper than torch.multinomial on small batches.  Gumbel = -log(Exponential(1)).
        noise = torch.empty_like(log_probs).exponential_(generator=generator)
        action = masked_scores(log_probs - noise.log(), ok).argmax(-1, keepdim=True)
        return action.squeeze(-1), log_probs.gather(-1, action).squeeze(-1)
    noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
    action = out + log_std.exp() * noise
    log_prob = (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    return action, log_prob


def score_actions(
    out: torch.Tensor,
    log_std: torch.Tensor,
    discrete: bool,
    action: torch.Tensor,
    entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_prob, entropy)`` of taken actions under the policy's output layer ``out``
    (see :meth:`ActorCritic.evaluate` for the flags)."""
    if discrete:
        log_probs = torch.log_softmax(out, dim=-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        ent = None
        if entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                ent = -(log_probs.exp() * log_probs).sum(-1)
        return log_prob, ent
    z = (action - out) * torch.exp(-log_std)
    log_prob = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    ent = (0.5 + _LOG_SQRT_2PI + log_std).sum().expand(out.shape[0]) if entropy else None
    return log_prob, ent


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

    A ``Discrete`` policy whose observations hold an ``action_mask`` reads it from the row
    (:attr:`mask`) and never takes a masked action (:mod:`evtrain.trainers.networks.masks`).
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
        self.discrete, policy_out = policy_outputs(action_space)
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
        # for Discrete, which keeps one state_dict layout for both kinds.
        self.log_std = nn.Parameter(torch.zeros(0 if self.discrete else policy_out))
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
        """The allowed actions ``[B, n]`` of observation rows ``x`` (their mask's columns, a
        row of zeros as all allowed); ``None`` without a mask."""
        return allowed_in(x, self.mask)

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
        return sample_action(out, self.log_std, self.discrete, generator, ok)

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
        log_prob, ent = score_actions(
            out, self.log_std, self.discrete, action, entropy, entropy_grad
        )
        return log_prob, ent, value

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The most likely action of normalised observations (argmax, or the mean); never a
        masked one."""
        out = self.policy_output(x)
        return out.argmax(-1) if self.discrete else out


class DeterministicPolicy(nn.Module):
    """Export view of an :class:`ActorCritic`: raw observations in, the action to take out.

    ``Box`` actions are clipped to the action bounds, as during training.  An ``action_mask``
    observation is the exported graph's input of that name, and the mask of its argmax.
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, agent: ActorCritic, action_space: spaces.Space[Any]) -> None:
        super().__init__()
        self.agent = agent
        self.clip = isinstance(action_space, spaces.Box)
        low = high = np.zeros(0, dtype=np.float32)
        if isinstance(action_space, spaces.Box):
            low = action_space.low.reshape(-1).astype(np.float32)
            high = action_space.high.reshape(-1).astype(np.float32)
        self.register_buffer("low", torch.from_numpy(low))
        self.register_buffer("high", torch.from_numpy(high))

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        """Actions for the observations as the environment gives them (a ``Box``'s batch, or
        a ``Dict``'s batches in its key order, float32)."""
        x = self.agent.normalizer(self.agent.flatten(*obs))
        action = self.agent.deterministic(x)
        return torch.clamp(action, self.low, self.high) if self.clip else action

    def action_distribution(self, *obs: torch.Tensor) -> ActionDistribution:
        """The distribution the actions are drawn from in training, for a graph that samples
        (:func:`~evtrain.export.export_for_unity`): the masked logits, or the Gaussian."""
        out = self.agent.policy_output(self.agent.normalizer(self.agent.flatten(*obs)))
        if self.agent.discrete:
            return ActionDistribution(mean=None, log_std=None, logits=out)
        return ActionDistribution(mean=out, log_std=self.agent.log_std, logits=None)
