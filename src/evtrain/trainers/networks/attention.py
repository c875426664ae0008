"""Self-attention over a variable number of entities, as ML-Agents' ``torch_entities/attention.py``
builds it for the POCA critic (after Baker et al. 2019, "Emergent tool use from multi-agent
autocurricula"): each entity is embedded (:class:`EntityEmbedding`), the embeddings attend to
each other (:class:`ResidualSelfAttention`) and are averaged into one vector.

Entities that are absent (an agent that left the episode, or has not joined it yet) are
masked: no entity attends to them and they are left out of the average, so the result is the
same whether a group has padding slots or not.  A group with no entity present gives the zero
vector.

The initialisation is ML-Agents' (T-Fixup, Huang et al. 2020): normal weights with standard
deviation ``sqrt(0.125 / embedding_size)``, zero biases.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

_MASKED = -1.0e6
"""The attention score of an absent entity (ML-Agents' ``NEG_INF``): finite, so that a query
with no entity to attend to averages them all instead of producing NaN."""
_EPSILON = 1.0e-7
"""Keeps the average of an empty group finite (0)."""


class Projected(NamedTuple):
    """Entities as :class:`ResidualSelfAttention` sees them, each ``(B, M, E)``."""

    x: torch.Tensor
    """The layer-normalised embeddings (the residual)."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


def tfixup_linear(
    in_features: int, out_features: int, embedding_size: int, generator: torch.Generator | None
) -> nn.Linear:
    """A linear layer with ML-Agents' attention initialisation: normal weights of standard
    deviation ``sqrt(0.125 / embedding_size)``, zero bias."""
    layer = nn.Linear(in_features, out_features)
    nn.init.normal_(layer.weight, std=math.sqrt(0.125 / embedding_size), generator=generator)
    nn.init.zeros_(layer.bias)
    return layer


class EntityEmbedding(nn.Module):
    """One linear layer and a nonlinearity from an entity's features to the embedding.

    :param in_features: width of one entity's features.
    :param embedding_size: width of the embedding (the attention's).
    :param activation: the nonlinearity after the layer.
    """

    def __init__(
        self,
        in_features: int,
        embedding_size: int,
        activation: Callable[[torch.Tensor], torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.linear = tfixup_linear(in_features, embedding_size, embedding_size, generator)
        self.activation = activation

    def forward(self, entities: torch.Tensor) -> torch.Tensor:
        """``(B, M, in_features)`` to ``(B, M, embedding_size)``."""
        return self.activation(self.linear(entities))


class ResidualSelfAttention(nn.Module):
    """Multi-head self-attention of entity embeddings with a residual connection and layer
    norms, averaged over the entities present (ML-Agents' ``ResidualSelfAttention``).

    ``forward`` takes ``(B, M, E)`` embeddings and a ``(B, M)`` boolean mask of the entities
    present, and returns ``(B, E)``.  The scores are scaled by ``1 / sqrt(E)`` (ML-Agents'
    choice; the whole embedding's width, not a head's).

    :param embedding_size: ``E``; a multiple of ``num_heads``.
    """

    def __init__(
        self, embedding_size: int, num_heads: int = 4, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if embedding_size % num_heads:
            num_heads = math.gcd(embedding_size, num_heads)
        self.num_heads = num_heads
        self.embedding_size = embedding_size
        E = embedding_size
        self.fc_q = tfixup_linear(E, E, E, generator)
        self.fc_k = tfixup_linear(E, E, E, generator)
        self.fc_v = tfixup_linear(E, E, E, generator)
        self.fc_out = tfixup_linear(E, E, E, generator)

    def forward(self, entities: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        return self.attend(self.project(entities), present)

    def project(self, entities: torch.Tensor) -> Projected:
        """The entities normalised, and their queries, keys and values: what :meth:`attend`
        takes.  Row by row, so the projections of sets that share entities can be computed
        once and gathered (POCA's baselines)."""
        x = F.layer_norm(entities, (self.embedding_size,))
        return Projected(x, self.fc_q(x), self.fc_k(x), self.fc_v(x))

    def attend(self, p: Projected, present: torch.Tensor) -> torch.Tensor:
        """Attention of the projected entities ``(B, M, E)`` present, averaged: ``(B, E)``."""
        B, M, E = p.x.shape
        h = self.num_heads
        # -- scores of every query entity i against every key entity j, per head; a group is
        # a few entities, where broadcast products cost less than batched matrix products
        q = p.q.view(B, M, 1, h, E // h)
        k = p.k.view(B, 1, M, h, E // h)
        v = p.v.view(B, 1, M, h, E // h)
        scores = (q * k).sum(-1) / math.sqrt(E)  # (B, i, j, h)
        keys = present[:, None, :, None]
        scores = torch.where(keys, scores, torch.full_like(scores, _MASKED))
        weights = torch.softmax(scores, dim=2)
        attended = (weights[..., None] * v).sum(2).reshape(B, M, E)
        # -- residual, normalised, then the average over the entities present
        out = F.layer_norm(self.fc_out(attended) + p.x, (E,))
        weight = present.to(out.dtype)[..., None]
        return (out * weight).sum(1) / (weight.sum(1) + _EPSILON)
