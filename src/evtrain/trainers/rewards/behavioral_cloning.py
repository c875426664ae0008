"""Behavioral cloning beside reinforcement learning (ML-Agents' ``behavioral_cloning``).

Once per trainer update (PPO: after each policy update; SAC: once per ``time_horizon`` steps
of every environment, as ML-Agents updates once per trajectory), the policy takes gradient
steps towards the demonstrations' actions with an Adam of its own:

- loss: the cross-entropy of the demonstrated action for ``Discrete`` actions; for ``Box``
  actions the mean squared error between an action *sampled* from the policy (through the
  reparameterisation, so both the mean and the spread learn) and the demonstrated one;
- learning rate: the trainer's ``learning_rate`` times ``strength``, decaying linearly to 0
  over ``steps`` environment steps when ``steps`` > 0; once it is 0 the cloning stops and
  reports a loss of 0, as ML-Agents does;
- per update ``num_epoch`` (default 3) passes, each over the demonstrations shuffled, in
  minibatches of ``batch_size`` (default: the trainer's), at most ``samples_per_update``
  samples (0: all).

Only the policy's parameters get gradients (the value networks are in the same flat buffer
for PPO, and their gradient is 0, so Adam leaves them where they are).  Gradients are
averaged over ranks in a distributed run.  Reported as ``Losses/Pretraining Loss``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.base import linear_decay
from evtrain.trainers.networks.mlp import zero_grad_
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.optim import LEARNING_RATE_FLOOR, make_adam
from evtrain.trainers.settings import BehavioralCloningSettings
from evtrain.world import World

DEFAULT_NUM_EPOCH = 3
"""Passes over the demonstrations per update when ``num_epoch`` is not set (ML-Agents')."""
LOSS_STAT = "Losses/Pretraining Loss"
"""ML-Agents' name for the cloning loss."""

PolicyOutput = Callable[[torch.Tensor], torch.Tensor]
"""Normalised observations to the policy's logits (``Discrete``) or a sampled action
(``Box``), differentiable."""


def actor_critic_output(agent: ActorCritic, generator: torch.Generator) -> PolicyOutput:
    """PPO's policy output for cloning: the logits (masked, with an action mask), or
    ``mean + std * noise``."""

    def output(x: torch.Tensor) -> torch.Tensor:
        out = agent.policy_output(x)
        if agent.discrete:
            return out
        noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
        return out + agent.log_std.exp() * noise

    return output


class BehavioralCloning:
    """The cloning of one trainer's policy.

    :param expert_obs: the demonstrations' observations, flattened, raw (on the device).
    :param expert_actions: their actions as the policy outputs them: indices for
        ``Discrete``, actions in the policy's own units for ``Box`` (on the device).
    :param params: the flat parameter buffer holding the policy's parameters.
    :param policy: the policy's differentiable output (see :data:`PolicyOutput`).
    :param normalize: the policy's observation normaliser.
    :param learning_rate: the trainer's initial learning rate.
    :param batch_size: the trainer's ``batch_size`` (the default of the cloning's).
    :param discrete: ``Discrete`` actions (cross-entropy) or ``Box`` (squared error).
    :param generator: shuffles the demonstrations (the trainer's, on the device).
    """

    def __init__(
        self,
        settings: BehavioralCloningSettings,
        *,
        expert_obs: torch.Tensor,
        expert_actions: torch.Tensor,
        params: nn.Parameter,
        policy: PolicyOutput,
        normalize: Callable[[torch.Tensor], torch.Tensor],
        learning_rate: float,
        batch_size: int,
        discrete: bool,
        generator: torch.Generator,
        world: World,
    ) -> None:
        self.settings = settings
        self.expert_obs = expert_obs
        self.expert_actions = expert_actions.long() if discrete else expert_actions
        self.params = params
        self.policy = policy
        self.normalize = normalize
        self.discrete = discrete
        self.generator = generator
        self.world = world
        self.initial_lr = learning_rate * settings.strength
        self.optimizer = make_adam(params, self.initial_lr)
        count = expert_obs.shape[0]
        self.batch_size = max(1, min(settings.batch_size or batch_size, count))
        """Demonstration steps per gradient step (no more than there are)."""
        self.num_epoch = settings.num_epoch or DEFAULT_NUM_EPOCH
        batches = count // self.batch_size
        limit = settings.samples_per_update // self.batch_size
        self.num_batches = batches if limit == 0 else min(batches, limit)
        """Gradient steps per epoch (ML-Agents' rule: ``samples_per_update`` 0 is no limit)."""

    def learning_rate(self, step: int) -> float:
        """The cloning's learning rate at environment step ``step``."""
        if self.settings.steps == 0:
            return self.initial_lr
        return linear_decay(self.initial_lr, LEARNING_RATE_FLOOR, step, self.settings.steps)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The cloning loss of raw demonstration observations and their actions."""
        out = self.policy(self.normalize(obs))
        if self.discrete:
            return F.cross_entropy(out, actions)
        return F.mse_loss(out, actions)

    def update(self, step: int) -> dict[str, float]:
        """One update at environment step ``step``; the mean loss under ML-Agents' name."""
        if self.initial_lr == 0.0 or 0 < self.settings.steps <= step:
            return {LOSS_STAT: 0.0}  # the rate has decayed to nothing: cloning is over
        self.optimizer.lr = self.learning_rate(step)
        count = self.expert_obs.shape[0]
        losses = []
        for _ in range(self.num_epoch):
            perm = torch.randperm(count, generator=self.generator, device=self.expert_obs.device)
            for i in range(self.num_batches):
                index = perm[i * self.batch_size : (i + 1) * self.batch_size]
                loss = self.loss(self.expert_obs[index], self.expert_actions[index])
                zero_grad_(self.params)
                torch.autograd.backward(loss)
                self.world.average_(self.params.grad)
                self.optimizer.step()
                losses.append(loss.detach())
        return {LOSS_STAT: float(torch.stack(losses).mean())}

    def state_dict(self) -> dict[str, Any]:
        """The cloning's optimizer, for a checkpoint."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
