"""SAC's update with ``network_settings.memory``: the policy and the critics carry each
environment's memories while acting, the replay buffer stores sequences with the memories they
started from, and each gradient step runs the networks over sampled sequences from those
memories, every mean over the sequences' real steps (:mod:`evtrain.trainers.sac.memory`).
The steps are :mod:`~evtrain.trainers.sac.update`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.sac.actor import squashed_sample
from evtrain.trainers.sac.discrete import Branches, sequence_actor_loss, sequence_critic_losses
from evtrain.trainers.sac.memory import CarriedMemories, RecurrentTwinQ, SequenceReplayBuffer
from evtrain.trainers.sac.update import SACUpdate


class SACRecurrentUpdate(SACUpdate):
    """:class:`~evtrain.trainers.sac.update.SACUpdate` on sequences, and the memories of
    acting."""

    def _recurrent(self) -> tuple[RecurrentMLP, RecurrentTwinQ, RecurrentTwinQ, CarriedMemories]:
        actor, qf, qf_target, memory = self.actor, self.qf, self.qf_target, self.memory
        if (
            isinstance(actor, RecurrentMLP)
            and isinstance(qf, RecurrentTwinQ)
            and isinstance(qf_target, RecurrentTwinQ)
            and memory is not None
        ):
            return actor, qf, qf_target, memory
        raise RuntimeError(f"behavior {self.behavior_name!r} has no network_settings.memory")

    @torch.no_grad()
    def _step_memories(self, x: torch.Tensor) -> torch.Tensor:
        """One step of the policy and the critics on normalised observations: their memories
        move on (the ones they started from stay as :attr:`memory`'s ``taken``); returns the
        policy's output layer."""
        actor, qf, _, memory = self._recurrent()
        memory.taken = (memory.actor, memory.critic)
        out, memory.actor = actor.step(x, memory.actor)
        memory.critic = qf.step(x, memory.critic)
        return out

    def _store_sequences(
        self,
        obs: npt.NDArray[np.float32],
        action: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        real_next: npt.NDArray[np.float32],
        terminated: npt.NDArray[np.bool_],
        dones: npt.NDArray[np.bool_],
    ) -> None:
        """Store one step in the sequences, with the memories it was taken with; forget the
        memories of the episodes that ended (NEXT_STEP mode: after the reset step too)."""
        _, _, _, memory = self._recurrent()
        if not isinstance(self.replay, SequenceReplayBuffer):
            raise RuntimeError("a recurrent SAC stores sequences")
        valid = self.autoreset.valid
        actor_memory, critic_memory = (m.cpu().numpy() for m in memory.taken)
        self.replay.add(
            obs, action, reward, real_next, terminated, dones, valid, actor_memory, critic_memory
        )
        memory.forget(dones | ~valid)

    def _update_sequences(self) -> None:
        """:meth:`_update` on sequences: the networks run each from its stored memories, and
        every mean is over the sequences' real steps."""
        if self.branches is not None:
            return self._update_sequences_discrete(self.branches)
        actor, qf, qf_target, _ = self._recurrent()
        mb, obs, seq, rewards = self._sample_sequences()
        mask = mb["mask"].to(torch.float32)
        count = mask.sum()
        alpha = self.log_alpha.detach().exp()
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- the policy over the sequence: a ~ pi(.|s_t) (positions :L), a' ~ pi(.|s'_t) (1:)
        actions, logprob = squashed_sample(actor.sequences(seq, mb["actor_memory"]), self.generator)

        # -- critic: soft Bellman target, as in _critic_step
        with torch.no_grad():
            features = [f[:, 1:] for f in qf_target.features(seq, mb["critic_memory"])]
            min_q_next = qf_target.values(features, actions[:, 1:]).amin(0)
            min_q_next -= alpha * logprob[:, 1:]
            y = rewards + gamma * (1.0 - mb["terminated"]) * min_q_next
        q = qf.values(qf.features(obs, mb["critic_memory"]), mb["actions"])
        q_loss = ((q - y).square() * mask).sum((1, 2)) / count
        self._critic_backward(q_loss)

        # -- actor, as in _update, with the critics just updated
        qf.requires_grad_(False)
        min_q_pi = qf.values(qf.features(obs, mb["critic_memory"]), actions[:, :-1]).amin(0)
        qf.requires_grad_(True)
        logprob = logprob[:, :-1]
        policy_loss = ((alpha * logprob - min_q_pi) * mask).sum() / count
        self._actor_step(policy_loss)
        with torch.no_grad():
            entropy = -(logprob * mask).sum() / count
            value = (min_q_pi * mask).sum() / count
            self._finish_update(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _sample_sequences(
        self,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """A minibatch of sequences: the sampled arrays, the normalised observations, ``s_0``
        then each step's ``s'`` (``s'_t = s_t+1`` within a sequence: one pass of each network
        for both), and the rewards (the intrinsic ones added, as the signals see them now)."""
        hp = self.hp
        if not isinstance(self.replay, SequenceReplayBuffer):
            raise RuntimeError("a recurrent SAC samples sequences")
        L = self.replay.sequence_length
        sequences = self.replay.sample_sequences(max(1, hp.batch_size // L), self.rng)
        mb = {k: v.to(self.device) for k, v in sequences.items()}
        obs = self.normalizer(mb["obs"])
        next_obs = self.normalizer(mb["next_obs"])
        seq = torch.cat([obs[:, :1], next_obs], dim=1)
        rewards = mb["rewards"]
        if self.extras.signals:
            S = rewards.shape[0]
            flat = (obs.flatten(0, 1), mb["actions"].flatten(0, 1), next_obs.flatten(0, 1))
            rewards = self.extras.rewards(*flat, rewards.flatten()).view(S, L)
        return mb, obs, seq, rewards

    def _update_sequences_discrete(self, branches: Branches) -> None:
        """:meth:`_update_discrete` on sequences, as :meth:`_update_sequences` runs them."""
        actor, qf, qf_target, _ = self._recurrent()
        mb, obs, seq, rewards = self._sample_sequences()
        alpha = self.log_alpha.detach().exp()
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- the policy over the sequence: pi(.|s_t) at positions :L, pi(.|s'_t) at 1:
        log_probs = branches.log_softmax(actor.sequences(seq, mb["actor_memory"]))
        q_loss = sequence_critic_losses(
            qf, qf_target, log_probs, mb, obs, seq, rewards, alpha, gamma, branches
        )
        self._critic_backward(q_loss)
        # -- actor, with the critics just updated
        policy_loss, entropy, value = sequence_actor_loss(
            qf, log_probs[:, :-1], mb, obs, alpha, branches
        )
        self._actor_step(policy_loss)
        self._finish_update(q_loss.detach(), policy_loss, entropy, alpha, value)
