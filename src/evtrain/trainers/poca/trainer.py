"""MA-POCA (Cohen et al. 2021; ML-Agents' ``trainer_type: poca``) on a vector environment of agent
slots.

Each agent acts on its own observation with the behavior's one policy.  After a rollout the
centralised critic (:mod:`~evtrain.trainers.poca.critic`) values every group step ``V(s_t)``
and gives each acting agent its counterfactual baseline ``b_i(s_t, a_-i)``.  The group's reward
at a step is what ML-Agents' POCA gives each of its agents: the sum of the agents' own rewards
and the group reward (``infos["group_reward"]``).  Lambda-returns ``G_t`` run over the group's
trajectory, cut only where the copy's episode ends, so an agent that left early still gets
credit for what the group earned after it left; agent ``i``'s advantage is ``G_t - b_i``.
The update (:mod:`~evtrain.trainers.loops.group_update`): PPO's clipped objective per agent
on the steps it acted in, and ML-Agents' critic loss ``value + 0.5 * baseline``, both
trust-region losses towards ``G_t``.

Stats beside the usual ones: ``Environment/Group Cumulative Reward``,
``Policy/Extrinsic Value Estimate``, ``Policy/Extrinsic Baseline Estimate``,
``Losses/Baseline Loss`` (ML-Agents' names).
"""

from __future__ import annotations

import numpy as np
import torch

from evtrain.trainers.group_settings import POCASettings
from evtrain.trainers.loops.group_update import (
    GroupBatch,
    GroupOnPolicyTrainer,
    clipped_value_loss,
    masked_mean,
)
from evtrain.trainers.loops.on_policy import Finals
from evtrain.trainers.poca.critic import POCACritic

BASELINE_WEIGHT = 0.5
"""The baseline loss's weight beside the value loss (ML-Agents')."""


class POCATrainer(GroupOnPolicyTrainer):
    """MA-POCA for ``Discrete`` and ``Box`` actions (see the module's docstring)."""

    settings_type = POCASettings
    critic: POCACritic

    def _build_critic(self) -> POCACritic:
        return POCACritic(
            self.layout,
            self.action_space,
            self.settings.network_settings,
            self.group_size,
            self.init_generator,
        )

    @torch.no_grad()
    def _value_rollout(self, finals: list[Finals]) -> torch.Tensor:
        """``b_values`` ``(T, C)``, ``b_baselines`` ``(T, C, G)`` and ``group_bootstrap`` (``V``
        of truncated copies' final groups); returns ``V`` of the groups after the rollout."""
        T, C, G = self.num_steps, self.num_groups, self.group_size
        obs = self._groups(self.b_obs)
        active = self._active()
        next_x, alive = self._next_groups()
        steps, copies, final_x, final_present = self._final_groups(finals)
        values = self._chunked(
            self.critic.value,
            torch.cat([obs, next_x, final_x]),
            torch.cat([active, alive, final_present]),
        )
        self.b_values = values[: T * C].view(T, C)
        self.group_bootstrap = np.zeros((T, C), dtype=np.float32)
        self.group_bootstrap[steps, copies] = values[(T + 1) * C :].cpu().numpy()
        baselines = self._chunked(self.critic.baseline, obs, self._groups(self.b_actions), active)
        self.b_baselines = baselines.view(T, C, G)
        return values[T * C : (T + 1) * C]

    def _targets(self, next_value: torch.Tensor) -> GroupBatch:
        """Lambda-returns of the groups' trajectories; each agent's advantage over its
        baseline."""
        T, C, G = self.num_steps, self.num_groups, self.group_size
        strength = self.settings.reward_signals.extrinsic.strength
        # the rollout's own rewards are scaled by strength already (the on-policy loop)
        rewards = self.rewards.reshape(T, C, G).sum(-1) + strength * self.group_rewards
        _, returns = self._lambda_returns(
            rewards,
            self.b_values.cpu().numpy(),
            self.episode_over,
            self.group_bootstrap,
            next_value.cpu().numpy(),
        )
        b_returns = torch.from_numpy(returns).to(self.device)
        advantages = b_returns[..., None] - self.b_baselines
        return GroupBatch(
            obs=self._groups(self.b_obs),
            actions=self._groups(self.b_actions),
            logprobs=self._groups(self.b_logprobs),
            advantages=advantages.reshape(T * C, G),
            active=self._active(),
            returns=b_returns.reshape(T * C, 1),
            values=self.b_values.reshape(T * C, 1),
            baselines=self.b_baselines.reshape(T * C, G),
        )

    def _critic_loss(
        self, mb: GroupBatch, clip_coef: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """ML-Agents' ``value_loss + 0.5 * baseline_loss``: the group's value over every group
        step, the baselines over the agents that acted, both towards the group's return."""
        assert mb.baselines is not None  # POCA's batches carry them
        value, baselines = self.critic.evaluate(mb.obs, mb.actions, mb.active)
        returns = mb.returns[:, 0]
        value_loss = clipped_value_loss(value, mb.values[:, 0], returns, clip_coef)
        baseline_loss = clipped_value_loss(
            baselines, mb.baselines, returns[:, None].expand_as(baselines), clip_coef, mb.active
        )
        loss = value_loss + BASELINE_WEIGHT * baseline_loss
        return loss, {"Losses/Value Loss": value_loss, "Losses/Baseline Loss": baseline_loss}

    def _report_estimates(self) -> None:
        report = self.reporter.add_stat
        report("Policy/Extrinsic Value Estimate", float(self.b_values.mean()))
        active = torch.from_numpy(self.valid).to(self.device).view_as(self.b_baselines)
        report("Policy/Extrinsic Baseline Estimate", float(masked_mean(self.b_baselines, active)))
