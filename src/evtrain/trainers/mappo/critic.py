"""MAPPO's centralised critic (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games"): an agent-specific value of the whole group's state.

``V_i(s)`` reads every agent's observation, concatenated in slot order (an absent agent's as
zeros), which agents are present, and a one-hot of ``i``: the paper's agent-specific global
state, built from the agents' own observations.  An MLP of ``network_settings``' shape; the
group has a fixed number of slots (``group_size``), so no attention is needed.
"""

from __future__ import annotations

import torch
from torch import nn

from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.observations import ObservationLayout
from evtrain.trainers.settings import NetworkSettings


class MAPPOCritic(nn.Module):
    """``V_i`` of every agent of groups of ``group_size`` slots.

    ``forward`` takes normalised observation rows grouped as ``(B, G, D)`` and a ``(B, G)``
    boolean mask of the agents present, and returns ``(B, G)``.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        network: NetworkSettings,
        group_size: int,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        G = self.group_size = group_size
        width = layout.features(network)
        self.mlp = MLP(G * width + 2 * G, 1, network, out_gain=1.0, generator=generator)
        # drawn last: vector observations leave the rest as it is without images
        self.encoder = layout.encoder(network, generator)

    def forward(self, x: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        B, G = present.shape
        features = x if self.encoder is None else self.encoder(x.flatten(0, 1)).view(B, G, -1)
        features = features * present[..., None].to(features.dtype)
        state = torch.cat([features.flatten(1), present.to(features.dtype)], 1)
        # one row per agent: the group's state and which agent is asking
        whose = torch.eye(G, dtype=state.dtype, device=state.device).expand(B, G, G)
        rows = torch.cat([state[:, None].expand(B, G, state.shape[1]), whose], -1)
        value: torch.Tensor = self.mlp(rows)
        return value.squeeze(-1)
