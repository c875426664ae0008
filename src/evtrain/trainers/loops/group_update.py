"""The update the group trainers share: PPO's clipped policy objective per agent, on the steps
each agent acted in, beside a critic loss the algorithm defines (POCA's value and
counterfactual baselines, MAPPO's centralised value).

A batch is a rollout's **group steps** (every slot of one environment copy at one step), so a
minibatch keeps each group whole, as the critics need: ``buffer_size / batch_size`` minibatches
of group steps per epoch, shuffled.  Advantages are standardised over the acting agents of a
minibatch (``normalize_advantage``); the policy loss and the entropy are means over them.  The
critic's loss is ML-Agents' trust-region one (:func:`clipped_value_loss`), weighted by
``vf_coef`` (ML-Agents' fixed 0.5).  Learning rate, clip range and entropy coefficient follow
PPO's schedules.  One Adam over the policy and the critic, gradients clipped together.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from evtrain.timers import hierarchical_timer
from evtrain.trainers.finite import finite_mean
from evtrain.trainers.loops.group_rollout import GroupRollout
from evtrain.trainers.loops.schedules import report_scheduled, scheduled
from evtrain.trainers.networks.mlp import clip_grad_norm_, flatten_parameters, zero_grad_
from evtrain.trainers.networks.policies import DeterministicPolicy, score_actions
from evtrain.trainers.optim import FlatAdam, make_adam


class GroupBatch(NamedTuple):
    """A rollout's group steps (``b_``) or a minibatch of them (``mb_``): ``B`` rows of ``G``
    agents; ``K`` is 1 where the critic values the group (POCA) and ``G`` where it values each
    agent (MAPPO)."""

    obs: torch.Tensor
    """``(B, G, D)`` normalised observations."""
    actions: torch.Tensor
    """``(B, G)`` discrete or ``(B, G, A)`` continuous actions, as sampled."""
    logprobs: torch.Tensor
    """``(B, G)`` log-probabilities of the actions under the rollout's policy."""
    advantages: torch.Tensor
    """``(B, G)``."""
    active: torch.Tensor
    """``(B, G)`` booleans: the agent acted (only those steps train the policy)."""
    returns: torch.Tensor
    """``(B, K)`` the critic's targets."""
    values: torch.Tensor
    """``(B, K)`` the critic's estimates during the rollout (the trust region's centre)."""
    baselines: torch.Tensor | None = None
    """POCA: ``(B, G)`` the counterfactual baselines during the rollout."""

    def rows(self, index: torch.Tensor) -> GroupBatch:
        """The group steps ``index`` picks."""
        return GroupBatch._make(None if x is None else x[index] for x in self)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` where ``mask``; 0 where it is empty."""
    weight = mask.to(x.dtype)
    return (x * weight).sum() / weight.sum().clamp(min=1.0)


def masked_normalized(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` shifted and scaled to mean 0 and standard deviation 1 over the entries of ``mask``
    (unchanged with fewer than two)."""
    count = mask.sum().to(x.dtype)
    mean = masked_mean(x, mask)
    # the unbiased standard deviation, as torch.std (and PPO's normalisation) computes it
    variance = masked_mean((x - mean).square(), mask) * count / (count - 1).clamp(min=1.0)
    normalized = (x - mean) / (torch.sqrt(variance) + 1e-8)
    return torch.where(count >= 2, normalized, x)  # no device sync to decide


def clipped_value_loss(
    new: torch.Tensor,
    old: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """ML-Agents' trust-region value loss: the larger of the squared errors of the new
    estimate and of the old one moved by at most ``clip_coef`` towards it, averaged (where
    ``mask``)."""
    clipped = old + torch.clamp(new - old, -clip_coef, clip_coef)
    loss = torch.max((returns - new).square(), (returns - clipped).square())
    return loss.mean() if mask is None else masked_mean(loss, mask)


class GroupOnPolicyTrainer(GroupRollout):
    """A group trainer's loop and update; the algorithm supplies the critic, its values, the
    targets and the critic's loss."""

    flat_params: nn.Parameter
    optimizer: FlatAdam

    def _setup(self) -> None:
        self._build_group_trainer()
        parts = nn.ModuleDict({"agent": self.agent, "critic": self.critic})
        self.flat_params = flatten_parameters(parts)
        """The policy's and the critic's parameters (and gradients) as one tensor."""
        self.optimizer = make_adam(self.flat_params, self.hp.learning_rate, eps=1e-5)

    # -- what the algorithm supplies ------------------------------------------------------------

    @abc.abstractmethod
    def _targets(self, next_value: torch.Tensor) -> GroupBatch:
        """The rollout as a batch: advantages, the critic's targets and estimates."""

    @abc.abstractmethod
    def _critic_loss(
        self, mb: GroupBatch, clip_coef: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The critic's loss on a minibatch, and its parts by stat name."""

    @abc.abstractmethod
    def _report_estimates(self) -> None:
        """Report the rollout's value estimates (``Policy/Extrinsic Value Estimate``, ...)."""

    # -- the algorithm's steps -----------------------------------------------------------------

    def advance(self) -> None:
        """Collect one rollout, update the policy and the critic on it, report."""
        next_value = self._collect_for_update()
        if next_value is None:
            return
        values = scheduled(self.hp, self.step, self.settings.max_steps)
        self.optimizer.lr = values.learning_rate
        # The update reads this batch only (threaded: the next rollout writes the arrays).
        b = self._targets(next_value)
        with hierarchical_timer("update"):
            self._run_update(self._update, b, values.epsilon, values.beta)
        report_scheduled(self.reporter, values)
        self._report_estimates()
        self._end_period()

    def _update(self, b: GroupBatch, clip_coef: float, ent_coef: float) -> None:
        """``num_epoch`` passes of minibatch gradient steps over the group steps of ``b``."""
        hp = self.hp
        # From the settings, not the batch: every rank takes as many steps (each an all-reduce).
        num_minibatches = max(1, min(hp.buffer_size // hp.batch_size, b.obs.shape[0]))
        stats: dict[str, list[torch.Tensor]] = {}
        for epoch in range(hp.num_epoch):
            for mb in self._group_minibatches(b, num_minibatches):
                # entropy: in the loss with a nonzero beta, else measured in the first epoch
                with_entropy = ent_coef > 0.0 or epoch == 0
                for key, value in self._gradient_step(mb, clip_coef, ent_coef, with_entropy):
                    stats.setdefault(key, []).append(value)
        self.finite.check_updates(self.step)  # on_nonfinite: stop (one sync per update)
        for key, values in stats.items():
            mean = finite_mean(values)  # without the steps skipped as non-finite, if any
            if mean is not None:
                self.reporter.add_stat(key, mean)

    def _group_minibatches(self, b: GroupBatch, num_minibatches: int) -> Iterator[GroupBatch]:
        if num_minibatches == 1:
            yield b
            return
        perm = torch.randperm(b.obs.shape[0], generator=self.generator, device=self.device)
        for index in torch.tensor_split(perm, num_minibatches):
            yield b.rows(index)

    def _gradient_step(
        self, mb: GroupBatch, clip_coef: float, ent_coef: float, with_entropy: bool
    ) -> list[tuple[str, torch.Tensor]]:
        """One optimizer step on ``mb``; returns its losses (and entropy), detached, by stat
        name."""
        zero_grad_(self.flat_params)
        # -- policy: PPO's clipped surrogate objective, over the agents that acted
        logprob, entropy = self._score(mb, with_entropy=with_entropy, entropy_grad=ent_coef > 0)
        advantages = mb.advantages
        if self.hp.normalize_advantage:
            advantages = masked_normalized(advantages, mb.active)
        ratio = torch.exp(logprob - mb.logprobs)
        surr1 = ratio * advantages
        surr2 = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
        pg_loss = -masked_mean(torch.min(surr1, surr2), mb.active)
        # -- critic: the algorithm's
        critic_loss, parts = self._critic_loss(mb, clip_coef)
        loss = pg_loss + self.hp.vf_coef * critic_loss
        stats = [("Losses/Policy Loss", pg_loss), *parts.items()]
        # -- entropy bonus
        if entropy is not None:
            entropy_mean = masked_mean(entropy, mb.active)
            if ent_coef > 0.0:
                loss = loss - ent_coef * entropy_mean
            stats.append(("Policy/Entropy", entropy_mean))
        torch.autograd.backward(loss)
        self.world.average_(self.flat_params.grad)  # data parallel: the mean over ranks
        grad_norm = clip_grad_norm_(self.flat_params, self.hp.max_grad_norm)
        if self.finite.update(self.step, loss, grad_norm):
            self.optimizer.step()
        return [(key, value.detach()) for key, value in stats]

    def _score(
        self, mb: GroupBatch, *, with_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(B, G)`` log-probabilities (and entropies) of the minibatch's actions under the
        current policy (the masked distribution, with an action mask)."""
        agent = self.agent
        logprob, entropy = score_actions(
            agent.policy_output(mb.obs.flatten(0, 1)),  # masked, with an action mask
            agent.log_std,
            agent.discrete,
            mb.actions.flatten(0, 1),
            with_entropy,
            entropy_grad,
        )
        shape = mb.logprobs.shape
        return logprob.view(shape), None if entropy is None else entropy.view(shape)

    # -- what the runner needs ------------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """One agent's observation to its deterministic action (argmax, or the clipped
        mean): the policy every agent of the behavior runs."""
        return DeterministicPolicy(self.agent, self.action_space).eval()

    def _state_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.critic.load_state_dict(state["critic"])

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_weights(state)
        self.optimizer.load_state_dict(state["optimizer"])
