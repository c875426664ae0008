"""Random network distillation (Burda et al. 2018): the reward is the error of a trained
network that predicts a fixed random network's encoding of the next observation (ML-Agents'
``RNDRewardProvider``; the base: :mod:`evtrain.trainers.rewards.reward_provider`)."""

from __future__ import annotations

import torch
from torch import nn

from evtrain.trainers.rewards.reward_provider import RewardProvider, SiLUBody
from evtrain.trainers.settings import RNDSettings, provider_hidden_layers


class RNDModel(nn.Module):
    """A fixed random ``target`` network and the ``predictor`` trained to match it."""

    def __init__(self, obs_dim: int, hidden: list[int], generator: torch.Generator) -> None:
        super().__init__()
        widths = [obs_dim, *hidden]
        self.target = SiLUBody(widths, generator).requires_grad_(False)
        self.predictor = SiLUBody(widths, generator)

    def error(self, obs: torch.Tensor) -> torch.Tensor:
        """``||predictor(s) - target(s)||^2`` per observation."""
        with torch.no_grad():
            target = self.target(obs)
        error: torch.Tensor = (self.predictor(obs) - target).square().sum(1)
        return error


class RNDRewardProvider(RewardProvider):
    """RND's reward: the predictor's error on the observation an action was taken in (as
    ML-Agents evaluates it, on ``s`` rather than ``s'``)."""

    stat_name = "Rnd"

    def __init__(
        self,
        settings: RNDSettings,
        obs_dim: int,
        generator: torch.Generator,
        device: torch.device,
    ) -> None:
        model = RNDModel(obs_dim, provider_hidden_layers(settings), generator)
        super().__init__(settings, model, model.predictor, device)
        self.rnd = model

    def _reward(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        return self.rnd.error(obs)

    def _loss(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = self.rnd.error(obs).mean()
        return loss, {"Losses/RND Loss": loss.detach()}
