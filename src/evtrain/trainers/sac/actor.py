"""SAC's policy for ``Box`` actions: a tanh-squashed Gaussian acting in ``[-1, 1]^d``
(:class:`SquashedGaussianActor`), and its export view rescaled to the action bounds
(:class:`SACPolicy`).  Discrete actions: :mod:`evtrain.trainers.sac.discrete`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import ObservationFlattener
from evtrain.trainers.settings import NetworkSettings

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""Range of the policy's log standard deviation (cleanrl's bounds)."""


def squashed_sample(
    out: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``(action in [-1, 1], log_prob)`` from the policy's output layer ``out`` (the
    mean and the unsquashed log standard deviation, side by side in the last dimension)."""
    mean, log_std = out.chunk(2, dim=-1)
    # Squash log_std smoothly into its range instead of clamping it (no dead gradients).
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    u = mean + log_std.exp() * noise
    action = torch.tanh(u)
    log_prob = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
    # Change of variables through tanh: log(1 - tanh(u)^2), in its overflow-free form.
    log_prob = log_prob - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return action, log_prob.sum(-1)


class SquashedGaussianActor(nn.Module):
    """``a = tanh(u)``, ``u ~ N(mu(s), sigma(s))``, acting in ``[-1, 1]^d``.

    :param encoder: the image encoders in front of the hidden layers (``obs_dim`` is then
        their output's width); ``None`` for vector observations.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: NetworkSettings,
        generator: torch.Generator,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.net = MLP(obs_dim, 2 * action_dim, network, out_gain=0.01, generator=generator)
        self.encoder = encoder

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x if self.encoder is None else self.encoder(x))
        return out

    def forward(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``(action in [-1, 1], log_prob)`` for normalised observations."""
        return squashed_sample(self._out(x), generator)

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The squashed mean, in ``[-1, 1]^d``."""
        mean, _ = self._out(x).chunk(2, dim=-1)
        return torch.tanh(mean)


class SACPolicy(nn.Module):
    """Export view: raw observations in, the deterministic action in the env's bounds out."""

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self,
        normalizer: ObservationNormalizer,
        actor: SquashedGaussianActor,
        space: spaces.Box,
        flatten: ObservationFlattener | None = None,
    ) -> None:
        super().__init__()
        self.flatten = flatten or ObservationFlattener(())
        """Its inputs (the ``Box``, or the ``Dict``'s keys in order) to an observation row."""
        self.normalizer = normalizer
        self.actor = actor
        low = torch.as_tensor(space.low.reshape(-1), dtype=torch.float32)
        high = torch.as_tensor(space.high.reshape(-1), dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        x = self.normalizer(self.flatten(*obs))
        return self.actor.deterministic(x) * self.scale + self.bias
