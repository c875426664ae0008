"""PPO's update (Schulman et al. 2017), top to bottom: for ``num_epoch`` epochs, for each
shuffled minibatch of the rollout, the clipped surrogate objective (the paper's eq. 7), the
value loss (regression onto the GAE returns) and the entropy bonus (eq. 9) make one loss, and
one Adam step follows on its clipped gradient; the intrinsic reward providers' models learn from the
same minibatch, and behavioral cloning once after the epochs (ML-Agents).

The gradients come from :mod:`~evtrain.trainers.ppo.gradients` where it supports the agent
(the same numbers written out by hand, without autograd's per-operation cost), else from
autograd (:meth:`PPOUpdate._autograd_backward`).  Rollouts, GAE and minibatches are the
on-policy loop's (:mod:`evtrain.trainers.loops.on_policy`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.finite import finite_mean
from evtrain.trainers.loops.on_policy import Minibatch, OnPolicyTrainer, normalized
from evtrain.trainers.networks.mlp import clip_grad_norm_, zero_grad_
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.optim import FlatAdam
from evtrain.trainers.ppo.gradients import ppo_gradients
from evtrain.trainers.rewards.behavioral_cloning import BehavioralCloning
from evtrain.trainers.settings import PPOSettings


def clipped_surrogate_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
) -> torch.Tensor:
    """The negated clipped surrogate objective ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]``.

    ``r = exp(new_logprob - old_logprob)`` is the probability ratio of the taken actions.
    """
    ratio = torch.exp(new_logprob - old_logprob)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -torch.min(surr1, surr2).mean()


class PPOUpdate(OnPolicyTrainer):
    """The update half of :class:`~evtrain.trainers.ppo.trainer.PPOTrainer`: what one batch
    does to the networks."""

    hp: PPOSettings
    flat_params: nn.Parameter
    """All of the agent's parameters (and gradients) as one tensor, for the optimizer."""
    optimizer: FlatAdam
    cloning: BehavioralCloning | None
    _analytic_gradients: bool
    """Whether the gradient step computes its gradients without autograd."""

    @torch.no_grad()
    def _evaluate_providers(self) -> list[npt.NDArray[np.float32]]:
        """Each intrinsic reward provider's ``(T, N)`` rewards of the rollout's transitions (0 on
        the autoreset steps of NEXT_STEP mode); reports each provider's reward per finished
        episode (``Policy/<Name> Reward``)."""
        T, N = self.num_steps, self.num_envs
        obs = self.b_obs.flatten(0, 1)
        actions = self.b_actions.flatten(0, 1)
        next_obs = self.b_next_obs.flatten(0, 1)
        rewards = [
            np.where(self.valid, s.evaluate(obs, actions, next_obs).reshape(T, N), 0.0)
            for s in self.signals.values()
        ]
        ended = (self.terminated | self.truncated) & self.valid
        report = self.reporter.add_stat
        for t in range(T):
            for i, signal in enumerate(self.signals.values()):
                self._provider_returns[i] += rewards[i][t]
                for n in np.flatnonzero(ended[t]):
                    report(f"Policy/{signal.stat_name} Reward", float(self._provider_returns[i, n]))
            self._provider_returns[:, ended[t]] = 0.0
        return [r.astype(np.float32) for r in rewards]

    def _update(self, b: Minibatch, clip_coef: float, ent_coef: float) -> None:
        """``num_epoch`` passes of minibatch gradient steps on the clipped objective over the
        batch ``b`` (:meth:`_batch`)."""
        hp = self.hp
        batch_size = b[0].shape[0]
        # From the settings, not the batch: every rank must take as many gradient steps (each
        # is an all-reduce), even when dropped autoreset steps leave them different batches.
        num_minibatches = max(1, min(hp.buffer_size // hp.batch_size, batch_size))
        if num_minibatches == 1 and hp.normalize_advantage and self.memory is None:
            # One minibatch is the whole batch, the same every epoch: normalise it once.
            b = (*b[:3], normalized(b[3]), *b[4:])

        pg_losses, v_losses, entropies = [], [], []
        provider_losses: dict[str, list[torch.Tensor]] = {}
        for epoch in range(hp.num_epoch):
            for mb in self._minibatches(b, num_minibatches):
                # Entropy enters the loss only with a nonzero beta; otherwise it is measured
                # once per minibatch in the first epoch (the rollout policy's), for the stats.
                pg_loss, v_loss, entropy = self._gradient_step(
                    mb, clip_coef, ent_coef, with_entropy=ent_coef > 0.0 or epoch == 0
                )
                pg_losses.append(pg_loss)
                v_losses.append(v_loss)
                if entropy is not None:
                    entropies.append(entropy)
                # -- the reward providers' models learn from the same minibatch (ML-Agents)
                for signal in self.signals.values():
                    for key, loss in signal.update(mb[0], mb[1], mb[5], self.world).items():
                        provider_losses.setdefault(key, []).append(loss)
        self.finite.check_updates(self.step)  # on_nonfinite: stop (one sync per update)

        report = self.reporter.add_stat
        # Without the gradient steps skipped as non-finite (on_nonfinite: skip), if any.
        for key, losses in (("Losses/Policy Loss", pg_losses), ("Losses/Value Loss", v_losses)):
            mean = finite_mean(losses)
            if mean is not None:
                report(key, mean)
        report("Policy/Entropy", float(torch.stack(entropies).mean()))
        for key, losses in provider_losses.items():
            report(key, float(torch.stack(losses).mean()))
        # -- behavioral cloning: once per update, after it (ML-Agents)
        if self.cloning is not None:
            for key, value in self.cloning.update(self.step).items():
                report(key, value)

    def _gradient_step(
        self, mb: Minibatch, clip_coef: float, ent_coef: float, *, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One optimizer step on minibatch ``mb``; returns ``pg_loss``, ``v_loss`` and the mean
        entropy (``None`` unless ``with_entropy``), detached.

        The gradients come from :mod:`~evtrain.trainers.ppo.gradients` where it supports the
        agent (the same numbers, without autograd's per-operation cost), else from autograd.
        """
        flat_params = self.flat_params
        zero_grad_(flat_params)
        if self._analytic_gradients and isinstance(self.agent, ActorCritic):
            pg_loss, v_loss, entropy_loss = ppo_gradients(
                self.agent,
                mb,
                clip_coef=clip_coef,
                vf_coef=self.hp.vf_coef,
                ent_coef=ent_coef,
                with_entropy=with_entropy,
            )
        else:
            pg_loss, v_loss, entropy_loss = self._autograd_backward(
                mb, clip_coef, ent_coef, with_entropy=with_entropy
            )
        self.world.average_(flat_params.grad)  # data parallel: the mean over ranks
        grad_norm = clip_grad_norm_(flat_params, self.hp.max_grad_norm)
        if self.finite.update(self.step, pg_loss + v_loss, grad_norm):
            self.optimizer.step()
        return pg_loss, v_loss, entropy_loss

    def _autograd_backward(
        self, mb: Minibatch, clip_coef: float, ent_coef: float, *, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The loss on minibatch ``mb`` and its gradients through autograd (into the zeroed
        ``.grad`` buffers); returns the detached ``pg_loss``, ``v_loss`` and mean entropy."""
        mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns = mb[:5]
        if isinstance(self.agent, ActorCritic):
            newlogprob, entropy, newvalue = self.agent.evaluate(
                mb_obs, mb_actions, entropy=with_entropy, entropy_grad=ent_coef > 0.0
            )
        else:  # with memory: the minibatch's sequences, from their recorded memories
            newlogprob, entropy, newvalue = self._memory().evaluate(
                mb_actions, entropy=with_entropy, entropy_grad=ent_coef > 0.0
            )

        # -- policy loss: clipped surrogate objective (paper eq. 7)
        pg_loss = clipped_surrogate_loss(newlogprob, mb_logprobs, mb_advantages, clip_coef)
        # -- value loss: regression onto the GAE returns
        v_loss = F.mse_loss(newvalue, mb_returns)
        loss = pg_loss + self.hp.vf_coef * v_loss
        # -- entropy bonus (paper eq. 9)
        entropy_loss = None
        if entropy is not None:
            entropy_loss = entropy.mean()
            if ent_coef > 0.0:
                loss = loss - ent_coef * entropy_loss

        torch.autograd.backward(loss)
        return (
            pg_loss.detach(),
            v_loss.detach(),
            None if entropy_loss is None else entropy_loss.detach(),
        )
