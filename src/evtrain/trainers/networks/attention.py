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
        and :meth:`attend_sets` take.  Row by row, so that sets sharing entities share their
        projections (POCA's value and baselines)."""
        E = self.embedding_size
        x = F.layer_norm(entities, (E,))
        # one matrix product for the three (the layers keep their own parameters)
        layers = (self.fc_q, self.fc_k, self.fc_v)
        weight = torch.cat([layer.weight for layer in layers])
        bias = torch.cat([layer.bias for layer in layers])
        q, k, v = F.linear(x, weight, bias).chunk(3, -1)
        return Projected(x, q, k, v)

    def attend(self, p: Projected, present: torch.Tensor) -> torch.Tensor:
        """Attention of the projected entities ``(B, M, E)`` present, averaged: ``(B, E)``."""
        M = p.x.shape[1]
        members = torch.arange(M, device=p.x.device)[None]
        return self.attend_sets(p, members, present[:, None])[:, 0]

    def attend_sets(
        self, p: Projected, members: torch.Tensor, present: torch.Tensor
    ) -> torch.Tensor:
        """Attention within ``S`` sets of the projected entities ``p`` ``(B, K, E)``, each
        averaged: ``(B, S, E)``.

        Set ``s`` holds the ``M`` entities ``members[s]`` (``(S, M)`` indices into the ``K``,
        distinct within a set), those where ``present`` ``(B, S, M)``.  Every set is what
        :meth:`attend` gives for its entities, but sets that share entities share their work:
        the scores of every pair of the ``K`` entities are one batched matrix product, each
        set picks its pairs from them, and each set's weights are spread over the ``K``
        entities (zero outside the set) for one more product with their values.  POCA's
        critic attends once over its value set and every agent's baseline set this way.
        """
        B, K, E = p.x.shape
        S, M = members.shape
        h, d = self.num_heads, E // self.num_heads
        # -- the scores of every key entity against every query entity, per head
        q, k, v = (y.reshape(B, K, h, d).transpose(1, 2) for y in (p.q, p.k, p.v))
        pair_scores = torch.matmul(k, q.transpose(-1, -2)) / math.sqrt(E)  # (B, h, K, K)
        # -- each set's: key n against query m of set s (a softmax over a dimension that is
        # not the last costs less), the absent keys masked
        pairs = (members[:, :, None] * K + members[:, None, :]).flatten()
        scores = pair_scores.flatten(2).index_select(-1, pairs).view(B, h, S, M, M)
        keys = present[:, None, :, :, None]
        scores = torch.where(keys, scores, torch.full_like(scores, _MASKED))
        weights = torch.softmax(scores, dim=-2)
        # -- each set query's weights over the K entities (zero outside its set), times values
        spread = members.T[None, None, :, :, None].expand(B, h, M, S, M)
        spread_weights = weights.new_zeros(B, h, K, S, M).scatter(
            2, spread, weights.transpose(2, 3)
        )
        spread_weights = spread_weights.view(B, h, K, S * M).transpose(-1, -2)
        attended = torch.matmul(spread_weights, v).transpose(1, 2).reshape(B, S * M, E)
        # -- residual, normalised, then each set's average over its entities present
        residual = p.x.index_select(1, members.flatten())
        out = F.layer_norm(self.fc_out(attended) + residual, (E,)).view(B, S, M, E)
        weight = present.to(out.dtype)[..., None]
        return (out * weight).sum(2) / (weight.sum(2) + _EPSILON)
