"""What the trainers' optimisers share: Adam as evtrain builds it, and the learning-rate floor.

Each algorithm keeps its own schedules; only the learning rate's floor is common to them.
"""

from __future__ import annotations

import torch
from torch import nn

LEARNING_RATE_FLOOR = 1.0e-10
"""Where a linear learning-rate schedule ends at ``max_steps`` (ML-Agents' value)."""


def make_adam(
    params: list[nn.Parameter], lr: float, device: torch.device, eps: float = 1e-8
) -> torch.optim.Adam:
    """Adam, fused into one kernel where torch has one for the device (much less overhead
    for the small networks RL uses)."""
    fused = device.type in ("cpu", "cuda")
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=fused)
