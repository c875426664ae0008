"""Policies for the export and checkpoint tests: a discrete one, one that raises, and the
observations they are fed."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

OBS_DIM = 5


class NormalizedMLP(nn.Module):
    """Observation normaliser (mean/std buffers, clipped) and a tanh MLP, as trainers build."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, out: int, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("mean", torch.randn(OBS_DIM, generator=generator))
        self.register_buffer("std", torch.rand(OBS_DIM, generator=generator) + 0.5)
        self.net = nn.Sequential(nn.Linear(OBS_DIM, 32), nn.Tanh(), nn.Linear(32, out))
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(((obs - self.mean) / self.std).clamp(-5.0, 5.0))
        return out


class DiscretePolicy(NormalizedMLP):
    """Argmax over 3 logits: int64 actions ``[B]``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(3, seed)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits(obs).argmax(-1)


class RaisingPolicy(nn.Module):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this policy cannot be traced")


def observations(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 3.0, (n, OBS_DIM)).astype(np.float32)
