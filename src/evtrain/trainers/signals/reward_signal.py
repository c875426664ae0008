"""Intrinsic reward signals: curiosity (ICM) and random network distillation (GAIL, built on
the same base, is in :mod:`evtrain.trainers.signals.gail`).

Each signal is a model with its own Adam, as in ML-Agents' reward providers:
:meth:`RewardSignal.evaluate` gives the reward of a rollout's transitions (``strength`` applied),
:meth:`RewardSignal.update` takes one gradient step on a minibatch and returns the losses under
ML-Agents' stat names.  PPO evaluates a rollout once it is collected and trains the signals on
the same minibatches as the policy; SAC evaluates them on its replay minibatches
(:mod:`evtrain.trainers.sac.signals`).  Both signals ignore episode ends (ML-Agents'
``_ignore_done``, :attr:`RewardSignal.episodic` false): a terminated episode is worth the
signal's value of its final observation, not 0, since novelty does not stop at a goal.

The models see the observations the policy sees (normalised when
``network_settings.normalize`` is on).  ML-Agents' ``LinearEncoder`` layers are linear + Swish
(SiLU); here they get orthogonal init like the rest of evtrain's networks.  Their widths come
from the signal's ``network_settings`` or ``encoding_size``
(:func:`~evtrain.trainers.settings.signal_hidden_layers`).
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.trainers.networks.mlp import flatten_parameters, hidden_layers, layer_init, zero_grad_
from evtrain.trainers.optim import make_adam
from evtrain.trainers.settings import (
    CuriositySettings,
    IntrinsicSettings,
    RNDSettings,
    signal_hidden_layers,
)
from evtrain.world import World

CURIOSITY_FORWARD_WEIGHT = 0.2
"""Weight of the forward loss against the inverse loss (beta in Pathak et al.; ML-Agents')."""
CURIOSITY_LOSS_SCALE = 10.0
"""Factor of the combined curiosity loss (ML-Agents' ``loss_multiplier``)."""
MODEL_WIDTH = 256
"""Hidden width of the curiosity model's inverse and forward models (ML-Agents')."""


class SiLUBody(nn.Module):
    """Linear layers of ``widths``, each followed by SiLU (ML-Agents' ``LinearEncoder``)."""

    def __init__(self, widths: list[int], generator: torch.Generator) -> None:
        super().__init__()
        self.layers = hidden_layers(widths, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.silu(layer(x))
        return x


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


class RewardSignal(nn.Module, abc.ABC):
    """An intrinsic reward signal: its model, trained parameters and Adam.

    :param trained: the part of ``model`` the optimizer trains.
    """

    stat_name: str
    """ML-Agents' ``name.capitalize()``: ``Policy/<stat_name> Reward`` and ``... Value
    Estimate``."""
    episodic: bool = False
    """Whether a terminated episode is worth 0 after its end, as for the extrinsic reward
    (ML-Agents' ``not ignore_done``); otherwise the signal's value of its final
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

    def signal_state_dict(self) -> dict[str, Any]:
        """The model and its optimizer, for a checkpoint."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}


class CuriositySignal(RewardSignal):
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
        hidden = signal_hidden_layers(settings)
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


class RNDSignal(RewardSignal):
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
        model = RNDModel(obs_dim, signal_hidden_layers(settings), generator)
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
