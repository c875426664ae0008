"""MAPPO (Yu et al. 2022; ML-Agents' ``trainer_type: mappo``) on a vector environment of agent
slots: PPO whose critic sees the group.

Each agent acts on its own observation with the behavior's one policy; the critic
(:mod:`~evtrain.trainers.mappo.critic`) values each agent from the whole group's observations.
An agent's reward is its own plus the group reward (ML-Agents' MAPPO: groupmates' rewards are
not added, so roles may be rewarded differently).  GAE runs over each slot's trajectory with
the agent's centralised value, cut only where the copy's episode ends: an agent that left
early keeps the group rewards that follow (and its value there is learnt too).  The update
(:class:`~evtrain.trainers.loops.group_update.GroupPPO`, which :class:`MAPPO` has): PPO's
clipped objective on the steps an agent acted in, and the trust-region value loss over every
slot step.  :class:`MAPPOTrainer` is the on-policy loop (in its group mode) with
:class:`MAPPO`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from evtrain.trainers.algorithm import AlgorithmSpec, OnPolicyBatch
from evtrain.trainers.group_algorithm import GroupOnPolicyAlgorithm, GroupRollout
from evtrain.trainers.group_settings import MAPPOSettings
from evtrain.trainers.loops.group_rollout import chunked, lambda_returns
from evtrain.trainers.loops.group_update import GroupPPO, clipped_value_loss
from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.mappo.critic import MAPPOCritic
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.rewards.reward_provider import RewardProvider


class MAPPO:
    """MAPPO as a group on-policy algorithm
    (:class:`~evtrain.trainers.group_algorithm.GroupOnPolicyAlgorithm`)."""

    def __init__(self, spec: AlgorithmSpec) -> None:
        self.spec = spec
        self.layout = behavior_layout(
            spec.observation_space,
            spec.settings.network_settings,
            spec.behavior_name,
            spec.action_space,
        )
        self.ppo = GroupPPO(spec, self._build_critic, self._critic_loss)
        """The policy, the optimizer and the update (this critic's loss in it)."""
        self.agent = self.ppo.agent
        self.reward_providers: dict[str, RewardProvider] = {}

    def _build_critic(self) -> MAPPOCritic:
        spec = self.spec
        self.critic = MAPPOCritic(
            self.layout, spec.settings.network_settings, spec.group_size, spec.init_generator
        )
        return self.critic

    @torch.no_grad()
    def batch(self, rollout: GroupRollout) -> tuple[OnPolicyBatch, dict[str, float]]:
        """``V_i`` of every slot step from its group's observations; GAE of each slot's
        trajectory with its own reward and the group's."""
        spec = self.spec
        T, C = rollout.group_rewards.shape
        G = spec.group_size
        # -- value every group step, the groups after the rollout, truncated copies' finals
        values = chunked(
            self.critic,
            torch.cat([rollout.obs, rollout.next_obs, rollout.final_obs]),
            torch.cat([rollout.active, rollout.next_present, rollout.final_present]),
        )
        b_values = values[: T * C].reshape(T, C * G)
        bootstrap = np.zeros((T, C, G), dtype=np.float32)
        bootstrap[rollout.final_steps, rollout.final_copies] = values[(T + 1) * C :].cpu().numpy()
        next_value = values[T * C : (T + 1) * C].reshape(C * G)
        # -- an agent's reward: its own (scaled by strength already) and the group's
        strength = spec.settings.reward_signals.extrinsic.strength
        rewards = rollout.rewards + np.repeat(strength * rollout.group_rewards, G, axis=1)
        advantages, returns = lambda_returns(
            rewards,
            b_values.cpu().numpy(),
            np.repeat(rollout.episode_over, G, axis=1),
            bootstrap.reshape(T, C * G),
            next_value.cpu().numpy(),
            gamma=spec.settings.reward_signals.extrinsic.gamma,
            lambd=self.ppo.hp.lambd,
            time_horizon=spec.settings.time_horizon,
        )
        device = spec.device
        batch = OnPolicyBatch(
            obs=rollout.obs,
            actions=rollout.actions,
            logprobs=rollout.logprobs,
            advantages=torch.from_numpy(advantages).to(device).reshape(-1, G),
            active=rollout.active,
            returns=torch.from_numpy(returns).to(device).reshape(-1, G),
            values=b_values.reshape(-1, G),
            step=rollout.step,
        )
        return batch, {"Policy/Extrinsic Value Estimate": float(b_values.mean())}

    def _critic_loss(
        self, mb: OnPolicyBatch, clip_coef: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The trust-region value loss over every slot step of the minibatch (an agent gone
        from the episode still has a value: the group rewards it will share)."""
        assert mb.active is not None and mb.values is not None  # the group loop's batches
        value_loss = clipped_value_loss(
            self.critic(mb.obs, mb.active), mb.values, mb.returns, clip_coef
        )
        return value_loss, {"Losses/Value Loss": value_loss}

    # -- the rest is the shared group update's ---------------------------------------------------

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        return self.ppo.update(batch)

    def policy_module(self) -> nn.Module:
        return self.ppo.policy_module()

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        return self.ppo.sampling_policy_module(generator)

    def state_dict(self) -> dict[str, Any]:
        return self.ppo.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ppo.load_state_dict(state)

    def load_weights(self, state: dict[str, Any]) -> None:
        self.ppo.load_weights(state)


class MAPPOTrainer(OnPolicyTrainer):
    """MAPPO for ``Discrete`` and ``Box`` actions (see the module's docstring)."""

    settings_type = MAPPOSettings
    algorithm_type: ClassVar[type[GroupOnPolicyAlgorithm]] = MAPPO
    grouped = True
    algorithm: MAPPO
