"""GAIL: generative adversarial imitation learning (Ho & Ermon 2016) as a reward provider.

A discriminator ``D(s[, a])`` learns to output 1 on demonstrations and 0 on the policy's
experience; the reward of a transition is ``-log(1 - D)``, large where the policy does what
the demonstrations do.  As in ML-Agents' ``GAILRewardProvider``:

- the discriminator is an encoder of SiLU layers over the observation (and, with
  ``use_actions``, the action: one-hot for ``Discrete``), then one sigmoid unit;
- its loss is the binary cross-entropy ``-log D(expert) - log(1 - D(policy))`` on a policy
  minibatch and an expert minibatch of the same size drawn from the demonstrations, plus a
  gradient penalty ``10 * E[(||grad D(x)|| - 1)^2]`` at points ``x`` interpolated at random
  between the two (Gulrajani et al. 2017; it keeps the discriminator smooth);
- with ``use_vail`` a variational information bottleneck (Peng et al. 2018): the encoding goes
  through a 128-unit Gaussian code ``z ~ N(mu(s), sigma)``, sampled while training and its mean
  when rewarding; the KL divergence of the code from ``N(0, 1)`` is held near 0.5 by a
  coefficient ``beta`` that follows it (``beta += 5e-4 * (KL - 0.5)``, at least 0);
- GAIL is episodic (ML-Agents' ``ignore_done`` false): after a termination it pays nothing.

The discriminator sees observations as the policy does (normalised with the policy's
statistics when ``network_settings.normalize`` is on), the demonstrations' too.
ML-Agents also feeds the episode's ``done`` flag to the discriminator with ``use_actions``;
evtrain does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.mlp import layer_init
from evtrain.trainers.rewards.reward_provider import RewardProvider, SiLUBody
from evtrain.trainers.settings import GAILSettings, provider_hidden_layers

GRADIENT_PENALTY_WEIGHT = 10.0
"""Weight of the gradient penalty in the discriminator's loss (ML-Agents')."""
Z_SIZE = 128
"""Units of VAIL's Gaussian code (ML-Agents')."""
BETA_STEP = 5.0e-4
"""How fast VAIL's ``beta`` follows the KL divergence (ML-Agents' ``alpha``)."""
MUTUAL_INFORMATION = 0.5
"""The KL divergence VAIL holds the code to (ML-Agents' ``mutual_information``)."""
EPSILON = 1.0e-7
"""Keeps the logarithms finite (ML-Agents')."""


def action_features(action_space: spaces.Space[Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function from a batch of actions to the discriminator's action input: one-hot for
    ``Discrete``, the flattened action for ``Box``."""
    if isinstance(action_space, spaces.Discrete):
        n = int(action_space.n)
        return lambda actions: F.one_hot(actions.long(), n).to(torch.float32)
    return lambda actions: actions.reshape(actions.shape[0], -1).to(torch.float32)


def action_width(action_space: spaces.Space[Any]) -> int:
    """Width of :func:`action_features`' output."""
    return int(spaces.flatdim(action_space))


class Discriminator(nn.Module):
    """``D(x)`` in (0, 1) for inputs ``x`` (observation, and action features when used)."""

    beta: torch.Tensor

    def __init__(
        self, in_features: int, hidden: list[int], use_vail: bool, generator: torch.Generator
    ) -> None:
        super().__init__()
        self.body = SiLUBody([in_features, *hidden], generator)
        width = hidden[-1]
        self.use_vail = use_vail
        if use_vail:
            self.z_mu = layer_init(nn.Linear(width, Z_SIZE), 0.1, generator)
            self.z_sigma = nn.Parameter(torch.ones(Z_SIZE))
            # follows the KL divergence, not trained by gradients; saved with the model
            self.register_buffer("beta", torch.zeros(()))
            width = Z_SIZE
        self.estimator = layer_init(nn.Linear(width, 1), 0.2, generator)

    def forward(
        self, x: torch.Tensor, noise: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(D(x), mu)``: the estimates ``(B,)`` and VAIL's code mean (``None`` without
        VAIL); ``noise`` samples the code (training), else its mean is used."""
        h = self.body(x)
        mu = None
        if self.use_vail:
            mu = self.z_mu(h)
            h = mu
            if noise is not None:
                eps = torch.randn(mu.shape, generator=noise, device=mu.device, dtype=mu.dtype)
                h = mu + eps * self.z_sigma
        return torch.sigmoid(self.estimator(h)).squeeze(-1), mu


class GAILRewardProvider(RewardProvider):
    """GAIL's reward ``strength * -log(1 - D(s[, a]))``, and the discriminator's training.

    :param expert_obs: the demonstrations' observations, flattened, raw (on ``device``).
    :param expert_actions: their actions as the trainer stores its own (on ``device``).
    :param normalize: the policy's observation normaliser (applied to the demonstrations).
    :param sampler: draws the expert minibatches, the interpolation points and VAIL's noise
        (the trainer's generator on ``device``, so that a resumed run draws as it would have).
    """

    stat_name = "GAIL"
    episodic = True
    _normalize: Callable[[torch.Tensor], torch.Tensor]

    def __init__(
        self,
        settings: GAILSettings,
        obs_dim: int,
        action_space: spaces.Space[Any],
        generator: torch.Generator,
        device: torch.device,
        *,
        expert_obs: torch.Tensor,
        expert_actions: torch.Tensor,
        normalize: Callable[[torch.Tensor], torch.Tensor],
        sampler: torch.Generator,
    ) -> None:
        self.use_actions = settings.use_actions
        in_features = obs_dim + (action_width(action_space) if self.use_actions else 0)
        model = Discriminator(
            in_features, provider_hidden_layers(settings), settings.use_vail, generator
        )
        super().__init__(settings, model, model, device)
        self.discriminator = model
        self._features = action_features(action_space)
        # Outside the module tree: the normaliser is the policy's (not saved with GAIL).
        object.__setattr__(self, "_normalize", normalize)
        self._sampler = sampler
        self.expert_obs = expert_obs
        self.expert_actions = expert_actions

    def _inputs(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        if not self.use_actions:
            return obs
        return torch.cat([obs, self._features(actions)], dim=1)

    def _reward(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        estimate, _ = self.discriminator(self._inputs(obs, actions))
        return -torch.log(1.0 - estimate * (1.0 - EPSILON))

    def _expert_batch(self, size: int) -> torch.Tensor:
        """``size`` demonstration steps drawn uniformly (with replacement), as inputs."""
        count = self.expert_obs.shape[0]
        index = torch.randint(
            count, (size,), generator=self._sampler, device=self.expert_obs.device
        )
        obs = self._normalize(self.expert_obs[index])
        return self._inputs(obs, self.expert_actions[index])

    def _loss(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model = self.discriminator
        policy_x = self._inputs(obs, actions)
        expert_x = self._expert_batch(obs.shape[0])
        noise = self._sampler if model.use_vail else None
        policy_d, policy_mu = model(policy_x, noise)
        expert_d, expert_mu = model(expert_x, noise)
        # -- the discriminator's cross-entropy: demonstrations 1, policy 0
        gail_loss = -(torch.log(expert_d + EPSILON) + torch.log(1.0 - policy_d + EPSILON)).mean()
        stats = {
            "Policy/GAIL Policy Estimate": policy_d.detach().mean(),
            "Policy/GAIL Expert Estimate": expert_d.detach().mean(),
            "Losses/GAIL Loss": gail_loss.detach(),
        }
        loss = gail_loss
        if model.use_vail:
            assert policy_mu is not None and expert_mu is not None  # use_vail: codes exist
            loss = loss + self._vail_loss(policy_mu, expert_mu, stats)
        penalty = GRADIENT_PENALTY_WEIGHT * self._gradient_penalty(policy_x, expert_x)
        stats["Policy/GAIL Grad Mag Loss"] = penalty.detach()
        return loss + penalty, stats

    def _vail_loss(
        self, policy_mu: torch.Tensor, expert_mu: torch.Tensor, stats: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``beta * (KL - 0.5)``, then ``beta`` moves towards keeping KL at 0.5."""
        model = self.discriminator
        sigma_sq = model.z_sigma.square()
        kl_loss = torch.mean(
            -torch.sum(
                1.0
                + sigma_sq.log()
                - 0.5 * expert_mu.square()
                - 0.5 * policy_mu.square()
                - sigma_sq,
                dim=1,
            )
        )
        # beta as it was: the step below changes it in place, and backward needs this one
        vail_loss = model.beta.clone() * (kl_loss - MUTUAL_INFORMATION)
        with torch.no_grad():
            model.beta.copy_(
                (model.beta + BETA_STEP * (kl_loss - MUTUAL_INFORMATION)).clamp(min=0.0)
            )
        stats["Policy/GAIL Beta"] = model.beta.clone()
        stats["Losses/GAIL KL Loss"] = kl_loss.detach()
        return vail_loss

    def _gradient_penalty(self, policy_x: torch.Tensor, expert_x: torch.Tensor) -> torch.Tensor:
        """``E[(||grad_x D(x)|| - 1)^2]`` at random points between policy and expert inputs."""
        mix = torch.rand(
            policy_x.shape, generator=self._sampler, device=policy_x.device, dtype=policy_x.dtype
        )
        x = (mix * policy_x + (1.0 - mix) * expert_x).detach().requires_grad_(True)
        noise = self._sampler if self.discriminator.use_vail else None
        estimate, _ = self.discriminator(x, noise)
        (gradient,) = torch.autograd.grad(estimate.sum(), x, create_graph=True)
        # sqrt(|g|^2 + eps): the norm's gradient is finite at 0
        norm = (gradient.square().sum(1) + EPSILON).sqrt()
        return (norm - 1.0).square().mean()
