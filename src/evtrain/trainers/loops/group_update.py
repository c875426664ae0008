"""The update the group algorithms share (:class:`GroupPPO`, which POCA and MAPPO have): PPO's
clipped policy objective per agent, on the steps each agent acted in, beside a critic loss the
algorithm defines (POCA's value and counterfactual baselines, MAPPO's centralised value).

A batch is a rollout's **group steps** (every slot of one environment copy at one step), so a
minibatch keeps each group whole, as the critics need: ``buffer_size / batch_size`` minibatches
of group steps per epoch, shuffled.  Advantages are standardised over the acting agents of a
minibatch (``normalize_advantage``); the policy loss and the entropy are means over them.  The
critic's loss is ML-Agents' trust-region one (:func:`clipped_value_loss`), weighted by
``vf_coef`` (ML-Agents' fixed 0.5).  Learning rate, clip range and entropy coefficient follow
PPO's schedules.  One Adam over the policy and the critic, gradients clipped together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch
from torch import nn

from evtrain.trainers.algorithm import AlgorithmSpec, OnPolicyBatch
from evtrain.trainers.finite import finite_mean
from evtrain.trainers.group_settings import GroupSettings
from evtrain.trainers.loops.schedules import scheduled
from evtrain.trainers.networks.mlp import clip_grad_norm_, flatten_parameters, zero_grad_
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy
from evtrain.trainers.optim import make_adam

CriticLoss = Callable[[OnPolicyBatch, float], tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""An algorithm's critic loss on a minibatch (with the clip range), and its parts by stat
name."""


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


def rows(batch: OnPolicyBatch, index: torch.Tensor) -> OnPolicyBatch:
    """The group steps ``index`` picks of ``batch``."""

    def pick(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x[index]

    return attrs.evolve(
        batch,
        obs=batch.obs[index],
        actions=batch.actions[index],
        logprobs=batch.logprobs[index],
        advantages=batch.advantages[index],
        returns=batch.returns[index],
        values=pick(batch.values),
        active=pick(batch.active),
        extras={key: x[index] for key, x in batch.extras.items()},
    )


class GroupPPO:
    """The policy, the critic, one Adam over both and the update a group algorithm shares.

    :param critic: the algorithm's critic (built after the policy, on the CPU).
    :param critic_loss: its loss on a minibatch.
    """

    def __init__(
        self, spec: AlgorithmSpec, build_critic: Callable[[], nn.Module], critic_loss: CriticLoss
    ) -> None:
        self.spec = spec
        self.hp: GroupSettings = spec.settings.hyperparameters  # type: ignore[assignment]
        # Each agent acts on its own observation: PPO's policy (its own value head unused),
        # so the export and the action handling (action masks included) are PPO's.
        self.agent = ActorCritic(
            spec.observation_space,
            spec.action_space,
            spec.settings.network_settings,
            spec.init_generator,
        ).to(spec.device)
        self.critic = build_critic().to(spec.device)
        self.critic_loss = critic_loss
        parts = nn.ModuleDict({"agent": self.agent, "critic": self.critic})
        self.flat_params = flatten_parameters(parts)
        """The policy's and the critic's parameters (and gradients) as one tensor."""
        self.optimizer = make_adam(self.flat_params, self.hp.learning_rate, eps=1e-5)

    # -- the update ----------------------------------------------------------------------------

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        """``num_epoch`` passes of minibatch gradient steps over the group steps of ``batch``;
        returns the losses, the entropy and the scheduled values."""
        hp, spec = self.hp, self.spec
        scheduled_values = scheduled(hp, batch.step, spec.settings.max_steps)
        self.optimizer.lr = scheduled_values.learning_rate
        clip_coef, ent_coef = scheduled_values.epsilon, scheduled_values.beta
        # From the settings, not the batch: every rank takes as many steps (each an all-reduce).
        num_minibatches = max(1, min(hp.buffer_size // hp.batch_size, batch.obs.shape[0]))
        stats: dict[str, list[torch.Tensor]] = {}
        for epoch in range(hp.num_epoch):
            for mb in self._minibatches(batch, num_minibatches):
                # entropy: in the loss with a nonzero beta, else measured in the first epoch
                with_entropy = ent_coef > 0.0 or epoch == 0
                step_stats = self._gradient_step(mb, batch.step, clip_coef, ent_coef, with_entropy)
                for key, value in step_stats:
                    stats.setdefault(key, []).append(value)
        spec.finite.check_updates(batch.step)  # on_nonfinite: stop (one sync per update)
        means: dict[str, float] = {}
        for key, values in stats.items():
            mean = finite_mean(values)  # without the steps skipped as non-finite, if any
            if mean is not None:
                means[key] = mean
        means["Policy/Learning Rate"] = scheduled_values.learning_rate
        means["Policy/Epsilon"] = scheduled_values.epsilon
        means["Policy/Beta"] = scheduled_values.beta
        return means

    def _minibatches(self, b: OnPolicyBatch, num_minibatches: int) -> Iterator[OnPolicyBatch]:
        if num_minibatches == 1:
            yield b
            return
        spec = self.spec
        perm = torch.randperm(b.obs.shape[0], generator=spec.generator, device=spec.device)
        for index in torch.tensor_split(perm, num_minibatches):
            yield rows(b, index)

    def _gradient_step(
        self, mb: OnPolicyBatch, step: int, clip_coef: float, ent_coef: float, with_entropy: bool
    ) -> list[tuple[str, torch.Tensor]]:
        """One optimizer step on ``mb``; returns its losses (and entropy), detached, by stat
        name."""
        assert mb.active is not None  # the group loop's batches say who acted
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
        critic_loss, parts = self.critic_loss(mb, clip_coef)
        loss = pg_loss + self.hp.vf_coef * critic_loss
        stats = [("Losses/Policy Loss", pg_loss), *parts.items()]
        # -- entropy bonus
        if entropy is not None:
            entropy_mean = masked_mean(entropy, mb.active)
            if ent_coef > 0.0:
                loss = loss - ent_coef * entropy_mean
            stats.append(("Policy/Entropy", entropy_mean))
        torch.autograd.backward(loss)
        self.spec.world.average_(self.flat_params.grad)  # data parallel: the mean over ranks
        grad_norm = clip_grad_norm_(self.flat_params, self.hp.max_grad_norm)
        if self.spec.finite.update(step, loss, grad_norm):
            self.optimizer.step()
        return [(key, value.detach()) for key, value in stats]

    def _score(
        self, mb: OnPolicyBatch, *, with_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(B, G)`` log-probabilities (and entropies) of the minibatch's actions under the
        current policy (the masked distribution, with an action mask)."""
        agent = self.agent
        logprob, entropy = agent.heads.score(
            agent.policy_output(mb.obs.flatten(0, 1)),  # masked, with an action mask
            agent.log_std,
            mb.actions.flatten(0, 1),
            with_entropy,
            entropy_grad,
        )
        shape = mb.logprobs.shape
        return logprob.view(shape), None if entropy is None else entropy.view(shape)

    # -- export and checkpoints ----------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """One agent's observation to its deterministic action (argmax, or the clipped
        mean): the policy every agent of the behavior runs."""
        return DeterministicPolicy(self.agent, self.spec.action_space).eval()

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        """The deterministic policy: group trainers do not sample for self-play."""
        del generator
        return self.policy_module()

    def state_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.critic.load_state_dict(state["critic"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        self.optimizer.load_state_dict(state["optimizer"])
