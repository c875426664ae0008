"""MA-POCA's centralised critic (Cohen et al. 2021, "On the Use and Misuse of Absorbing States in
Multi-agent Reinforcement Learning"; ML-Agents' ``POCAValueNetwork`` on a
``MultiAgentNetworkBody``): one network, two questions.

* The **value** ``V(s)`` of a group: every agent present is an entity embedded from its
  observation; self-attention over them, averaged (:mod:`evtrain.trainers.networks.attention`),
  with the number of agents present beside it, goes through the hidden layers to one output.
* The **counterfactual baseline** ``b_i(s, a_-i)`` of agent ``i``: the same network, where agent
  ``i`` is an entity of its observation only and every other agent present one of its
  observation *and action*: what the group is expected to earn given what the others did,
  whatever ``i`` did.  ``return - b_i`` is then ``i``'s own share of the credit.

Absent agents (left early, or not yet in) are masked out of the attention, so the critic takes
any number of agents up to ``group_size``.  The number present enters as ML-Agents has it,
scaled to ``[-1, 1]`` (here by ``group_size``, which is known in advance).
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.action_heads import action_heads
from evtrain.trainers.networks.attention import EntityEmbedding, ResidualSelfAttention
from evtrain.trainers.networks.mlp import ACTIVATIONS, MLP
from evtrain.trainers.observations import ObservationLayout
from evtrain.trainers.settings import NetworkSettings


class POCACritic(nn.Module):
    """Value and counterfactual baselines of groups of up to ``group_size`` agents.

    The methods take normalised observation rows grouped as ``(B, G, D)`` and a ``(B, G)``
    boolean mask of the agents present; ``hidden_units`` is the attention's width.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        action_space: spaces.Space[Any],
        network: NetworkSettings,
        group_size: int,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.group_size = group_size
        self.heads = action_heads(action_space)
        """The actions' parts: what the critic sees of an action (:meth:`_actions`)."""
        self.action_width = self.heads.feature_width
        width = layout.features(network)
        embedding = network.hidden_units
        activation = ACTIVATIONS[network.activation]
        self.obs_embedding = EntityEmbedding(width, embedding, activation, generator)
        self.obs_action_embedding = EntityEmbedding(
            width + self.action_width, embedding, activation, generator
        )
        self.attention = ResidualSelfAttention(embedding, generator=generator)
        self.head = MLP(embedding + 1, 1, network, out_gain=1.0, generator=generator)
        # drawn last: vector observations leave the rest as it is without images
        self.encoder = layout.encoder(network, generator)

    def value(self, x: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """``V`` of each group: ``(B,)``."""
        own = self.obs_embedding(self._features(x))
        return self._head(self.attention(own, present), present)

    def baseline(
        self, x: torch.Tensor, actions: torch.Tensor, present: torch.Tensor
    ) -> torch.Tensor:
        """``b_i`` of every agent ``i`` of each group: ``(B, G)``."""
        return self.evaluate(x, actions, present)[1]

    def evaluate(
        self, x: torch.Tensor, actions: torch.Tensor, present: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(V, b)`` of each group in one attention pass: ``(B,)``, ``(B, G)``.

        The ``2G`` entities of a group (each agent's observation, and its observation and
        action) are embedded and projected once; the value's set (the observations) and
        agent ``i``'s baseline set (its observation, the others' observations and actions)
        are ``G + 1`` sets of them (:meth:`ResidualSelfAttention.attend_sets`), which share
        their scores and go through the head together."""
        G = present.shape[1]
        features = self._features(x)
        own = self.obs_embedding(features)
        acted = self.obs_action_embedding(torch.cat([features, self._actions(actions)], -1))
        entities = self.attention.project(torch.cat([own, acted], 1))
        # set 0 is the value's, set 1 + i agent i's baseline: its own observation (entity i)
        # and the others' observations and actions (entities G + j)
        self_of = torch.eye(G, dtype=torch.bool, device=x.device)
        slots = torch.arange(G, device=x.device)
        members = torch.cat([slots[None], torch.where(self_of, slots, slots + G)])
        mask = torch.cat([present[:, None], self_of | present[:, None, :]], 1)
        out = self._head(self.attention.attend_sets(entities, members, mask), mask)
        return out[:, 0], out[:, 1:]

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, G, D)`` rows to ``(B, G, F)`` features (images through the encoder)."""
        if self.encoder is None:
            return x
        features: torch.Tensor = self.encoder(x.flatten(0, 1))
        return features.view(*x.shape[:2], -1)

    def _actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions as the critic sees them: the continuous values as sampled, then each
        branch's one-hot."""
        if self.heads.kind == "box":
            return actions.reshape(*actions.shape[:2], self.action_width)
        return self.heads.features(actions)

    def _head(self, pooled: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        agents = present.sum(-1, keepdim=True).to(pooled.dtype) * (2.0 / self.group_size) - 1.0
        out: torch.Tensor = self.head(torch.cat([pooled, agents], -1))
        return out.squeeze(-1)
