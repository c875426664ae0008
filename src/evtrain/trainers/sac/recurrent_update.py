"""SAC's update with ``network_settings.memory``: each gradient step runs the networks over the
sequences the off-policy loop sampled, each from the memories it started from
(``actor_memory``, ``critic_memory``), every mean over the sequences' real steps
(:mod:`evtrain.trainers.sac.memory`).  The steps are :mod:`~evtrain.trainers.sac.update`'s.
"""

from __future__ import annotations

import torch

from evtrain.trainers.algorithm import ReplayBatch
from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.sac.actor import squashed_sample
from evtrain.trainers.sac.discrete import Branches, sequence_actor_loss, sequence_critic_losses
from evtrain.trainers.sac.memory import RecurrentTwinQ
from evtrain.trainers.sac.update import SACUpdate

MEMORIES = ("actor_memory", "critic_memory")
"""The memories a recurrent SAC carries: the policy's, and both critics' side by side."""


class SequenceUpdate:
    """:class:`~evtrain.trainers.sac.update.SACUpdate`'s gradient step on sequences."""

    def __init__(self, steps: SACUpdate) -> None:
        self.steps = steps
        """The critics', the actor's and alpha's steps, shared with the feed-forward update."""

    def _recurrent(self) -> tuple[RecurrentMLP, RecurrentTwinQ, RecurrentTwinQ]:
        nets = self.steps.networks
        actor, qf, qf_target = nets.actor, nets.qf, nets.qf_target
        if (
            isinstance(actor, RecurrentMLP)
            and isinstance(qf, RecurrentTwinQ)
            and isinstance(qf_target, RecurrentTwinQ)
        ):
            return actor, qf, qf_target
        raise RuntimeError("the sequences' update needs the recurrent networks")

    def __call__(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One gradient step on the sequences of ``batch``: the networks run each from its
        stored memories, and every mean is over the sequences' real steps."""
        steps = self.steps
        steps.step = batch.step
        branches = steps.networks.branches
        if branches is not None:
            return self._update_discrete(batch, branches)
        actor, qf, qf_target = self._recurrent()
        obs, seq, rewards = self._inputs(batch)
        assert batch.mask is not None
        mask = batch.mask.to(torch.float32)
        count = mask.sum()
        critic_memory = batch.memories["critic_memory"]
        alpha = steps.networks.log_alpha.detach().exp()
        gamma = steps.gamma
        # -- the policy over the sequence: a ~ pi(.|s_t) (positions :L), a' ~ pi(.|s'_t) (1:)
        out = actor.sequences(seq, batch.memories["actor_memory"])
        actions, logprob = squashed_sample(out, steps.generator)

        # -- critic: soft Bellman target, as in SACUpdate
        with torch.no_grad():
            features = [f[:, 1:] for f in qf_target.features(seq, critic_memory)]
            min_q_next = qf_target.values(features, actions[:, 1:]).amin(0)
            min_q_next -= alpha * logprob[:, 1:]
            y = rewards + gamma * (1.0 - batch.terminations) * min_q_next
        q = qf.values(qf.features(obs, critic_memory), batch.actions)
        q_loss = ((q - y).square() * mask).sum((1, 2)) / count
        steps.critic_backward(q_loss)

        # -- actor, as in SACUpdate, with the critics just updated
        qf.requires_grad_(False)
        min_q_pi = qf.values(qf.features(obs, critic_memory), actions[:, :-1]).amin(0)
        qf.requires_grad_(True)
        logprob = logprob[:, :-1]
        policy_loss = ((alpha * logprob - min_q_pi) * mask).sum() / count
        steps.actor_step(policy_loss)
        with torch.no_grad():
            entropy = -(logprob * mask).sum() / count
            value = (min_q_pi * mask).sum() / count
            return steps.finish(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _inputs(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The normalised observations, ``s_0`` then each step's ``s'`` (``s'_t = s_t+1``
        within a sequence: one pass of each network for both), and the rewards (the reward
        providers' added, as their models see them now)."""
        steps = self.steps
        normalizer = steps.networks.normalizer
        obs = normalizer(batch.obs)
        next_obs = normalizer(batch.next_obs)
        seq = torch.cat([obs[:, :1], next_obs], dim=1)
        rewards = batch.rewards
        if steps.rewards is not None:
            S, L = rewards.shape
            flat = (obs.flatten(0, 1), batch.actions.flatten(0, 1), next_obs.flatten(0, 1))
            rewards = steps.rewards(*flat, rewards.flatten()).view(S, L)
        return obs, seq, rewards

    def _update_discrete(self, batch: ReplayBatch, branches: Branches) -> dict[str, torch.Tensor]:
        """The discrete update of :mod:`~evtrain.trainers.sac.discrete` on sequences."""
        steps = self.steps
        actor, qf, qf_target = self._recurrent()
        obs, seq, rewards = self._inputs(batch)
        assert batch.mask is not None
        mb = {
            "actions": batch.actions,
            "terminated": batch.terminations,
            "mask": batch.mask,
            "critic_memory": batch.memories["critic_memory"],
        }
        alpha = steps.networks.log_alpha.detach().exp()
        # -- the policy over the sequence: pi(.|s_t) at positions :L, pi(.|s'_t) at 1:
        log_probs = branches.log_softmax(actor.sequences(seq, batch.memories["actor_memory"]))
        q_loss = sequence_critic_losses(
            qf, qf_target, log_probs, mb, obs, seq, rewards, alpha, steps.gamma, branches
        )
        steps.critic_backward(q_loss)
        # -- actor, with the critics just updated
        policy_loss, entropy, value = sequence_actor_loss(
            qf, log_probs[:, :-1], mb, obs, alpha, branches
        )
        steps.actor_step(policy_loss)
        return steps.finish(q_loss.detach(), policy_loss, entropy, alpha, value)
