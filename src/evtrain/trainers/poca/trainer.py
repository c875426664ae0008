"""MA-POCA (Cohen et al. 2021; ML-Agents' ``trainer_type: poca``) on a vector environment of agent
slots.

Each agent acts on its own observation with the behavior's one policy.  After a rollout the
centralised critic (:mod:`~evtrain.trainers.poca.critic`) values every group step ``V(s_t)``
and gives each acting agent its counterfactual baseline ``b_i(s_t, a_-i)``.  The group's reward
at a step is what ML-Agents' POCA gives each of its agents: the sum of the agents' own rewards
and the group reward (``infos["group_reward"]``).  Lambda-returns ``G_t`` run over the group's
trajectory, cut only where the copy's episode ends, so an agent that left early still gets
credit for what the group earned after it left; agent ``i``'s advantage is ``G_t - b_i``.
The update (:class:`~evtrain.trainers.loops.group_update.GroupPPO`, which :class:`POCA` has):
PPO's clipped objective per agent on the steps it acted in, and ML-Agents' critic loss
``value + 0.5 * baseline``, both trust-region losses towards ``G_t``.  :class:`POCATrainer` is
the on-policy loop (in its group mode) with :class:`POCA`.

Stats beside the usual ones: ``Environment/Group Cumulative Reward``,
``Policy/Extrinsic Value Estimate``, ``Policy/Extrinsic Baseline Estimate``,
``Losses/Baseline Loss`` (ML-Agents' names).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from evtrain.trainers.algorithm import AlgorithmSpec, OnPolicyBatch
from evtrain.trainers.group_algorithm import GroupOnPolicyAlgorithm, GroupRollout
from evtrain.trainers.group_settings import POCASettings
from evtrain.trainers.loops.group_rollout import chunked, lambda_returns
from evtrain.trainers.loops.group_update import GroupPPO, clipped_value_loss, masked_mean
from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.poca.critic import POCACritic
from evtrain.trainers.rewards.reward_provider import RewardProvider

BASELINE_WEIGHT = 0.5
"""The baseline loss's weight beside the value loss (ML-Agents')."""


class POCA:
    """MA-POCA as a group on-policy algorithm
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
        self.b_values = torch.zeros(0)
        """``(T, C)`` the last rollout's values of its group steps."""
        self.group_bootstrap = np.zeros((0, 0), dtype=np.float32)
        """``(T, C)`` the last rollout's values of truncated copies' final groups."""

    def _build_critic(self) -> POCACritic:
        spec = self.spec
        self.critic = POCACritic(
            self.layout,
            spec.action_space,
            spec.settings.network_settings,
            spec.group_size,
            spec.init_generator,
        )
        return self.critic

    @torch.no_grad()
    def batch(self, rollout: GroupRollout) -> tuple[OnPolicyBatch, dict[str, float]]:
        """``V`` of every group step and each acting agent's baseline; lambda-returns of the
        groups' trajectories; each agent's advantage over its baseline."""
        spec = self.spec
        T, C = rollout.group_rewards.shape
        G = spec.group_size
        # -- value and baselines of every group step (one pass, as the update's), the value
        # of the groups after the rollout and of truncated copies' finals
        judged = chunked(self._judged, rollout.obs, rollout.actions, rollout.active)
        b_values = judged[:, 0].view(T, C)
        b_baselines = judged[:, 1:].view(T, C, G)
        ends = chunked(
            self.critic.value,
            torch.cat([rollout.next_obs, rollout.final_obs]),
            torch.cat([rollout.next_present, rollout.final_present]),
        )
        next_value = ends[:C]
        group_bootstrap = np.zeros((T, C), dtype=np.float32)
        group_bootstrap[rollout.final_steps, rollout.final_copies] = ends[C:].cpu().numpy()
        self.b_values, self.group_bootstrap = b_values, group_bootstrap  # kept for inspection
        # -- the group's reward: its agents' own (scaled by strength already) and the group's
        strength = spec.settings.reward_signals.extrinsic.strength
        rewards = rollout.rewards.reshape(T, C, G).sum(-1) + strength * rollout.group_rewards
        _, returns = lambda_returns(
            rewards,
            b_values.cpu().numpy(),
            rollout.episode_over,
            group_bootstrap,
            next_value.cpu().numpy(),
            gamma=spec.settings.reward_signals.extrinsic.gamma,
            lambd=self.ppo.hp.lambd,
            time_horizon=spec.settings.time_horizon,
        )
        b_returns = torch.from_numpy(returns).to(spec.device)
        advantages = b_returns[..., None] - b_baselines
        batch = OnPolicyBatch(
            obs=rollout.obs,
            actions=rollout.actions,
            logprobs=rollout.logprobs,
            advantages=advantages.reshape(T * C, G),
            active=rollout.active,
            returns=b_returns.reshape(T * C, 1),
            values=b_values.reshape(T * C, 1),
            extras={"baselines": b_baselines.reshape(T * C, G)},
            step=rollout.step,
        )
        active = rollout.active.view_as(b_baselines)
        estimates = {
            "Policy/Extrinsic Value Estimate": float(b_values.mean()),
            "Policy/Extrinsic Baseline Estimate": float(masked_mean(b_baselines, active)),
        }
        return batch, estimates

    def _judged(
        self, x: torch.Tensor, actions: torch.Tensor, present: torch.Tensor
    ) -> torch.Tensor:
        """``(B, 1 + G)``: each group's ``V``, then its agents' baselines."""
        value, baselines = self.critic.evaluate(x, actions, present)
        return torch.cat([value[:, None], baselines], 1)

    def _critic_loss(
        self, mb: OnPolicyBatch, clip_coef: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """ML-Agents' ``value_loss + 0.5 * baseline_loss``: the group's value over every group
        step, the baselines over the agents that acted, both towards the group's return."""
        assert mb.active is not None and mb.values is not None  # the group loop's batches
        value, baselines = self.critic.evaluate(mb.obs, mb.actions, mb.active)
        returns = mb.returns[:, 0]
        value_loss = clipped_value_loss(value, mb.values[:, 0], returns, clip_coef)
        baseline_loss = clipped_value_loss(
            baselines,
            mb.extras["baselines"],
            returns[:, None].expand_as(baselines),
            clip_coef,
            mb.active,
        )
        loss = value_loss + BASELINE_WEIGHT * baseline_loss
        return loss, {"Losses/Value Loss": value_loss, "Losses/Baseline Loss": baseline_loss}

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


class POCATrainer(OnPolicyTrainer):
    """MA-POCA for ``Discrete`` and ``Box`` actions (see the module's docstring)."""

    settings_type = POCASettings
    algorithm_type: ClassVar[type[GroupOnPolicyAlgorithm]] = POCA
    grouped = True
    algorithm: POCA
