"""A trainer plugin written on evtrain's on-policy loop: advantage actor-critic (A2C, the
synchronous variant of Mnih et al. 2016's A3C), ``trainer_type: a2c``.

What it shows: a new algorithm reuses :class:`~evtrain.trainers.loops.on_policy.OnPolicyTrainer`
(rollout, time-limit bootstrapping, GAE, the flattened batch) and writes only what makes it
A2C: its settings class, its networks in ``_setup``, and one gradient step per rollout in
``advance``.  The built-in PPO is the same loop with its own update
(:mod:`evtrain.trainers.ppo.update`).  One process only: it averages no gradients over ranks.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy
from evtrain.trainers.observations import behavior_layout


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


class A2CTrainer(OnPolicyTrainer):
    """A2C for ``Discrete`` and ``Box`` actions (no memory, no intrinsic reward providers)."""

    settings_type = A2CSettings
    hp: A2CSettings

    def _setup(self) -> None:
        hp: A2CSettings = self.settings.hyperparameters  # type: ignore[assignment]  # base checks
        space = self.envs.single_observation_space
        self.hp = hp
        self.num_steps = max(1, hp.buffer_size // self.num_envs)
        self.action_space = self.envs.single_action_space
        self.layout = behavior_layout(space, self.settings.network_settings, self.behavior_name)
        self.agent = ActorCritic(
            space, self.action_space, self.settings.network_settings, self.init_generator
        ).to(self.device)
        self.memory = None
        self.signals = {}
        self.provider_rewards = []
        self._provider_returns = np.zeros((0, self.num_envs))
        self._acting = None
        self.optimizer = torch.optim.RMSprop(self.agent.parameters(), lr=hp.learning_rate)
        self._allocate_rollout()

    def advance(self) -> None:
        """One rollout (the loop's), then one gradient step on all of it."""
        next_value = self._collect_rollout()
        self._sync_step()
        advantages, returns = self._advantages(next_value)
        obs, actions, _, advantages, returns = self._batch(advantages, returns)
        agent = self.agent
        assert isinstance(agent, ActorCritic)
        logprob, entropy, value = agent.evaluate(obs, actions)
        assert entropy is not None
        # -- the policy gradient, the critic's regression, the entropy bonus
        policy_loss = -(logprob * advantages).mean()
        value_loss = F.mse_loss(value, returns)
        loss = policy_loss + self.hp.vf_coef * value_loss - self.hp.ent_coef * entropy.mean()
        self.optimizer.zero_grad()
        torch.autograd.backward(loss)
        nn.utils.clip_grad_norm_(agent.parameters(), self.hp.max_grad_norm)
        self.optimizer.step()
        self.reporter.add_stat("Losses/Policy Loss", float(policy_loss.detach()))
        self.reporter.add_stat("Losses/Value Loss", float(value_loss.detach()))
        self.reporter.add_stat("Policy/Entropy", float(entropy.detach().mean()))
        self._end_period()

    def policy_module(self) -> nn.Module:
        assert isinstance(self.agent, ActorCritic)
        return DeterministicPolicy(self.agent, self.action_space).eval()

    def _state_dict(self) -> dict[str, Any]:
        return {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()}

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_weights(state)
        self.optimizer.load_state_dict(state["optimizer"])
