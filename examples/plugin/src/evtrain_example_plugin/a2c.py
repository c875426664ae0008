"""A trainer plugin written on evtrain's on-policy loop: advantage actor-critic (A2C, the
synchronous variant of Mnih et al. 2016's A3C), ``trainer_type: a2c``.

What it shows: a new on-policy algorithm is one class behind the public on-policy protocol
(:class:`~evtrain.trainers.algorithm.OnPolicyAlgorithm`).  The loop
(:class:`~evtrain.trainers.loops.on_policy.OnPolicyTrainer`) collects the rollout with the
algorithm's :attr:`A2C.agent`, bootstraps time limits, computes GAE and hands :meth:`A2C.update`
the frozen :class:`~evtrain.trainers.algorithm.OnPolicyBatch`; it reports the statistics the
update returns, runs the update thread and writes the checkpoints.  The algorithm owns its
networks and its optimizer, and takes one gradient step per rollout.  The built-in PPO is the
same loop with its own algorithm (:mod:`evtrain.trainers.ppo.algorithm`).  One process only: it
averages no gradients over ranks.  Only public names of evtrain are used (a test parses this
module to hold it to that).
"""

from __future__ import annotations

import math
from typing import Any, cast

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.algorithm import AlgorithmSpec, OnPolicyBatch
from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy
from evtrain.trainers.networks.sampled import SampledPolicy
from evtrain.trainers.rewards.reward_provider import RewardProvider


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name}: expected a number above 0, got {value}")


@attrs.define(kw_only=True)
class A2CSettings:
    """A2C's hyperparameters (Stable-Baselines3's defaults but ``buffer_size``)."""

    learning_rate: float = attrs.field(default=7e-4, validator=_positive)
    buffer_size: int = attrs.field(default=80, validator=_positive)
    """Steps per rollout, summed over the environments (SB3: ``n_steps`` x environments)."""
    lambd: float = attrs.field(default=1.0, validator=_positive)
    """GAE's lambda: 1 gives the n-step returns of the paper."""
    normalize_advantage: bool = False
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = attrs.field(default=0.5, validator=_positive)

    @property
    def batch_size(self) -> int:
        """One gradient step on the whole rollout."""
        return self.buffer_size

    def rollout_buffer_size(self, num_envs: int) -> int:
        """What the loop collects: ``buffer_size`` rounded up to a multiple of ``num_envs``."""
        return math.ceil(self.buffer_size / num_envs) * num_envs


class A2C:
    """The algorithm (an :class:`~evtrain.trainers.algorithm.OnPolicyAlgorithm`) for
    ``Discrete`` and ``Box`` actions (no memory, no intrinsic reward providers)."""

    def __init__(self, spec: AlgorithmSpec) -> None:
        self.hp = cast("A2CSettings", spec.settings.hyperparameters)
        self.action_space = spec.action_space
        self.agent = ActorCritic(
            spec.observation_space,
            spec.action_space,
            spec.settings.network_settings,
            spec.init_generator,
        ).to(spec.device)
        """The actor-critic the loop acts and values with."""
        self.reward_providers: dict[str, RewardProvider] = {}
        """None: the environment's reward only."""
        self.optimizer = torch.optim.RMSprop(self.agent.parameters(), lr=self.hp.learning_rate)

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        """One gradient step on the whole rollout."""
        b_advantages = batch.advantages
        if self.hp.normalize_advantage:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)
        logprob, entropy, value = self.agent.evaluate(batch.obs, batch.actions)
        assert entropy is not None
        # -- the policy gradient, the critic's regression, the entropy bonus
        pg_loss = -(logprob * b_advantages).mean()
        v_loss = F.mse_loss(value, batch.returns)
        loss = pg_loss + self.hp.vf_coef * v_loss - self.hp.ent_coef * entropy.mean()
        self.optimizer.zero_grad()
        torch.autograd.backward(loss)
        nn.utils.clip_grad_norm_(self.agent.parameters(), self.hp.max_grad_norm)
        self.optimizer.step()
        return {
            "Losses/Policy Loss": float(pg_loss.detach()),
            "Losses/Value Loss": float(v_loss.detach()),
            "Policy/Entropy": float(entropy.detach().mean()),
        }

    def policy_module(self) -> nn.Module:
        return DeterministicPolicy(self.agent, self.action_space).eval()

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        return SampledPolicy(self.agent, self.action_space, generator).eval()

    def state_dict(self) -> dict[str, Any]:
        return {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        self.optimizer.load_state_dict(state["optimizer"])


class A2CTrainer(OnPolicyTrainer):
    """``trainer_type: a2c``: evtrain's on-policy loop with :class:`A2C`."""

    settings_type = A2CSettings
    algorithm_type = A2C
    algorithm: A2C
