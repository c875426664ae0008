"""What PPO does differently with ``network_settings.memory`` (ML-Agents' recurrent PPO).

:class:`RecurrentRollout` is the on-policy loop's companion for a
:class:`~evtrain.trainers.networks.recurrent.RecurrentActorCritic`; the update's half is
:func:`sequence_minibatches` and :func:`evaluate_sequences`, which an algorithm runs on the
:class:`~evtrain.trainers.algorithm.Sequences` of its batch:

* **Rollout.**  The policy and the critic step together, each carrying each environment's
  memory from step to step; both memories are recorded at every step, and zeroed where an
  episode ends (not where ``time_horizon`` only cuts a trajectory).  The critic values each
  step with the memory it has there, and the final observation of a time-limited episode
  with the memory after its last step, so GAE sees the values the rollout had.  The
  memories carry over from one rollout to the next, as the environments do.
* **Update.**  The rollout is laid out in sequences of ``sequence_length``
  (:func:`~evtrain.trainers.networks.memory.sequence_layout`: trajectories split at episode ends and
  ``time_horizon`` cuts, the last sequence of each padded at its end).  Each epoch shuffles
  the sequences and takes minibatches of ``batch_size / sequence_length`` of them (at
  least one), as ML-Agents does; a remainder too small for a minibatch sits that epoch out.
  The networks run each sequence from the memories recorded at its first step.  Padded
  positions are left out of the minibatch's rows, so every loss is the mean over real steps
  (ML-Agents' masked means).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from evtrain.trainers.algorithm import Sequences
from evtrain.trainers.networks.memory import forget, padded, sequence_layout
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.world import World

Batch = tuple[torch.Tensor, ...]
"""PPO's flat batch (or minibatch) of steps: observations, actions, log-probabilities,
advantages, returns, and whatever else the trainer keeps per step (all ``[steps, ...]``)."""


class RecurrentRollout:
    """The memories of a recurrent PPO agent across rollouts, and the sequences it trains on.

    :param agent: the trainer's networks.
    :param num_envs: environments stepped together.
    :param sequence_length: steps per training sequence.
    """

    def __init__(
        self,
        agent: RecurrentActorCritic,
        num_envs: int,
        sequence_length: int,
    ) -> None:
        self.agent = agent
        self.sequence_length = sequence_length
        device = agent.log_std.device
        zeros = torch.zeros((num_envs, agent.memory_size), device=device)
        self.actor_memory = zeros
        """Each environment's policy memory now (``[N, M]``)."""
        self.critic_memory = zeros.clone()
        """Each environment's critic memory now."""
        self._actor_memories: list[torch.Tensor] = []
        self._critic_memories: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._final_values: list[torch.Tensor] = []
        self.b_actor_memory = self.b_critic_memory = zeros[:0]
        """The memories each step of the last rollout was taken with, ``[T * N, M]``."""

    # -- rollout ---------------------------------------------------------------------------

    def act(
        self, agent: nn.Module, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of both networks of ``agent`` (the trainer's, or with ``threaded`` the copy
        the rollout acts with while the update trains the trainer's) on normalised
        observations ``x``: records the memories they start from and the value, returns
        ``(action, log_prob)``."""
        if not isinstance(agent, RecurrentActorCritic):
            raise TypeError(f"a recurrent rollout acts with a RecurrentActorCritic, got {agent}")
        self._actor_memories.append(self.actor_memory)
        self._critic_memories.append(self.critic_memory)
        action, logprob, self.actor_memory = agent.act(x, self.actor_memory, generator)
        value, self.critic_memory = agent.value(x, self.critic_memory)
        self._values.append(value)
        return action, logprob

    def stepped(
        self,
        agent: nn.Module,
        final: tuple[npt.NDArray[np.bool_], torch.Tensor] | None,
        ended: npt.NDArray[np.bool_],
    ) -> None:
        """After the environments stepped: value the ``final`` observations of the episodes
        that need it (``(which environments, normalised observations)``) with ``agent``'s
        critic (as :meth:`act`) and the memory their episode ended with, then forget the
        memories of the episodes that ``ended``."""
        if final is not None and isinstance(agent, RecurrentActorCritic):
            which, final_x = final
            rows = torch.from_numpy(which).to(final_x.device)
            self._final_values.append(agent.value(final_x, self.critic_memory[rows])[0])
        self.actor_memory = forget(self.actor_memory, ended)
        self.critic_memory = forget(self.critic_memory, ended)

    def values(self, next_x: torch.Tensor) -> torch.Tensor:
        """Every value of the rollout, laid out as the feed-forward trainer computes them in
        one pass: the ``T * N`` steps', the ``N`` next observations', then the final
        observations' in the order :meth:`stepped` got them.  Ends the rollout: stacks the
        recorded memories into :attr:`b_actor_memory` and :attr:`b_critic_memory`."""
        next_value, _ = self.agent.value(next_x, self.critic_memory)
        steps = torch.stack(self._values).flatten(0, 1)
        values = torch.cat([steps, next_value, *self._final_values])
        self.b_actor_memory = torch.stack(self._actor_memories).flatten(0, 1)
        self.b_critic_memory = torch.stack(self._critic_memories).flatten(0, 1)
        self._actor_memories, self._critic_memories = [], []
        self._values, self._final_values = [], []
        return values

    # -- update ----------------------------------------------------------------------------

    def batch(
        self,
        b: Batch,
        b_obs: torch.Tensor,
        breaks: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_],
    ) -> tuple[Batch, Sequences]:
        """The rollout's steps in sequence order: ``b`` (every ``[T * N, ...]`` tensor of the
        rollout, flattened time-major) indexed by the steps of :func:`sequence_layout`, and the
        sequences themselves (padded observations, the memories at their starts) for
        :func:`sequence_minibatches`.

        :param b_obs: ``(T, N, obs)`` normalised observations.
        :param breaks: ``(T, N)`` a trajectory ends after this step (episode end or cut).
        :param valid: ``(T, N)`` this step is a transition.
        """
        layout = sequence_layout(breaks, valid, self.sequence_length)
        device = b_obs.device
        mask = torch.from_numpy(layout.mask).to(device)
        # rows[s, l]: where the step at position l of sequence s is in the returned batch
        rows = torch.cumsum(mask.flatten(), 0).view_as(mask) - 1
        starts = torch.from_numpy(layout.starts).to(device)
        sequences = Sequences(
            obs=padded(b_obs.flatten(0, 1), layout),
            actor_memory=self.b_actor_memory[starts],
            critic_memory=self.b_critic_memory[starts],
            mask=mask,
            rows=rows,
        )
        steps = torch.from_numpy(layout.steps).to(device)
        return tuple(t[steps] for t in b), sequences


def sequence_minibatches(
    b: Batch,
    sequences: Sequences,
    sequences_per_minibatch: int,
    generator: torch.Generator,
    world: World,
) -> Iterator[tuple[Batch, Sequences]]:
    """One epoch's minibatches of a batch in sequence order (:meth:`RecurrentRollout.batch`):
    the steps of shuffled whole sequences, ``sequences_per_minibatch`` sequences per
    minibatch, each with its sequences (what :func:`evaluate_sequences` runs).

    In a distributed run every rank takes as many minibatches as the rank with the fewest
    sequences can fill (each minibatch is an all-reduce).
    """
    count = sequences.mask.shape[0]
    per = sequences_per_minibatch
    num_minibatches = max(1, count // per)
    if world.size > 1:
        counts = world.all_gather(torch.tensor([num_minibatches], device=world.device))
        num_minibatches = int(torch.cat(counts).min())
    perm = torch.randperm(count, generator=generator, device=sequences.mask.device)
    for i in range(num_minibatches):
        chosen = perm[i * per : (i + 1) * per]
        mb_sequences = sequences.select(chosen)
        mb_rows = mb_sequences.rows[mb_sequences.mask]
        yield tuple(t[mb_rows] for t in b), mb_sequences


def evaluate_sequences(
    agent: RecurrentActorCritic,
    sequences: Sequences,
    actions: torch.Tensor,
    *,
    entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(log_prob, entropy, value)`` of a minibatch's ``actions`` under the current networks,
    each sequence run from its recorded memories (see
    :meth:`~evtrain.trainers.networks.recurrent.RecurrentActorCritic.evaluate`)."""
    return agent.evaluate(
        sequences.obs,
        sequences.actor_memory,
        sequences.critic_memory,
        sequences.mask,
        actions,
        entropy=entropy,
        entropy_grad=entropy_grad,
    )
