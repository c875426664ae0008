"""The base of the intrinsic reward providers: curiosity (ICM, :mod:`.curiosity`), random
network distillation (:mod:`.rnd`) and GAIL (:mod:`.gail`).

Each provider is a model with its own Adam, as in ML-Agents' reward providers:
:meth:`RewardProvider.evaluate` gives the reward of a rollout's transitions (``strength`` applied),
:meth:`RewardProvider.update` takes one gradient step on a minibatch and returns the losses under
ML-Agents' stat names.  PPO evaluates a rollout once it is collected and trains the providers on
the same minibatches as the policy; SAC evaluates them on its replay minibatches
(:mod:`evtrain.trainers.sac.rewards`).  Both providers ignore episode ends (ML-Agents'
``_ignore_done``, :attr:`RewardProvider.episodic` false): a terminated episode is worth the
provider's value of its final observation, not 0, since novelty does not stop at a goal.

The models see the observations the policy sees (normalised when
``network_settings.normalize`` is on).  ML-Agents' ``LinearEncoder`` layers are linear + Swish
(SiLU); here they get orthogonal init like the rest of evtrain's networks.  Their widths come
from the provider's ``network_settings`` or ``encoding_size``
(:func:`~evtrain.trainers.settings.provider_hidden_layers`).
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.networks.mlp import flatten_parameters, hidden_layers, zero_grad_
from evtrain.trainers.optim import make_adam
from evtrain.trainers.settings import IntrinsicSettings
from evtrain.world import World


class SiLUBody(nn.Module):
    """Linear layers of ``widths``, each followed by SiLU (ML-Agents' ``LinearEncoder``)."""

    def __init__(self, widths: list[int], generator: torch.Generator) -> None:
        super().__init__()
        self.layers = hidden_layers(widths, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.silu(layer(x))
        return x


class RewardProvider(nn.Module, abc.ABC):
    """An intrinsic reward provider: its model, trained parameters and Adam.

    :param trained: the part of ``model`` the optimizer trains.
    """

    stat_name: str
    """ML-Agents' ``name.capitalize()``: ``Policy/<stat_name> Reward`` and ``... Value
    Estimate``."""
    episodic: bool = False
    """Whether a terminated episode is worth 0 after its end, as for the extrinsic reward
    (ML-Agents' ``not ignore_done``); otherwise the provider's value of its final
    observation."""

    def __init__(
        self,
        settings: IntrinsicSettings,
        model: nn.Module,
        trained: nn.Module,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.gamma = settings.gamma
        self.strength = settings.strength
        self.model = model.to(device)
        self.flat_params = flatten_parameters(trained)
        self.optimizer = make_adam(self.flat_params, settings.learning_rate)

    @torch.no_grad()
    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> npt.NDArray[np.float32]:
        """``strength`` times the reward of each transition ``(s, a, s')``."""
        reward: npt.NDArray[np.float32] = self._reward(obs, actions, next_obs).cpu().numpy()
        reward *= np.float32(self.strength)
        return reward

    def update(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, world: World
    ) -> dict[str, torch.Tensor]:
        """One Adam step on a minibatch (gradients averaged over ranks); the losses, detached,
        by stat key."""
        loss, stats = self._loss(obs, actions, next_obs)
        zero_grad_(self.flat_params)
        torch.autograd.backward(loss)
        world.average_(self.flat_params.grad)
        self.optimizer.step()
        return stats

    @abc.abstractmethod
    def _reward(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor: ...

    @abc.abstractmethod
    def _loss(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...

    def provider_state_dict(self) -> dict[str, Any]:
        """The model and its optimizer, for a checkpoint."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
