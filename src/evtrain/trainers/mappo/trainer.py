"""MAPPO (Yu et al. 2022; ML-Agents' ``trainer_type: mappo``) on a vector environment of agent
slots: PPO whose critic sees the group.

Each agent acts on its own observation with the behavior's one policy; the critic
(:mod:`~evtrain.trainers.mappo.critic`) values each agent from the whole group's observations.
An agent's reward is its own plus the group reward (ML-Agents' MAPPO: groupmates' rewards are
not added, so roles may be rewarded differently).  GAE runs over each slot's trajectory with
the agent's centralised value, cut only where the copy's episode ends: an agent that left
early keeps the group rewards that follow (and its value there is learnt too).  The update
(:mod:`~evtrain.trainers.loops.group_update`): PPO's clipped objective on the steps an agent
acted in, and the trust-region value loss over every slot step.
"""

from __future__ import annotations

import numpy as np
import torch

from evtrain.trainers.group_settings import MAPPOSettings
from evtrain.trainers.loops.group_update import GroupBatch, GroupOnPolicyTrainer, clipped_value_loss
from evtrain.trainers.loops.on_policy import Finals
from evtrain.trainers.mappo.critic import MAPPOCritic


class MAPPOTrainer(GroupOnPolicyTrainer):
    """MAPPO for ``Discrete`` and ``Box`` actions (see the module's docstring)."""

    settings_type = MAPPOSettings
    critic: MAPPOCritic

    def _build_critic(self) -> MAPPOCritic:
        return MAPPOCritic(
            self.layout, self.settings.network_settings, self.group_size, self.init_generator
        )

    @torch.no_grad()
    def _value_rollout(self, finals: list[Finals]) -> torch.Tensor:
        """``b_values`` and ``slot_bootstrap`` (``V_i`` of truncated copies' final groups), both
        ``(T, N)``; returns ``V_i`` of the groups after the rollout, ``(N,)``."""
        T, C, G = self.num_steps, self.num_groups, self.group_size
        next_x, alive = self._next_groups()
        steps, copies, final_x, final_present = self._final_groups(finals)
        values = self._chunked(
            self.critic,
            torch.cat([self._groups(self.b_obs), next_x, final_x]),
            torch.cat([self._active(), alive, final_present]),
        )
        self.b_values = values[: T * C].reshape(T, C * G)
        bootstrap = np.zeros((T, C, G), dtype=np.float32)
        bootstrap[steps, copies] = values[(T + 1) * C :].cpu().numpy()
        self.slot_bootstrap = bootstrap.reshape(T, C * G)
        return values[T * C : (T + 1) * C].reshape(C * G)

    def _targets(self, next_value: torch.Tensor) -> GroupBatch:
        """GAE of each slot's trajectory with its own reward and the group's."""
        G = self.group_size
        strength = self.settings.reward_signals.extrinsic.strength
        # the rollout's own rewards are scaled by strength already (the on-policy loop)
        rewards = self.rewards + np.repeat(strength * self.group_rewards, G, axis=1)
        advantages, returns = self._lambda_returns(
            rewards,
            self.b_values.cpu().numpy(),
            np.repeat(self.episode_over, G, axis=1),
            self.slot_bootstrap,
            next_value.cpu().numpy(),
        )
        return GroupBatch(
            obs=self._groups(self.b_obs),
            actions=self._groups(self.b_actions),
            logprobs=self._groups(self.b_logprobs),
            advantages=self._groups(torch.from_numpy(advantages).to(self.device)),
            active=self._active(),
            returns=self._groups(torch.from_numpy(returns).to(self.device)),
            values=self._groups(self.b_values),
        )

    def _critic_loss(
        self, mb: GroupBatch, clip_coef: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The trust-region value loss over every slot step of the minibatch (an agent gone
        from the episode still has a value: the group rewards it will share)."""
        value_loss = clipped_value_loss(
            self.critic(mb.obs, mb.active), mb.values, mb.returns, clip_coef
        )
        return value_loss, {"Losses/Value Loss": value_loss}

    def _report_estimates(self) -> None:
        self.reporter.add_stat("Policy/Extrinsic Value Estimate", float(self.b_values.mean()))
