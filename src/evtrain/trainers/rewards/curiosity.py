"""The intrinsic curiosity module (Pathak et al. 2017): the reward is the error of a forward
model that predicts the next observation's encoding from this one's and the action, trained
together with an inverse model that predicts the action (ML-Agents' ``CuriosityRewardProvider``;
the base: :mod:`evtrain.trainers.rewards.reward_provider`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.trainers.networks.mlp import layer_init
from evtrain.trainers.rewards.reward_provider import RewardProvider, SiLUBody
from evtrain.trainers.settings import CuriositySettings, provider_hidden_layers

CURIOSITY_FORWARD_WEIGHT = 0.2
"""Weight of the forward loss against the inverse loss (beta in Pathak et al.; ML-Agents')."""
CURIOSITY_LOSS_SCALE = 10.0
"""Factor of the combined curiosity loss (ML-Agents' ``loss_multiplier``)."""
MODEL_WIDTH = 256
"""Hidden width of the curiosity model's inverse and forward models (ML-Agents')."""


class CuriosityModel(nn.Module):
    """ICM: an encoder ``phi``, an inverse model ``a ~ g(phi(s), phi(s'))`` and a forward model
    ``phi(s') ~ f(phi(s), a)``."""

    def __init__(
        self,
        obs_dim: int,
        action_space: spaces.Space[Any],
        hidden: list[int],
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        encoding_size = hidden[-1]
        if isinstance(action_space, spaces.Discrete):
            self.discrete = True
            self.action_dim = int(action_space.n)
        elif isinstance(action_space, spaces.Box):
            self.discrete = False
            self.action_dim = int(np.prod(action_space.shape))
        else:
            raise SpaceMismatchError(
                f"curiosity supports Discrete and Box action spaces, got "
                f"{type(action_space).__name__}"
            )
        self.encoder = SiLUBody([obs_dim, *hidden], generator)
        self.inverse_body = SiLUBody([2 * encoding_size, MODEL_WIDTH], generator)
        self.inverse_out = layer_init(nn.Linear(MODEL_WIDTH, self.action_dim), 1.0, generator)
        self.forward_body = SiLUBody([encoding_size + self.action_dim, MODEL_WIDTH], generator)
        self.forward_out = layer_init(nn.Linear(MODEL_WIDTH, encoding_size), 1.0, generator)

    def _action_features(self, actions: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return F.one_hot(actions.long(), self.action_dim).to(torch.float32)
        return actions.reshape(actions.shape[0], -1)

    def forward_error(
        self, phi: torch.Tensor, actions: torch.Tensor, phi_next: torch.Tensor
    ) -> torch.Tensor:
        """``0.5 * ||phi(s') - f(phi(s), a)||^2`` per transition (ML-Agents' reward)."""
        predicted = self.forward_out(
            self.forward_body(torch.cat([phi, self._action_features(actions)], dim=1))
        )
        error: torch.Tensor = 0.5 * (phi_next - predicted).square().sum(1)
        return error

    def inverse_loss(
        self, phi: torch.Tensor, actions: torch.Tensor, phi_next: torch.Tensor
    ) -> torch.Tensor:
        """Cross-entropy of the taken discrete actions, or the mean squared error summed over
        the dimensions of continuous ones."""
        out = self.inverse_out(self.inverse_body(torch.cat([phi, phi_next], dim=1)))
        loss: torch.Tensor
        if self.discrete:
            loss = F.cross_entropy(out, actions.long())
        else:
            loss = (self._action_features(actions) - out).square().sum(1).mean()
        return loss


class CuriosityRewardProvider(RewardProvider):
    """ICM's reward: the forward model's error, 0 until the model has been trained once and at
    most 1 after ``strength`` (ML-Agents' ``min(reward, 1 / strength)``)."""

    stat_name = "Curiosity"

    def __init__(
        self,
        settings: CuriositySettings,
        obs_dim: int,
        action_space: spaces.Space[Any],
        generator: torch.Generator,
        device: torch.device,
    ) -> None:
        hidden = provider_hidden_layers(settings)
        model = CuriosityModel(obs_dim, action_space, hidden, generator)
        super().__init__(settings, model, model, device)
        self.curiosity = model

    @torch.no_grad()
    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> npt.NDArray[np.float32]:
        if int(self.optimizer.step_count) == 0:  # an untrained forward model's error is noise
            return np.zeros(obs.shape[0], dtype=np.float32)
        reward = super().evaluate(obs, actions, next_obs)
        np.minimum(reward, np.float32(1.0), out=reward)
        return reward

    def _reward(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        model = self.curiosity
        return model.forward_error(model.encoder(obs), actions, model.encoder(next_obs))

    def _loss(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model = self.curiosity
        phi, phi_next = model.encoder(obs), model.encoder(next_obs)
        forward_loss = model.forward_error(phi, actions, phi_next).mean()
        inverse_loss = model.inverse_loss(phi, actions, phi_next)
        beta = CURIOSITY_FORWARD_WEIGHT
        loss = CURIOSITY_LOSS_SCALE * (beta * forward_loss + (1.0 - beta) * inverse_loss)
        return loss, {
            "Losses/Curiosity Forward Loss": forward_loss.detach(),
            "Losses/Curiosity Inverse Loss": inverse_loss.detach(),
        }
