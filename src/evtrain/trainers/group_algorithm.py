"""The protocol of an on-policy algorithm with a centralised critic (``poca``, ``mappo``): the
group loop hands it a :class:`GroupRollout` to value, since one critic sees the whole group.
The rest of the contract is :class:`~evtrain.trainers.algorithm.OnPolicyAlgorithm`'s."""

from __future__ import annotations

from typing import Protocol

import attrs
import numpy as np
import numpy.typing as npt
import torch

from evtrain.trainers.algorithm import OnPolicyAlgorithm, OnPolicyBatch


@attrs.frozen(kw_only=True)
class GroupRollout:
    """A group trainer's rollout (``poca``, ``mappo``), as the group loop hands it to its
    algorithm to value: ``T`` steps of ``C`` environment copies of ``G`` agent slots
    (``N = C * G``), rows of whole groups (``T * C`` of them, time-major).  Observations are
    normalised."""

    obs: torch.Tensor
    """``(T * C, G, D)`` each group's observations."""
    actions: torch.Tensor
    """``(T * C, G)`` discrete or ``(T * C, G, A)`` continuous actions, as sampled."""
    logprobs: torch.Tensor
    """``(T * C, G)`` their log-probabilities under the rollout's policy."""
    active: torch.Tensor
    """``(T * C, G)`` booleans: the agent acted (``infos["active"]``)."""
    next_obs: torch.Tensor
    """``(C, G, D)`` the groups after the rollout."""
    next_present: torch.Tensor
    """``(C, G)`` who is in them (acts next)."""
    final_steps: npt.NDArray[np.intp]
    """``(M,)`` the steps at which a copy's episode was truncated."""
    final_copies: npt.NDArray[np.intp]
    """``(M,)`` which copies."""
    final_obs: torch.Tensor
    """``(M, G, D)`` their final observations (zeros for agents no longer there)."""
    final_present: torch.Tensor
    """``(M, G)`` the agents still in them at the end."""
    rewards: npt.NDArray[np.float32]
    """``(T, N)`` each slot's own rewards (``extrinsic.strength`` applied)."""
    group_rewards: npt.NDArray[np.float32]
    """``(T, C)`` each copy's group reward (``extrinsic.strength`` not applied)."""
    episode_over: npt.NDArray[np.bool_]
    """``(T, C)`` where each copy's episode ended: the only cuts of a group's trajectory."""
    valid: npt.NDArray[np.bool_]
    """``(T, N)`` ``active`` as the loop recorded it."""
    step: int
    """The global step the rollout ended at."""


class GroupOnPolicyAlgorithm(OnPolicyAlgorithm, Protocol):
    """An on-policy algorithm with a centralised critic (``poca``, ``mappo``): the group loop
    cannot value its rollout with :attr:`~OnPolicyAlgorithm.agent`, so the algorithm values
    it and computes its targets (with the loop's GAE,
    :func:`evtrain.trainers.loops.group_rollout.lambda_returns`)."""

    def batch(self, rollout: GroupRollout) -> tuple[OnPolicyBatch, dict[str, float]]:
        """``rollout`` valued: the batch :meth:`~OnPolicyAlgorithm.update` reads (rows of whole
        groups, ``values`` the critic's estimates, ``active`` set), and the value estimates to
        report (``Policy/Extrinsic Value Estimate``, ...)."""
        ...
