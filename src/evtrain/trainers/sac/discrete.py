"""Soft Actor-Critic for discrete actions (Christodoulou 2019, "Soft Actor-Critic for Discrete
Action Settings"), in ML-Agents' branches: ``Discrete(n)`` is one branch of ``n`` actions,
``MultiDiscrete([n_1, ..., n_k])`` is ``k`` branches, each an independent categorical.

What changes from the ``Box`` SAC of :mod:`evtrain.trainers.sac` (twin critics with
Polyak-averaged targets, automatic entropy tuning, the same hyperparameters):

- **Critics of every action.**  Each critic takes the observation only and outputs one value
  per action of every branch, ``Q_b(s, .)`` (``sum n_b`` outputs, as ML-Agents' Q networks).
  A taken action ``(a_1, ..., a_k)`` is worth the mean over branches of ``Q_b(s, a_b)``
  (ML-Agents' ``_condense_q_streams``).
- **Exact expectations, no sampling.**  The soft value of ``s'`` is
  ``V(s') = mean_b sum_a pi_b(a|s') [min_k Q'_k,b(s', a) - alpha_b log pi_b(a|s')]``; the
  actor minimises ``sum_b sum_a pi_b(a|s) [alpha_b log pi_b(a|s) - min_k Q_k,b(s, a)]``.  The
  minimum over the two critics is taken per action, as in the paper (ML-Agents' SAC bootstraps
  from a separate state-value network and its actor uses the first critic; evtrain's ``Box``
  SAC and this one bootstrap from the target critics, clipped double-Q).
- **One entropy coefficient per branch**, each tuned so that the branch's entropy
  ``H_b = -sum_a pi_b log pi_b`` (exact) approaches its target: ML-Agents'
  ``discrete_target_entropy_scale * log(n_b)`` with the scale 0.2, or ``target_entropy`` for
  every branch when it is set.

The replay buffer stores an action as its ``k`` indices (float32 columns hold them exactly).

A policy whose observations hold an ``action_mask`` (of every branch, side by side)
(:mod:`evtrain.trainers.networks.masks`) reads it from the observation rows: its
probabilities of masked actions are 0 (the others renormalised), so every expectation above
is over the allowed actions, the soft value ``V(s')`` over those allowed at ``s'`` (the mask
stored with ``s'``), and a masked action is never sampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.trainers.networks.masks import allowed, masked_logits, masked_scores
from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.sac.memory import RecurrentTwinQ
from evtrain.trainers.sac.twin_q import TwinQ
from evtrain.trainers.settings import NetworkSettings

DISCRETE_TARGET_ENTROPY_SCALE = 0.2
"""ML-Agents' ``discrete_target_entropy_scale``: a branch's entropy target is this times the
entropy of the uniform policy, ``log n_b`` ("roughly equal to e-greedy 0.05")."""

DISCRETE_UPDATE_STATS = (
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Losses/Policy Loss",
    "Policy/Entropy",
    "Policy/Discrete Entropy Coeff",
    "Policy/Extrinsic Value Estimate",
)
"""What every discrete update reports, in the order of the ``Box`` SAC's ``UPDATE_STATS``:
the entropy is summed over branches, the coefficient is the branches' mean (ML-Agents'
name)."""


class Branches:
    """The branches of a discrete action space and the per-branch arithmetic on tensors whose
    last dimension holds every branch's actions side by side (``sum n_b`` columns).

    :raises SpaceMismatchError: ``space`` is not ``Discrete`` or ``MultiDiscrete`` (of one
        dimension, starting at 0).
    """

    def __init__(self, space: spaces.Space[Any]) -> None:
        if isinstance(space, spaces.Discrete):
            if int(space.start) != 0:
                raise SpaceMismatchError(f"SAC needs Discrete actions that start at 0, got {space}")
            sizes = [int(space.n)]
        elif isinstance(space, spaces.MultiDiscrete):
            if space.nvec.ndim != 1 or np.any(space.start != 0):
                raise SpaceMismatchError(
                    f"SAC needs a MultiDiscrete of one dimension starting at 0, got {space}"
                )
            sizes = [int(n) for n in space.nvec]
        else:
            raise SpaceMismatchError(f"not a discrete action space: {space}")
        self.multi = isinstance(space, spaces.MultiDiscrete)
        """``MultiDiscrete`` (actions ``[B, k]``) or ``Discrete`` (actions ``[B]``)."""
        self.sizes = tuple(sizes)
        """``n_b`` of each branch."""
        self.total = sum(sizes)
        """Columns of every branch's actions together."""
        self.offsets = torch.tensor(np.cumsum([0, *sizes[:-1]]), dtype=torch.int64)
        """Each branch's first column."""
        self.of_column = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        """The branch of each column."""
        # Summing each branch's columns is a product with this 0/1 matrix: one kernel for any
        # number of branches.
        self.summing = (self.of_column[:, None] == torch.arange(len(sizes))).to(torch.float32)

    def __len__(self) -> int:
        return len(self.sizes)

    def target_entropy(self, target: float | None) -> torch.Tensor:
        """Each branch's entropy target: ``target`` for all, or ML-Agents'
        ``0.2 * log n_b``."""
        if target is not None:
            return torch.full((len(self),), float(target))
        return torch.tensor([DISCRETE_TARGET_ENTROPY_SCALE * math.log(n) for n in self.sizes])

    def log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Each branch's log-probabilities of its logits, ``[..., sum n_b]``."""
        if len(self) == 1:
            return torch.log_softmax(logits, dim=-1)
        parts = torch.split(logits, list(self.sizes), dim=-1)
        return torch.cat([torch.log_softmax(p, dim=-1) for p in parts], dim=-1)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Each branch's sum of its columns: ``[..., sum n_b]`` to ``[..., k]``."""
        if len(self) == 1:
            return x.sum(-1, keepdim=True)
        return x @ self.summing.to(x.device, x.dtype)

    def per_column(self, x: torch.Tensor) -> torch.Tensor:
        """A value per branch ``[..., k]`` repeated over the branch's columns."""
        return x[..., self.of_column.to(x.device)]

    def gather(self, x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The column of each branch's action: ``x`` ``[..., sum n_b]`` and integer
        ``actions`` ``[..., k]`` to ``[..., k]``."""
        return x.gather(-1, actions + self.offsets.to(actions.device))

    def sample(
        self,
        log_probs: torch.Tensor,
        generator: torch.Generator,
        ok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One action index per branch, ``[..., k]`` int64, drawn from ``log_probs``; never
        an action ``ok`` (``Discrete``'s allowed actions, if masked) says is not allowed."""
        # Gumbel-max: argmax(log p + Gumbel noise) is an exact sample of Categorical(p), and
        # cheaper than torch.multinomial.  Gumbel = -log(Exponential(1)).
        noise = torch.empty_like(log_probs).exponential_(generator=generator)
        return self.argmax(masked_scores(log_probs - noise.log(), ok))

    def argmax(self, x: torch.Tensor) -> torch.Tensor:
        """Each branch's column of the largest value, ``[..., k]`` int64."""
        if len(self) == 1:
            return x.argmax(-1, keepdim=True)
        return torch.stack([p.argmax(-1) for p in torch.split(x, list(self.sizes), dim=-1)], dim=-1)

    def uniform(
        self, rng: np.random.Generator, count: int, mask: npt.NDArray[Any] | None = None
    ) -> npt.NDArray[np.int64]:
        """``count`` uniformly random actions, ``[count, k]`` indices; with ``mask`` (the
        ``[count, sum n_b]`` action masks), of the allowed actions only."""
        if mask is None:
            return rng.integers(0, self.sizes, size=(count, len(self)))
        ok = self.allowed(torch.from_numpy(np.asarray(mask, dtype=np.float32))).numpy()
        # the largest of uniform scores among the allowed actions: a uniform draw of them
        scores = np.where(ok, rng.random(ok.shape), -1.0)
        picked = self.argmax(torch.from_numpy(scores)).numpy()
        return picked.astype(np.int64)

    def allowed(self, mask: torch.Tensor) -> torch.Tensor:
        """The allowed actions ``[..., sum n_b]`` of raw mask entries (each branch's zeros:
        all of it allowed; :func:`~evtrain.trainers.networks.masks.allowed`)."""
        if len(self) == 1:
            return allowed(mask)
        return torch.cat([allowed(p) for p in torch.split(mask, list(self.sizes), dim=-1)], -1)

    def to_env(self, actions: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Stored actions ``[N, k]`` (indices, any dtype) as the vector environment takes
        them: ``[N]`` for ``Discrete``, ``[N, k]`` for ``MultiDiscrete``."""
        indices = np.asarray(actions).astype(np.int64)
        return indices if self.multi else indices[:, 0]


# -- the losses --------------------------------------------------------------------------------


def soft_value(
    q_next: torch.Tensor, log_probs: torch.Tensor, alpha: torch.Tensor, branches: Branches
) -> torch.Tensor:
    """``V(s') = mean_b sum_a pi_b(a|s') [min_k Q'_k,b(s', a) - alpha_b log pi_b(a|s')]``.

    :param q_next: both target critics' values of every action, ``[2, ..., sum n_b]``.
    :param log_probs: the policy's log-probabilities at ``s'``, ``[..., sum n_b]``.
    :param alpha: each branch's entropy coefficient, ``[k]``.
    :return: ``[...]``.
    """
    inner = q_next.amin(0) - branches.per_column(alpha) * log_probs
    return branches.sum(log_probs.exp() * inner).mean(-1)


def taken_q(q: torch.Tensor, actions: torch.Tensor, branches: Branches) -> torch.Tensor:
    """``Q_k(s, a) = mean_b Q_k,b(s, a_b)`` of taken actions.

    :param q: both critics' values of every action, ``[2, ..., sum n_b]``.
    :param actions: integer indices ``[..., k]``.
    :return: ``[2, ...]``.
    """
    return branches.gather(q, actions.expand(q.shape[0], *actions.shape)).mean(-1)


def policy_objective(
    log_probs: torch.Tensor, min_q: torch.Tensor, alpha: torch.Tensor, branches: Branches
) -> torch.Tensor:
    """The actor's loss of each state, ``sum_b sum_a pi_b(a|s) [alpha_b log pi_b(a|s) -
    min_k Q_k,b(s, a)]`` (to be averaged; gradients flow through ``log_probs`` only).

    :param log_probs: ``[..., sum n_b]``; ``min_q``: the critics' minimum, ``[..., sum n_b]``.
    :return: ``[...]``.
    """
    inner = branches.per_column(alpha) * log_probs - min_q
    return branches.sum(log_probs.exp() * inner).sum(-1)


def entropies(log_probs: torch.Tensor, branches: Branches) -> torch.Tensor:
    """Each branch's entropy ``-sum_a pi_b log pi_b``, ``[..., k]``."""
    return -branches.sum(log_probs.exp() * log_probs)


def expected_q(log_probs: torch.Tensor, min_q: torch.Tensor, branches: Branches) -> torch.Tensor:
    """``mean_b sum_a pi_b(a|s) min_k Q_k,b(s, a)``, the policy's value estimate, ``[...]``."""
    return branches.sum(log_probs.exp() * min_q).mean(-1)


def critic_losses(
    qf: TwinQ,
    qf_target: TwinQ,
    actor: CategoricalActor,
    batch: tuple[torch.Tensor, ...],
    alpha: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """Each critic's mean squared error to the soft Bellman target
    ``y = r + gamma (1 - terminated) V(s')`` (:func:`soft_value` of the target critics), ``[2]``.

    :param batch: ``(obs, actions, rewards, next_obs, terminated)``, observations normalised,
        actions as stored (``[B, k]`` indices, any dtype).
    """
    mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated = batch
    with torch.no_grad():
        q_next = qf_target.action_values(mb_next_obs)
        v_next = soft_value(q_next, actor.log_probs(mb_next_obs), alpha, actor.branches)
        y = mb_rewards + gamma * (1.0 - mb_terminated) * v_next
    q = taken_q(qf.action_values(mb_obs), mb_actions.long(), actor.branches)
    return (q - y).square().mean(1)


def actor_loss(
    qf: TwinQ, actor: CategoricalActor, mb_obs: torch.Tensor, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(policy loss, each branch's mean entropy [k], the value estimate)`` of a minibatch of
    normalised observations; only the policy loss has gradients (the actor's)."""
    log_probs = actor.log_probs(mb_obs)
    with torch.no_grad():  # the critics' values are constants of the actor's loss
        min_q = qf.action_values(mb_obs).amin(0)
    policy_loss = policy_objective(log_probs, min_q, alpha, actor.branches).mean()
    with torch.no_grad():
        entropy = entropies(log_probs, actor.branches).mean(0)
        value = expected_q(log_probs, min_q, actor.branches).mean()
    return policy_loss, entropy, value


def sequence_critic_losses(
    qf: RecurrentTwinQ,
    qf_target: RecurrentTwinQ,
    log_probs: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    obs: torch.Tensor,
    seq: torch.Tensor,
    rewards: torch.Tensor,
    alpha: torch.Tensor,
    gamma: float,
    branches: Branches,
) -> torch.Tensor:
    """:func:`critic_losses` of recurrent critics on sequences, the means over real steps.

    :param log_probs: the policy's over ``seq`` (``s_0`` then each step's ``s'``),
        ``[S, L + 1, sum n_b]``.
    :param batch: the sampled sequences (``actions``, ``terminated``, ``mask``,
        ``critic_memory``); ``obs``: their normalised observations; ``rewards``: theirs.
    """
    mask = batch["mask"].to(torch.float32)
    with torch.no_grad():
        features = [f[:, 1:] for f in qf_target.features(seq, batch["critic_memory"])]
        q_next = qf_target.action_values(features)
        v_next = soft_value(q_next, log_probs[:, 1:], alpha, branches)
        y = rewards + gamma * (1.0 - batch["terminated"]) * v_next
    q_all = qf.action_values(qf.features(obs, batch["critic_memory"]))
    q = taken_q(q_all, batch["actions"].long(), branches)
    return ((q - y).square() * mask).sum((1, 2)) / mask.sum()


def sequence_actor_loss(
    qf: RecurrentTwinQ,
    log_probs: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    obs: torch.Tensor,
    alpha: torch.Tensor,
    branches: Branches,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`actor_loss` of a recurrent policy on sequences (``log_probs`` at each step's
    ``s``, ``[S, L, sum n_b]``), the means over real steps."""
    mask = batch["mask"].to(torch.float32)
    count = mask.sum()
    with torch.no_grad():
        min_q = qf.action_values(qf.features(obs, batch["critic_memory"])).amin(0)
    policy_loss = (policy_objective(log_probs, min_q, alpha, branches) * mask).sum() / count
    with torch.no_grad():
        entropy = (entropies(log_probs, branches) * mask[..., None]).sum((0, 1)) / count
        value = (expected_q(log_probs, min_q, branches) * mask).sum() / count
    return policy_loss, entropy, value


# -- the networks ------------------------------------------------------------------------------


class CategoricalActor(nn.Module):
    """``pi_b(.|s)`` of every branch: one MLP whose output layer holds every branch's logits.

    :param encoder: the image encoders in front of the hidden layers (``obs_dim`` is then
        their output's width), which leave an action mask out; ``None`` for vector
        observations.
    :param mask: the action mask's columns of an observation row (every branch's; see the
        module's docs); ``None`` without one.
    """

    def __init__(
        self,
        obs_dim: int,
        branches: Branches,
        network: NetworkSettings,
        generator: torch.Generator,
        encoder: nn.Module | None = None,
        mask: slice | None = None,
    ) -> None:
        super().__init__()
        self.branches = branches
        # out_gain 0.01: an initial policy close to uniform in every branch.
        self.net = MLP(obs_dim, branches.total, network, out_gain=0.01, generator=generator)
        self.encoder = encoder
        self.mask = mask

    def allowed_actions(self, x: torch.Tensor) -> torch.Tensor | None:
        """The allowed actions of observation rows ``x``; ``None`` without a mask."""
        return None if self.mask is None else self.branches.allowed(x[..., self.mask])

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Every branch's logits of normalised observations, ``[B, sum n_b]``, masked actions'
        at :data:`~evtrain.trainers.networks.masks.MASKED_LOGIT`."""
        out: torch.Tensor = self.net(x if self.encoder is None else self.encoder(x))
        return masked_logits(out, self.allowed_actions(x))

    def log_probs(self, x: torch.Tensor) -> torch.Tensor:
        """Every branch's log-probabilities, ``[B, sum n_b]``."""
        return self.branches.log_softmax(self.logits(x))

    def forward(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``(action indices [B, k], log-probabilities [B, sum n_b])`` for normalised
        observations (the ``Box`` actor's call, for the code that acts)."""
        log_probs = self.log_probs(x)
        action = self.branches.sample(log_probs.detach(), generator, self.allowed_actions(x))
        return action, log_probs

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """Each branch's most likely action, ``[B, k]``."""
        return self.branches.argmax(self.logits(x))
