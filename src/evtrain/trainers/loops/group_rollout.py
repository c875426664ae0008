"""The on-policy loop seen by groups of agents: what ``poca`` and ``mappo`` collect.

A group trainer steps a vector environment of **agent slots** (docs/multi-agent.md): slot ``i``
belongs to environment copy ``i // group_size``, and the ``group_size`` slots of one copy are
one group (``getattr(envs, "group_size", 1)``; a plain Gymnasium environment is a group of one
per copy).  Beside what :class:`~evtrain.trainers.loops.on_policy.OnPolicyTrainer` records,
each step's ``infos`` say

* ``active`` (per slot): the slot's agent acted in this step.  A step with ``active`` false is
  no experience: it is not counted, not in the episode statistics, and trains no policy; an
  absent key means every slot acted;
* ``group_reward`` (per slot, equal within a copy): the environment's reward to the whole
  group this step; absent: 0;
* ``episode_over`` (per slot, equal within a copy): the copy's episode ended this step; absent
  (only allowed for groups of one): the slot's own ``terminated | truncated``.

The rollout keeps them as ``(T, N)`` / ``(T, C)`` arrays (``N`` slots, ``C`` copies) and cuts a
group's trajectory only where its copy's episode ends (or at ``time_horizon``): an agent that
leaves early is no cut, so the returns of its last steps still hold what the group earns
later.  A copy's episode is truncated (and bootstrapped from the value of its final
observations) when one of the agents still in it was truncated rather than terminated.

``Environment/Group Cumulative Reward`` (ML-Agents' stat) is the sum of a copy's group rewards
over its episode, one value per copy episode; each agent's own rewards make
``Environment/Cumulative Reward`` as in every trainer.

The on-policy loop of a group trainer has a :class:`GroupSteps` (its group bookkeeping) and
hands each rollout to its algorithm as a
:class:`~evtrain.trainers.group_algorithm.GroupRollout`; the
algorithm values it with its centralised critic and computes its targets with
:func:`lambda_returns`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from evtrain.bus.reporter import StatsReporter
from evtrain.events.stats import StatsAggregationMethod
from evtrain.multiagent.copies import EPISODE_OVER, GROUP_REWARD
from evtrain.trainers.algorithm import OnPolicyBatch
from evtrain.trainers.group_algorithm import GroupOnPolicyAlgorithm, GroupRollout
from evtrain.trainers.loops.gae import compute_gae
from evtrain.trainers.loops.rollout import Finals, Rollout

GROUP_CUMULATIVE_REWARD = "Environment/Group Cumulative Reward"
"""The stat of a copy episode's summed group reward (ML-Agents' name)."""
CRITIC_CHUNK = 4096
"""Groups per critic pass when a whole rollout is valued (bounds the memory of attention)."""


def group_size_for(envs: Any, behavior_name: str, trainer_type: str, next_step: bool) -> int:
    """The group size of a group trainer's environment (:func:`group_size_of`).

    :raises ValueError: the environment autoresets in NEXT_STEP mode.
    """
    if next_step:
        raise ValueError(
            f"behavior {behavior_name!r}: trainer_type {trainer_type} needs a vector "
            "environment in autoreset_mode SAME_STEP (evtrain builds one; see "
            "evtrain.trainers.make_vector_env)"
        )
    return group_size_of(envs)


def group_size_of(envs: Any) -> int:
    """``envs.group_size`` (1 without one), checked against ``envs.num_envs``.

    :raises ValueError: not a positive integer dividing the number of slots.
    """
    size = getattr(envs, "group_size", 1)
    if not isinstance(size, int) or size < 1 or envs.num_envs % size:
        raise ValueError(
            f"envs.group_size must be a positive integer dividing num_envs ({envs.num_envs}), "
            f"got {size!r}: the slots of one environment copy are one group"
        )
    return size


class GroupSteps:
    """A group trainer's bookkeeping beside the on-policy loop's: each copy's group rewards and
    episode ends in the rollout, who is still in an episode, the group returns reported.

    :param num_steps: the rollout's length.
    :param num_envs: agent slots.
    :param group_size: slots per environment copy.
    """

    def __init__(
        self,
        behavior_name: str,
        reporter: StatsReporter,
        num_steps: int,
        num_envs: int,
        group_size: int,
    ) -> None:
        self.behavior_name = behavior_name
        self.reporter = reporter
        self.group_size = group_size
        self.num_groups = C = num_envs // group_size
        self.group_rewards = np.zeros((num_steps, C), dtype=np.float32)
        """Each copy's group reward at each step of the rollout."""
        self.episode_over = np.zeros((num_steps, C), dtype=np.bool_)
        """Where each copy's episode ended: the only cuts of a group's trajectory."""
        self.alive = np.ones(num_envs, dtype=np.bool_)
        """Which slots' agents are in their episode at the loop's ``next_obs``, as far as the
        last step tells (an agent that appears later is not known before it acts), for
        environments that do not say (``envs.acting``)."""
        self._group_return = np.zeros(C, dtype=np.float64)
        self.estimates: dict[str, float] = {}
        """The algorithm's value estimates of the last rollout (reported after its update)."""

    def record(
        self,
        t: int,
        infos: Mapping[str, Any],
        dones: npt.NDArray[np.bool_],
        active: npt.NDArray[np.bool_],
    ) -> npt.NDArray[np.bool_]:
        """Record row ``t``'s group rewards and episode ends; returns, per slot, whether its
        copy's episode ended (a truncated agent still in such a copy is valued at its end)."""
        group_reward, over = self._group_infos(infos, dones)
        self.group_rewards[t] = group_reward
        self.episode_over[t] = over
        self._group_return += group_reward
        if over.any():
            for c in np.flatnonzero(over):
                self.reporter.add_stat(
                    GROUP_CUMULATIVE_REWARD,
                    float(self._group_return[c]),
                    StatsAggregationMethod.HISTOGRAM,
                )
            self._group_return[over] = 0.0
        slot_over = np.repeat(over, self.group_size)
        self.alive = (active & ~dones) | slot_over
        return slot_over

    def _group_infos(
        self, infos: Mapping[str, Any], dones: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """``(group reward per copy, episode over per copy)`` of a step."""
        G = self.group_size
        group_reward = np.zeros(self.num_groups, dtype=np.float32)
        if GROUP_REWARD in infos:
            group_reward = np.asarray(infos[GROUP_REWARD], dtype=np.float32)[::G]
        if EPISODE_OVER in infos:
            over = np.asarray(infos[EPISODE_OVER], dtype=np.bool_)[::G]
        elif G == 1:
            over = dones
        else:
            raise ValueError(
                f"behavior {self.behavior_name!r}: a vector environment with group_size {G} "
                "must give infos['episode_over'] at every step (which copies ended their "
                "episode; see docs/multi-agent.md)"
            )
        return group_reward, over

    def batch(
        self,
        algorithm: GroupOnPolicyAlgorithm,
        rollout: Rollout,
        next_x: torch.Tensor,
        acting: Any,
        finals: list[Finals],
        step: int,
    ) -> OnPolicyBatch:
        """The ended ``rollout`` in rows of whole groups, valued by ``algorithm``: its batch
        (its value estimates kept in :attr:`estimates`).

        :param next_x: ``(N, D)`` the normalised observations after the rollout.
        :param acting: ``envs.acting`` (the agents that act next), or ``None`` where the
            environment does not say.
        """
        device = rollout.device
        present = self.alive if acting is None else np.asarray(acting, dtype=np.bool_)
        alive = torch.from_numpy(present).to(device)
        width = rollout.b_obs.shape[-1]
        steps, copies, final_x, final_present = self._final_groups(finals, width, device)
        batch, self.estimates = algorithm.batch(
            GroupRollout(
                obs=self.groups(rollout.b_obs),
                actions=self.groups(rollout.b_actions),
                logprobs=self.groups(rollout.b_logprobs),
                active=self.groups(torch.tensor(rollout.valid, device=device)),
                next_obs=next_x.reshape(self.num_groups, self.group_size, -1),
                next_present=self.groups(alive[None]),
                final_steps=steps,
                final_copies=copies,
                final_obs=final_x,
                final_present=final_present,
                rewards=rollout.rewards,
                group_rewards=self.group_rewards,
                episode_over=self.episode_over,
                valid=rollout.valid,
                step=step,
            )
        )
        return batch

    def groups(self, slots: torch.Tensor) -> torch.Tensor:
        """A ``(T, N, ...)`` rollout tensor as ``(T * C, G, ...)``: one row per group step."""
        return slots.reshape(-1, self.group_size, *slots.shape[2:])

    def _final_groups(
        self, finals: list[Finals], width: int, device: torch.device
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], torch.Tensor, torch.Tensor]:
        """The final observations of truncated copies, one group per copy episode: the
        agents still in it at its end present, the others zeros and absent."""
        C, G = self.num_groups, self.group_size
        if not finals:
            empty = torch.zeros(0, G, width, device=device)
            none = np.zeros(0, dtype=np.intp)
            return none, none, empty, empty.new_zeros(0, G, dtype=torch.bool)
        steps, copies, groups, presents = [], [], [], []
        for t, which, final_x in finals:
            cut = which.reshape(C, G)
            ended = np.flatnonzero(cut.any(1))
            present = torch.from_numpy(cut[ended]).to(device)
            x = torch.zeros(len(ended), G, width, device=device)
            x[present] = final_x  # row-major: the slots in flatnonzero(which)'s order
            steps.append(np.full(len(ended), t, dtype=np.intp))
            copies.append(ended)
            groups.append(x)
            presents.append(present)
        return np.concatenate(steps), np.concatenate(copies), torch.cat(groups), torch.cat(presents)


def chunked(
    fn: Callable[..., torch.Tensor], *tensors: torch.Tensor, rows: int = CRITIC_CHUNK
) -> torch.Tensor:
    """``fn(*tensors)`` over the rows in chunks of ``rows``, concatenated."""
    total = tensors[0].shape[0]
    if total <= rows:
        return fn(*tensors)
    return torch.cat([fn(*(x[i : i + rows] for x in tensors)) for i in range(0, total, rows)])


def lambda_returns(
    rewards: npt.NDArray[np.float32],
    values: npt.NDArray[np.float32],
    dones: npt.NDArray[np.bool_],
    bootstrap: npt.NDArray[np.float32],
    next_v: npt.NDArray[np.float32],
    *,
    gamma: float,
    lambd: float,
    time_horizon: int,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """GAE advantages and lambda-returns of ``(T, K)`` trajectories, cut at ``dones`` and
    every ``time_horizon`` steps (bootstrapped from the next value there, as PPO's)."""
    num_steps = rewards.shape[0]
    if time_horizon < num_steps:
        following = np.concatenate([values[1:], next_v[None]])
        cuts = np.zeros_like(dones)
        cuts[time_horizon - 1 : -1 : time_horizon] = True
        cuts &= ~dones
        bootstrap = np.where(cuts, following, bootstrap)
        dones = dones | cuts
    return compute_gae(rewards, values, dones, bootstrap, next_v, gamma, lambd)
