"""SAC's update (Haarnoja et al. 2018), top to bottom, on one minibatch the off-policy loop
sampled from its replay buffer: the critics step towards the soft Bellman target ``r + gamma
(1 - d) (min Q'(s', a') - alpha log pi(a'|s'))`` (clipped double-Q); the actor steps to
minimise ``alpha log pi(a|s) - min Q(s, a)`` with ``a ~ pi`` reparameterised; ``log alpha``
moves so the entropy approaches ``target_entropy``; the target critics follow by Polyak
averaging with ``tau``.  Discrete actions take the same steps with expectations over every
action (:mod:`evtrain.trainers.sac.discrete`); recurrent networks on sequences
(:mod:`evtrain.trainers.sac.recurrent_update`).  Replay, warm-up and the updates-to-data
ratio are the off-policy loop's (:mod:`evtrain.trainers.loops.off_policy`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from evtrain.trainers.algorithm import ReplayBatch
from evtrain.trainers.finite import FiniteGuard
from evtrain.trainers.networks.mlp import clip_grad_norm_, zero_grad_
from evtrain.trainers.sac.actor import SquashedGaussianActor
from evtrain.trainers.sac.discrete import (
    DISCRETE_UPDATE_STATS,
    CategoricalActor,
    actor_loss,
    critic_losses,
)
from evtrain.trainers.sac.networks import SACNetworks
from evtrain.trainers.sac.twin_q import TwinQ
from evtrain.trainers.settings import SACSettings
from evtrain.world import World

UPDATE_STATS = (
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Losses/Policy Loss",
    "Policy/Entropy",
    "Policy/Entropy Coeff",
    "Policy/Extrinsic Value Estimate",
)
"""What every update reports (the mean over a summary period), in this order."""

Rewards = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(obs, actions, next_obs, rewards) -> rewards``: a minibatch's rewards with the reward
providers' added (normalised observations; :mod:`evtrain.trainers.sac.reward_providers`)."""


class SACUpdate:
    """One gradient step of the critics, the actor and alpha, then the target update.

    :param rewards: adds the reward providers' rewards to a minibatch's; ``None``: none.
    """

    def __init__(
        self,
        networks: SACNetworks,
        hp: SACSettings,
        gamma: float,
        *,
        generator: torch.Generator,
        world: World,
        finite: FiniteGuard,
        rewards: Rewards | None,
    ) -> None:
        self.networks = networks
        self.hp = hp
        self.gamma = gamma
        self.generator = generator
        self.world = world
        self.finite = finite
        self.rewards = rewards
        self.stat_names = UPDATE_STATS if networks.branches is None else DISCRETE_UPDATE_STATS
        self.step = 0
        """The environment step of the batch being learnt from (the non-finite guard's)."""
        self._applied = True
        """Whether the current gradient step's parts so far were finite and applied."""

    def __call__(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch`` (transitions); its statistics, none if skipped."""
        nets, self.step = self.networks, batch.step
        if isinstance(nets.actor, CategoricalActor):
            return self._update_discrete(nets.actor, batch)
        qf = self._twin_q()
        mb_obs = nets.normalizer(batch.obs)
        mb_next_obs = nets.normalizer(batch.next_obs)
        mb_actions, mb_rewards = batch.actions, batch.rewards
        if self.rewards is not None:  # the providers' rewards, as their models see them now
            mb_rewards = self.rewards(mb_obs, mb_actions, mb_next_obs, mb_rewards)
        alpha = nets.log_alpha.detach().exp()
        q_loss = self._critic_step(
            mb_obs, mb_actions, mb_rewards, mb_next_obs, batch.terminations, alpha
        )

        # -- actor: minimise alpha log pi(a|s) - min Q(s, a), a ~ pi reparameterised
        actor = nets.actor
        assert isinstance(actor, SquashedGaussianActor)  # (recurrent: recurrent_update)
        actions, logprob = actor(mb_obs, self.generator)
        # Q is only a function of the actions here: no gradients for the critics' weights.
        qf.requires_grad_(False)
        min_q_pi = qf.values(mb_obs, actions).amin(0)
        qf.requires_grad_(True)
        policy_loss = (alpha * logprob - min_q_pi).mean()
        self.actor_step(policy_loss)
        with torch.no_grad():
            return self.finish(q_loss, policy_loss, -logprob.mean(), alpha, min_q_pi.mean())

    def _critic_step(
        self,
        mb_obs: torch.Tensor,
        mb_actions: torch.Tensor,
        mb_rewards: torch.Tensor,
        mb_next_obs: torch.Tensor,
        mb_terminated: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:
        """One gradient step of both critics; returns their two losses."""
        nets, qf = self.networks, self._twin_q()
        qf_target = nets.qf_target
        assert isinstance(qf_target, TwinQ)
        # -- critic: soft Bellman target y = r + gamma (1 - d) (min Q'(s', a') - alpha log pi)
        with torch.no_grad():
            next_actions, next_logprob = nets.actor(mb_next_obs, self.generator)
            min_q_next = qf_target.values(mb_next_obs, next_actions).amin(0)
            min_q_next -= alpha * next_logprob
            y = mb_rewards + self.gamma * (1.0 - mb_terminated) * min_q_next
        q = qf.values(mb_obs, mb_actions)
        q_loss = (q - y).square().mean(1)  # each critic's mean squared error
        self.critic_backward(q_loss)
        return q_loss.detach()

    def critic_backward(self, q_loss: torch.Tensor) -> None:
        """The critics' gradient step on their two losses."""
        nets = self.networks
        zero_grad_(nets.qf_params)
        torch.autograd.backward(q_loss.sum())
        self.world.average_(nets.qf_params.grad)  # data parallel: the mean over ranks
        self._applied = self._clip(nets.qf_params, q_loss)
        if self._applied:
            nets.q_optimizer.step()

    def actor_step(self, policy_loss: torch.Tensor) -> None:
        """The actor's gradient step (none when the critics' was not finite)."""
        if not self._applied:  # the critics' step was not finite: neither is the rest
            return
        nets = self.networks
        zero_grad_(nets.actor_params)
        torch.autograd.backward(policy_loss)
        self.world.average_(nets.actor_params.grad)
        self._applied = self._clip(nets.actor_params, policy_loss)
        if self._applied:
            nets.actor_optimizer.step()

    def finish(
        self,
        q_loss: torch.Tensor,
        policy_loss: torch.Tensor,
        entropy: torch.Tensor,
        alpha: torch.Tensor,
        value: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """After the critics' and the actor's steps: alpha's step, the target update, the
        update's statistics (``value``: the mean of ``min Q(s, a ~ pi)``)."""
        if not self._applied:  # skipped as non-finite (on_nonfinite: skip)
            self._applied = True
            return {}
        nets = self.networks
        with torch.no_grad():
            # -- entropy coefficient: move log alpha so that E[-log pi] approaches
            # target_entropy; the gradient of -(log alpha (log pi + target)).mean(), directly
            torch.sub(entropy, nets.target_entropy, out=nets.log_alpha.grad)
            self.world.average_(nets.log_alpha.grad)
            nets.alpha_optimizer.step()

            # -- target networks: Polyak averaging with tau
            nets.qf_target_params.lerp_(nets.qf_params, self.hp.tau)

            # (discrete actions: the branches' entropies summed, their coefficients' mean)
            stats = (q_loss[0], q_loss[1], policy_loss, entropy.sum(), alpha.mean(), value)
            return {key: s.detach() for key, s in zip(self.stat_names, stats, strict=True)}

    def _update_discrete(
        self, actor: CategoricalActor, batch: ReplayBatch
    ) -> dict[str, torch.Tensor]:
        """:meth:`__call__` for discrete actions: the same steps, with the expectations over
        every action of :mod:`evtrain.trainers.sac.discrete`."""
        nets = self.networks
        qf, qf_target = self._twin_q(), nets.qf_target
        assert isinstance(qf_target, TwinQ)
        mb_obs = nets.normalizer(batch.obs)
        mb_next_obs = nets.normalizer(batch.next_obs)
        mb_actions, mb_rewards = batch.actions, batch.rewards
        if self.rewards is not None:
            mb_rewards = self.rewards(mb_obs, mb_actions, mb_next_obs, mb_rewards)
        alpha = nets.log_alpha.detach().exp()
        # -- critics: towards r + gamma (1 - d) sum_a pi(a|s') [min Q'(s', a) - alpha log pi]
        mb = (mb_obs, mb_actions, mb_rewards, mb_next_obs, batch.terminations)
        q_loss = critic_losses(qf, qf_target, actor, mb, alpha, self.gamma)
        self.critic_backward(q_loss)
        # -- actor: minimise sum_a pi(a|s) [alpha log pi(a|s) - min Q(s, a)]
        policy_loss, entropy, value = actor_loss(qf, actor, mb_obs, alpha)
        self.actor_step(policy_loss)
        return self.finish(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _clip(self, params: nn.Parameter, loss: torch.Tensor) -> bool:
        """Clip the gradient; whether it and ``loss`` are finite (else the step is not
        taken, or, ``on_nonfinite: stop``, :class:`~evtrain.errors.NonFiniteError`)."""
        if self.hp.max_grad_norm is not None:
            norm = clip_grad_norm_(params, self.hp.max_grad_norm)
        else:
            assert params.grad is not None  # flatten_parameters gives every buffer one
            norm = torch.linalg.vector_norm(params.grad)
        return self.finite.update(self.step, loss, norm)

    def _twin_q(self) -> TwinQ:
        qf = self.networks.qf
        if isinstance(qf, TwinQ):
            return qf
        raise RuntimeError("the feed-forward update needs the feed-forward critics")
