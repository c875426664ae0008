"""SAC's update (Haarnoja et al. 2018), top to bottom: sample a minibatch of the replay buffer;
the critics step towards the soft Bellman target ``r + gamma (1 - d) (min Q'(s', a') - alpha
log pi(a'|s'))`` (clipped double-Q); the actor steps to minimise ``alpha log pi(a|s) - min Q(s,
a)`` with ``a ~ pi`` reparameterised; ``log alpha`` moves so the entropy approaches
``target_entropy``; the target critics follow by Polyak averaging with ``tau``.  Discrete
actions take the same steps with expectations over every action
(:mod:`evtrain.trainers.sac.discrete`); recurrent networks on sequences
(:mod:`evtrain.trainers.sac.recurrent_update`).  Replay, warm-up and the updates-to-data
ratio are the off-policy loop's (:mod:`evtrain.trainers.loops.off_policy`).
"""

from __future__ import annotations

import torch
from torch import nn

from evtrain.trainers.loops.off_policy import OffPolicyTrainer
from evtrain.trainers.loops.replay import ReplayBuffer
from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.networks.mlp import clip_grad_norm_, zero_grad_
from evtrain.trainers.optim import FlatAdam
from evtrain.trainers.sac.actor import SquashedGaussianActor
from evtrain.trainers.sac.discrete import Branches, CategoricalActor, actor_loss, critic_losses
from evtrain.trainers.sac.memory import CarriedMemories, RecurrentTwinQ, SequenceReplayBuffer
from evtrain.trainers.sac.rewards import SACRewardProviders
from evtrain.trainers.sac.twin_q import TwinQ
from evtrain.trainers.settings import SACSettings


class SACUpdate(OffPolicyTrainer):
    """The update half of :class:`~evtrain.trainers.sac.trainer.SACTrainer`: one gradient step
    of the critics, the actor and alpha, and the target update."""

    hp: SACSettings
    actor: SquashedGaussianActor | CategoricalActor | RecurrentMLP
    qf: TwinQ | RecurrentTwinQ
    qf_target: TwinQ | RecurrentTwinQ
    actor_params: nn.Parameter
    qf_params: nn.Parameter
    qf_target_params: nn.Parameter
    """One tensor per network (see flatten_parameters): one kernel per optimizer step, and
    the target update is a single lerp."""
    log_alpha: nn.Parameter
    target_entropy: float | torch.Tensor
    actor_optimizer: FlatAdam
    q_optimizer: FlatAdam
    alpha_optimizer: FlatAdam
    replay: ReplayBuffer | SequenceReplayBuffer
    branches: Branches | None
    """The discrete action branches; ``None`` for ``Box`` actions."""
    memory: CarriedMemories | None
    """Each environment's memories, with ``network_settings.memory``."""
    extras: SACRewardProviders
    """The intrinsic reward providers and behavioral cloning (empty without them)."""
    _applied = True
    """Whether the current gradient step's parts so far were finite and applied."""

    def _update(self) -> None:
        """One gradient step of the critics, the actor and alpha, then the target update."""
        if isinstance(self.actor, CategoricalActor):
            return self._update_discrete(self.actor)
        hp = self.hp
        qf, _, replay = self._feed_forward()
        mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated = (
            t.to(self.device) for t in replay.sample(hp.batch_size, self.rng)
        )
        mb_obs = self.normalizer(mb_obs)
        mb_next_obs = self.normalizer(mb_next_obs)
        if self.extras.signals:  # the intrinsic rewards, as the signals see them now
            mb_rewards = self.extras.rewards(mb_obs, mb_actions, mb_next_obs, mb_rewards)
        alpha = self.log_alpha.detach().exp()
        q_loss = self._critic_step(
            mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated, alpha
        )

        # -- actor: minimise alpha log pi(a|s) - min Q(s, a), a ~ pi reparameterised
        actions, logprob = self.actor(mb_obs, self.generator)
        # Q is only a function of the actions here: no gradients for the critics' weights.
        qf.requires_grad_(False)
        min_q_pi = qf.values(mb_obs, actions).amin(0)
        qf.requires_grad_(True)
        policy_loss = (alpha * logprob - min_q_pi).mean()
        self._actor_step(policy_loss)
        with torch.no_grad():
            self._finish_update(q_loss, policy_loss, -logprob.mean(), alpha, min_q_pi.mean())

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
        gamma = self.settings.reward_signals.extrinsic.gamma
        qf, qf_target, _ = self._feed_forward()
        # -- critic: soft Bellman target y = r + gamma (1 - d) (min Q'(s', a') - alpha log pi)
        with torch.no_grad():
            next_actions, next_logprob = self.actor(mb_next_obs, self.generator)
            min_q_next = qf_target.values(mb_next_obs, next_actions).amin(0)
            min_q_next -= alpha * next_logprob
            y = mb_rewards + gamma * (1.0 - mb_terminated) * min_q_next
        q = qf.values(mb_obs, mb_actions)
        q_loss = (q - y).square().mean(1)  # each critic's mean squared error
        self._critic_backward(q_loss)
        return q_loss.detach()

    def _critic_backward(self, q_loss: torch.Tensor) -> None:
        """The critics' gradient step on their two losses."""
        zero_grad_(self.qf_params)
        torch.autograd.backward(q_loss.sum())
        self.world.average_(self.qf_params.grad)  # data parallel: the mean over ranks
        self._applied = self._clip(self.qf_params, q_loss)
        if self._applied:
            self.q_optimizer.step()

    def _actor_step(self, policy_loss: torch.Tensor) -> None:
        if not self._applied:  # the critics' step was not finite: neither is the rest
            return
        zero_grad_(self.actor_params)
        torch.autograd.backward(policy_loss)
        self.world.average_(self.actor_params.grad)
        self._applied = self._clip(self.actor_params, policy_loss)
        if self._applied:
            self.actor_optimizer.step()

    def _finish_update(
        self,
        q_loss: torch.Tensor,
        policy_loss: torch.Tensor,
        entropy: torch.Tensor,
        alpha: torch.Tensor,
        value: torch.Tensor,
    ) -> None:
        """After the critics' and the actor's steps: alpha's step, the target update, the
        update's statistics (``value``: the mean of ``min Q(s, a ~ pi)``)."""
        hp = self.hp
        if not self._applied:  # skipped as non-finite (on_nonfinite: skip)
            self._applied = True
            return
        with torch.no_grad():
            # -- entropy coefficient: move log alpha so that E[-log pi] approaches
            # target_entropy; the gradient of -(log alpha (log pi + target)).mean(), directly
            torch.sub(entropy, self.target_entropy, out=self.log_alpha.grad)
            self.world.average_(self.log_alpha.grad)
            self.alpha_optimizer.step()

            # -- target networks: Polyak averaging with tau
            self.qf_target_params.lerp_(self.qf_params, hp.tau)

            # Summed here, averaged and reported once per summary: no sync per update.
            self._stats_sum[:2] += q_loss
            # (discrete actions: the branches' entropies summed, their coefficients' mean)
            stats = [policy_loss, entropy.sum(), alpha.mean(), value]
            self._stats_sum[2:] += torch.stack(stats)
            self._stats_updates += 1

    def _update_discrete(self, actor: CategoricalActor) -> None:
        """:meth:`_update` for discrete actions: the same steps, with the expectations over
        every action of :mod:`evtrain.trainers.sac.discrete`."""
        qf, qf_target, replay = self._feed_forward()
        mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated = (
            t.to(self.device) for t in replay.sample(self.hp.batch_size, self.rng)
        )
        mb_obs = self.normalizer(mb_obs)
        mb_next_obs = self.normalizer(mb_next_obs)
        if self.extras.signals:
            mb_rewards = self.extras.rewards(mb_obs, mb_actions, mb_next_obs, mb_rewards)
        alpha = self.log_alpha.detach().exp()
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- critics: towards r + gamma (1 - d) sum_a pi(a|s') [min Q'(s', a) - alpha log pi]
        batch = (mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated)
        q_loss = critic_losses(qf, qf_target, actor, batch, alpha, gamma)
        self._critic_backward(q_loss)
        # -- actor: minimise sum_a pi(a|s) [alpha log pi(a|s) - min Q(s, a)]
        policy_loss, entropy, value = actor_loss(qf, actor, mb_obs, alpha)
        self._actor_step(policy_loss)
        self._finish_update(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _clip(self, params: nn.Parameter, loss: torch.Tensor) -> bool:
        """Clip the gradient; whether it and ``loss`` are finite (else the step is not
        taken, or, ``on_nonfinite: stop``, :class:`~evtrain.errors.NonFiniteError`)."""
        if self.hp.max_grad_norm is not None:
            norm = clip_grad_norm_(params, self.hp.max_grad_norm)
        else:
            assert params.grad is not None  # flatten_parameters gives every buffer one
            norm = torch.linalg.vector_norm(params.grad)
        return self.finite.update(self.step, loss, norm)

    def _feed_forward(self) -> tuple[TwinQ, TwinQ, ReplayBuffer]:
        qf, qf_target, replay = self.qf, self.qf_target, self.replay
        if (
            isinstance(qf, TwinQ)
            and isinstance(qf_target, TwinQ)
            and isinstance(replay, ReplayBuffer)
        ):
            return qf, qf_target, replay
        raise RuntimeError("the feed-forward update needs the feed-forward networks")
