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

What a group trainer's ``_setup`` calls: :meth:`GroupRollout._build_group_trainer`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from evtrain.events.stats import StatsAggregationMethod
from evtrain.multiagent.copies import EPISODE_OVER, GROUP_REWARD
from evtrain.trainers.envs import final_observations
from evtrain.trainers.group_settings import GroupSettings
from evtrain.trainers.loops.gae import compute_gae
from evtrain.trainers.loops.on_policy import Finals, OnPolicyTrainer
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.threaded import ActingCopy

GROUP_CUMULATIVE_REWARD = "Environment/Group Cumulative Reward"
"""The stat of a copy episode's summed group reward (ML-Agents' name)."""
CRITIC_CHUNK = 4096
"""Groups per critic pass when a whole rollout is valued (bounds the memory of attention)."""

FinalGroups = tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], torch.Tensor, torch.Tensor]
"""(steps, copies, ``(M, G, D)`` final observations, ``(M, G)`` present) of truncated copies."""


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


class GroupRollout(OnPolicyTrainer):
    """Rollouts of agent slots in groups (see the module's docstring)."""

    hp: GroupSettings
    agent: ActorCritic
    critic: nn.Module
    group_size: int
    num_groups: int

    @abc.abstractmethod
    def _build_critic(self) -> nn.Module:
        """The algorithm's critic, on the CPU (called once the actor exists)."""

    # -- building ---------------------------------------------------------------------------

    def _build_group_trainer(self) -> None:
        """The actor, the critic and the rollout's arrays: a group trainer's ``_setup``."""
        settings, envs = self.settings, self.envs
        if self.autoreset.next_step:
            raise ValueError(
                f"behavior {self.behavior_name!r}: trainer_type {settings.trainer_type} needs a "
                "vector environment in autoreset_mode SAME_STEP (evtrain builds one; see "
                "evtrain.trainers.make_vector_env)"
            )
        self.group_size = group_size_of(envs)
        self.num_groups = self.num_envs // self.group_size
        self.hp = self._group_hyperparameters()
        self.num_steps = self.hp.buffer_size // self.num_envs
        self.action_space = envs.single_action_space
        self.layout = behavior_layout(
            envs.single_observation_space,
            settings.network_settings,
            self.behavior_name,
            self.action_space,
        )
        # Each agent acts on its own observation: PPO's policy (its own value head unused),
        # so the export and the action handling (action masks included) are PPO's.
        self.agent = ActorCritic(
            envs.single_observation_space,
            self.action_space,
            settings.network_settings,
            self.init_generator,
        ).to(self.device)
        self.critic = self._build_critic().to(self.device)
        self.memory = None
        self.signals = {}
        self.provider_rewards = []
        self._provider_returns = np.zeros((0, self.num_envs), dtype=np.float64)
        self._allocate_rollout()
        T, C = self.num_steps, self.num_groups
        self.group_rewards = np.zeros((T, C), dtype=np.float32)
        """Each copy's group reward at each step of the rollout."""
        self.episode_over = np.zeros((T, C), dtype=np.bool_)
        """Where each copy's episode ended: the only cuts of a group's trajectory."""
        self._alive = np.ones(self.num_envs, dtype=np.bool_)
        """Which slots' agents are in their episode at ``next_obs``, as far as the last step
        tells (an agent that appears later is not known before it acts), for environments
        that do not say (``envs.acting``)."""
        self._group_return = np.zeros(C, dtype=np.float64)
        self._acting = ActingCopy(self.agent) if settings.threaded else None

    def _group_hyperparameters(self) -> GroupSettings:
        hp: GroupSettings = self.settings.hyperparameters  # type: ignore[assignment]
        buffer_size = hp.rollout_buffer_size(self.num_envs)
        return hp if buffer_size == hp.buffer_size else attrs.evolve(hp, buffer_size=buffer_size)

    # -- stepping -----------------------------------------------------------------------------

    def _step_envs(self, t: int, action: torch.Tensor) -> Finals | None:
        """Step every slot, record row ``t`` (``valid`` is ``active``); returns the normalised
        final observations of the agents still in a copy whose episode a time limit ended."""
        next_obs, reward, terminated, truncated, infos = self._env_step(action)
        dones = terminated | truncated
        active = self.autoreset.observe(dones, infos)  # infos["active"], where given
        group_reward, over = self._group_infos(infos, dones)
        self.valid[t] = active
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        self.group_rewards[t] = group_reward
        self.episode_over[t] = over
        self._record_step(reward, dones, active)
        self._record_infos(infos, dones, active)
        self._record_groups(group_reward, over)
        slot_over = np.repeat(over, self.group_size)
        self._alive = (active & ~dones) | slot_over
        self.next_obs = next_obs
        cut = truncated & ~terminated & slot_over
        if not cut.any():
            return None
        final = final_observations(infos, cut)
        return t, cut, self.agent.normalizer(self.layout.tensor(final, self.device))

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

    def _record_groups(
        self, group_reward: npt.NDArray[np.float32], over: npt.NDArray[np.bool_]
    ) -> None:
        """Sum each copy's group rewards; report the copies whose episode ended."""
        self._group_return += group_reward
        if over.any():
            for c in np.flatnonzero(over):
                self.reporter.add_stat(
                    GROUP_CUMULATIVE_REWARD,
                    float(self._group_return[c]),
                    StatsAggregationMethod.HISTOGRAM,
                )
            self._group_return[over] = 0.0

    # -- group views of the rollout --------------------------------------------------------

    def _groups(self, slots: torch.Tensor) -> torch.Tensor:
        """A ``(T, N, ...)`` rollout tensor as ``(T * C, G, ...)``: one row per group step."""
        return slots.reshape(-1, self.group_size, *slots.shape[2:])

    def _active(self) -> torch.Tensor:
        """The rollout's ``active`` as ``(T * C, G)`` booleans on the device (a copy)."""
        return self._groups(torch.tensor(self.valid, device=self.device))

    def _next_groups(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The normalised observations after the rollout as ``(C, G, D)``, and who is there
        (``envs.acting``: the agents that act next, where the environment says)."""
        next_x = self.agent.normalizer(self.layout.tensor(self.next_obs, self.device))
        acting = getattr(self.envs, "acting", None)
        present = self._alive if acting is None else np.asarray(acting, dtype=np.bool_)
        alive = torch.from_numpy(present).to(self.device)
        return next_x.reshape(self.num_groups, self.group_size, -1), self._groups(alive[None])

    def _final_groups(self, finals: list[Finals]) -> FinalGroups:
        """The final observations of truncated copies, one group per copy episode: the
        agents still in it at its end present, the others zeros and absent."""
        C, G = self.num_groups, self.group_size
        width = self.b_obs.shape[-1]
        if not finals:
            empty = torch.zeros(0, G, width, device=self.device)
            none = np.zeros(0, dtype=np.intp)
            return none, none, empty, empty.new_zeros(0, G, dtype=torch.bool)
        steps, copies, groups, presents = [], [], [], []
        for t, which, final_x in finals:
            cut = which.reshape(C, G)
            ended = np.flatnonzero(cut.any(1))
            present = torch.from_numpy(cut[ended]).to(self.device)
            x = torch.zeros(len(ended), G, width, device=self.device)
            x[present] = final_x  # row-major: the slots in flatnonzero(which)'s order
            steps.append(np.full(len(ended), t, dtype=np.intp))
            copies.append(ended)
            groups.append(x)
            presents.append(present)
        return np.concatenate(steps), np.concatenate(copies), torch.cat(groups), torch.cat(presents)

    @staticmethod
    def _chunked(
        fn: Callable[..., torch.Tensor], *tensors: torch.Tensor, rows: int = CRITIC_CHUNK
    ) -> torch.Tensor:
        """``fn(*tensors)`` over the rows in chunks of ``rows``, concatenated."""
        total = tensors[0].shape[0]
        if total <= rows:
            return fn(*tensors)
        return torch.cat([fn(*(x[i : i + rows] for x in tensors)) for i in range(0, total, rows)])

    def _lambda_returns(
        self,
        rewards: npt.NDArray[np.float32],
        values: npt.NDArray[np.float32],
        dones: npt.NDArray[np.bool_],
        bootstrap: npt.NDArray[np.float32],
        next_v: npt.NDArray[np.float32],
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """GAE advantages and lambda-returns of ``(T, K)`` trajectories, cut at ``dones`` and
        every ``time_horizon`` steps (bootstrapped from the next value there, as PPO's)."""
        horizon = self.settings.time_horizon
        if horizon < self.num_steps:
            following = np.concatenate([values[1:], next_v[None]])
            cuts = np.zeros_like(dones)
            cuts[horizon - 1 : -1 : horizon] = True
            cuts &= ~dones
            bootstrap = np.where(cuts, following, bootstrap)
            dones = dones | cuts
        gamma = self.settings.reward_signals.extrinsic.gamma
        return compute_gae(rewards, values, dones, bootstrap, next_v, gamma, self.hp.lambd)
