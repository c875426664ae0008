"""The on-policy loop (ML-Agents' ``on_policy_trainer``, SB3's ``OnPolicyAlgorithm``): collect a
rollout of ``buffer_size`` steps, value it, compute advantages with GAE and hand the batch to the
algorithm (:class:`~evtrain.trainers.algorithm.OnPolicyAlgorithm`), which the loop *has*: an
on-policy trainer is this loop with its ``algorithm_type`` (PPO's:
:class:`~evtrain.trainers.ppo.trainer.PPOTrainer`).  The loop also owns the bookkeeping, the
summaries, the update thread, the non-finite guard, the reporter and the checkpoints.

One rollout, step by step (what :meth:`OnPolicyTrainer.advance` does, and what a loop that
steps one environment for several behaviors drives itself, behavior by behavior):

1. :meth:`OnPolicyTrainer.act` — observe :attr:`~evtrain.trainers.base.Trainer.next_obs` (all
   ``num_envs`` agents), normalise, sample the actions (``t`` is the rollout's step);
2. step the environment with them (:meth:`OnPolicyTrainer.env_step` steps ``envs`` with
   :attr:`~OnPolicyTrainer.env_actions` of them);
3. :meth:`OnPolicyTrainer.record` — record the step's results at row ``t`` (the non-finite
   guard sees them first);
4. after ``num_steps`` steps, :meth:`OnPolicyTrainer.end_rollout` — value the rollout, GAE,
   the frozen :class:`~evtrain.trainers.algorithm.OnPolicyBatch` (``None`` when a non-finite
   value skips the update);
5. :meth:`OnPolicyTrainer.learn` — the algorithm's update (on the update thread with
   ``threaded``), its statistics reported, the summary period ended.

Implementation choices follow "The 37 implementation details of PPO" (Huang et al. 2022):
per-minibatch advantage normalisation, time-limit bootstrapping, ``time_horizon`` cuts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.timers import hierarchical_timer
from evtrain.trainers.algorithm import OnPolicyAlgorithm, OnPolicyBatch
from evtrain.trainers.base import Trainer
from evtrain.trainers.envs import final_observations
from evtrain.trainers.finite import zeroed
from evtrain.trainers.group_algorithm import GroupOnPolicyAlgorithm
from evtrain.trainers.loops.group_rollout import GroupSteps, group_size_for
from evtrain.trainers.loops.recurrent_rollout import RecurrentRollout
from evtrain.trainers.loops.rollout import EnvActions, Finals, Rollout, rollout_hyperparameters
from evtrain.trainers.loops.spec import spec_for
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.threaded import ActingCopy

logger = logging.getLogger("evtrain")

StepResult = tuple[Any, Any, Any, Any, dict[str, Any]]
"""What ``envs.step`` returns: observations, rewards, terminated, truncated, infos."""


class OnPolicyTrainer(Trainer):
    """Rollouts and GAE for an on-policy algorithm (see the module's docstring)."""

    algorithm_type: ClassVar[type[OnPolicyAlgorithm]]
    """The algorithm this trainer runs, built from an :class:`AlgorithmSpec`."""
    grouped: ClassVar[bool] = False
    """Whether the environment's agent slots come in groups whose rollout the algorithm
    values itself (a :class:`~evtrain.trainers.group_algorithm.GroupOnPolicyAlgorithm`; see
    :mod:`evtrain.trainers.loops.group_rollout`)."""
    _skip_update = False
    """A non-finite reward or observation came in this rollout (``on_nonfinite: skip``)."""

    def _setup(self) -> None:
        envs = self.envs
        self.group_size = 1
        """Agent slots per environment copy (group trainers)."""
        if self.grouped:
            type_name, next_step = self.settings.trainer_type, self.autoreset.next_step
            self.group_size = group_size_for(envs, self.behavior_name, type_name, next_step)
        self.hp = rollout_hyperparameters(self.settings, self.num_envs, self.behavior_name)
        """The hyperparameters in use (``buffer_size`` as the rollout collects it)."""
        self.num_steps = self.hp.buffer_size // self.num_envs
        """Rollout length per environment."""
        self.action_space: spaces.Space[Any] = envs.single_action_space
        self.layout = behavior_layout(
            envs.single_observation_space,
            self.settings.network_settings,
            self.behavior_name,
            self.action_space,
        )
        """Where each part of an observation sits in the rows the rollout stores."""
        spec = spec_for(self, self.hp, group_size=self.group_size)
        self.algorithm: OnPolicyAlgorithm = self.algorithm_type(spec)
        """The algorithm: its networks, optimizers and update."""
        self.agent: ActorCritic | RecurrentActorCritic = self.algorithm.agent
        """The actor-critic the rollout acts and values with (the algorithm's)."""
        self.reward_providers: Mapping[str, RewardProvider] = self.algorithm.reward_providers
        """The algorithm's intrinsic reward providers (empty: extrinsic only)."""
        self.memory: RecurrentRollout | None = None
        """The memories and sequences of a recurrent agent (``network_settings.memory``)."""
        memory = self.settings.network_settings.memory
        if memory is not None and isinstance(self.agent, RecurrentActorCritic):
            self.memory = RecurrentRollout(self.agent, self.num_envs, memory.sequence_length)
        self.provider_rewards: list[npt.NDArray[np.float32]] = []
        """Each reward provider's ``(T, N)`` rewards of the last rollout."""
        self._allocate_rollout()
        self.groups: GroupSteps | None = None
        """A group trainer's group bookkeeping."""
        if self.grouped:
            self.groups = GroupSteps(
                self.behavior_name, self.reporter, self.num_steps, self.num_envs, self.group_size
            )
        self._acting = ActingCopy(self.agent) if self.settings.threaded else None
        """threaded: the agent the rollout acts with while the update trains ``agent``."""

    def _caught_up(self) -> None:
        if self._acting is not None:
            self._acting.refresh()

    def _allocate_rollout(self) -> None:
        """The rollout's arrays, and how actions go to the environments."""
        self.env_actions = EnvActions(self.action_space, self.num_envs)
        """The policy's actions as the environments take them (``Box`` ones clipped)."""
        self.rollout = Rollout(
            self.num_steps,
            self.num_envs,
            len(self.reward_providers),
            time_horizon=self.settings.time_horizon,
            lambd=self.hp.lambd,
            next_step=self.autoreset.next_step,
            device=self.device,
        )
        """The rollout's arrays (:mod:`evtrain.trainers.loops.rollout`)."""

    @property
    def steps_per_update(self) -> int:
        """One rollout: ``buffer_size`` steps of every rank."""
        return self.hp.buffer_size * self.world.size

    # -- one rollout -----------------------------------------------------------------------------

    def advance(self) -> None:
        """Collect one rollout, update the algorithm on it, report."""
        with hierarchical_timer("rollout"):
            for t in range(self.num_steps):
                self.record(t, *self.env_step(self.act(t)))
        batch = self.end_rollout()
        if batch is not None:
            self.learn(batch)

    @torch.no_grad()
    def act(self, t: int) -> torch.Tensor:
        """Step ``t`` of the rollout: sample ``a_t ~ pi(.|s_t)`` for every agent's observation
        in :attr:`next_obs` (updating the normaliser), keeping ``log pi(a_t|s_t)`` for the
        ratio; returns the actions."""
        # (torch.tensor copies: a vector env may reuse its observation array.)
        x = self._observe(self.layout.tensor(self.next_obs, self.device))
        acting = self._acting_agent()
        if isinstance(acting, ActorCritic):
            action, logprob = acting.act(x, self.act_generator)
        else:  # with memory: the critic steps along, carrying its own memory
            action, logprob = self._memory().act(acting, x, self.act_generator)
        self.rollout.add(x, action, logprob)
        return action

    def _acting_agent(self) -> ActorCritic | RecurrentActorCritic:
        return self.agent if self._acting is None else self._acting.module

    @torch.no_grad()
    def record(
        self,
        t: int,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        infos: dict[str, Any],
    ) -> None:
        """Record row ``t`` of the rollout: one step's results (as ``envs.step`` returns them,
        after :meth:`act`'s actions); :attr:`next_obs` becomes ``next_obs``.  A non-finite
        reward or observation is zeroed and skips this rollout's update (``on_nonfinite:
        skip``; :class:`~evtrain.trainers.finite.FiniteGuard` stops the run otherwise)."""
        finite = self.finite.step(self.step, reward, next_obs)
        if not finite.all():  # on_nonfinite: skip; this rollout's update is skipped
            reward, next_obs = zeroed(reward, finite), zeroed(next_obs, finite)
            self._skip_update = True
        final = self._record_row(t, next_obs, reward, terminated, truncated, infos)
        if final is not None:
            self.rollout.add_final(final)
        if self.memory is not None:
            # Episode ends erase the memories; in NEXT_STEP mode only after the next step,
            # which still observes (and values) the final observation.
            dones = terminated | truncated
            ended = ~self.rollout.valid[t] if self.autoreset.next_step else dones
            self.memory.stepped(self._acting_agent(), None if final is None else final[1:], ended)

    def end_rollout(self) -> OnPolicyBatch | None:
        """The rollout valued, GAE computed, flattened into the algorithm's batch; ``None``
        when a non-finite reward or observation skips this update (``on_nonfinite: skip``;
        the ranks agree), the summary period then ended.  A group trainer's algorithm values
        its rollout itself (``GroupOnPolicyAlgorithm.batch``)."""
        finals = self._end_collection()
        next_value = None if self.groups is not None else self._value_rollout(finals)
        self._sync_step()  # distributed: the schedules follow the global step
        skip, self._skip_update = self._skip_update, False
        if self.finite.policy == "skip" and self.world.any(skip):
            self._end_period()
            return None
        if next_value is None:
            return self._group_batch(finals)
        if self.reward_providers:
            self.provider_rewards = self._evaluate_reward_providers()
        # The update reads this batch only (threaded: the next rollout, collected while it
        # runs, writes the rollout's arrays).
        return self._batch(*self._advantages(next_value))

    def learn(self, batch: OnPolicyBatch) -> None:
        """The algorithm's update on ``batch`` (on the update thread with ``threaded``), the
        rollout's value estimates reported, the summary period ended."""
        with hierarchical_timer("update"):
            self._run_update(self._update, batch)
        self._report_estimates()
        self._end_period()

    def _update(self, batch: OnPolicyBatch) -> None:
        for key, value in self.algorithm.update(batch).items():
            self.reporter.add_stat(key, value)

    @torch.no_grad()
    def _group_batch(self, finals: list[Finals]) -> OnPolicyBatch:
        """The group algorithm's batch of the rollout (:meth:`GroupSteps.batch`)."""
        assert self.groups is not None
        algorithm: GroupOnPolicyAlgorithm = self.algorithm  # type: ignore[assignment]  # grouped
        next_x = self.agent.normalizer(self.layout.tensor(self.next_obs, self.device))
        acting = getattr(self.envs, "acting", None)
        return self.groups.batch(algorithm, self.rollout, next_x, acting, finals, self.step)

    def _report_estimates(self) -> None:
        """``Policy/Extrinsic Value Estimate`` and each reward provider's (a group
        algorithm's: what it said)."""
        if self.groups is not None:
            estimates = self.groups.estimates
        else:
            estimates = self.rollout.estimates(self.reward_providers)
        for key, value in estimates.items():
            self.reporter.add_stat(key, value)

    @torch.no_grad()
    def _collect_rollout(self) -> torch.Tensor:
        """Step every environment ``num_steps`` times; returns ``V`` of the last observations
        (not for group trainers)."""
        for t in range(self.num_steps):
            self.record(t, *self.env_step(self.act(t)))
        return self._value_rollout(self._end_collection())

    @torch.no_grad()
    def _end_collection(self) -> list[Finals]:
        """End the collection: ``b_obs``, ``b_actions``, ``b_logprobs`` (``(T, N, ...)``
        tensors) beside the ``(T, N)`` numpy arrays ``rewards``, ``terminated``,
        ``truncated``, ``bootstrap`` and ``valid``; returns the final observations to value."""
        if self.world.size > 1:  # every rank's observations into every rank's statistics
            self.agent.normalizer.merge_ranks(self.world)
        finals = self.rollout.end(self.settings.reward_signals.extrinsic.strength)
        # threaded: the values come from the critic the update in flight trains
        self.wait_for_update()
        return finals

    def env_step(self, action: torch.Tensor) -> StepResult:
        """``envs.step`` with :attr:`env_actions` of ``action``."""
        result: StepResult = self.envs.step(self.env_actions(action))
        return result

    def _record_row(
        self,
        t: int,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        infos: dict[str, Any],
    ) -> Finals | None:
        """Record row ``t``; returns the normalised final observations of the episodes a time
        limit ended, if any."""
        dones = terminated | truncated
        valid = self.autoreset.observe(dones, infos)
        self.rollout.row(t, reward, terminated, truncated, valid)
        self._record_step(reward, dones, valid)
        self._record_infos(infos, dones, valid)
        self.next_obs = next_obs
        # A time-limited episode is worth V(final observation): keep it to value later.
        # (In NEXT_STEP mode the next step observes it; see _advantages.)  Reward providers
        # value terminated episodes' final observations too, and see them as s'.
        if self.groups is not None:  # the agents still in a copy whose episode was truncated
            ended = truncated & ~terminated & self.groups.record(t, infos, dones, valid)
        else:
            ended = dones if self.reward_providers else truncated & ~terminated
        if not ended.any() or self.autoreset.next_step:
            return None
        final = final_observations(infos, ended)
        final_x = self.agent.normalizer(self.layout.tensor(final, self.device))
        return t, ended, final_x

    def _observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Flattened, normalised observations (updating the normaliser's statistics)."""
        obs = obs.reshape(self.num_envs, -1)
        if not self.agent.normalizer.enabled:
            return obs
        self.agent.normalizer.update(self._acting_rows(obs))
        x: torch.Tensor = self.agent.normalizer(obs)
        return x

    def _evaluate_reward_providers(self) -> list[npt.NDArray[np.float32]]:
        """Each reward provider's rewards of the rollout (:meth:`Rollout.provider_rewards`)."""
        return self.rollout.provider_rewards(self.reward_providers, self.reporter)

    @torch.no_grad()
    def _value_rollout(self, finals: list[Finals]) -> torch.Tensor:
        """The rollout valued with the agent's critic; returns ``V`` of the last
        observations (:meth:`Rollout.value`)."""
        next_x = self.agent.normalizer(self.layout.tensor(self.next_obs, self.device))
        return self.rollout.value(self.agent, next_x, finals, self.memory)

    def _advantages(self, next_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE of every reward (:meth:`Rollout.advantages`)."""
        extrinsic, providers = self.settings.reward_signals.extrinsic, self.reward_providers
        return self.rollout.advantages(
            next_value,
            self.provider_rewards,
            [extrinsic.gamma, *(p.gamma for p in providers.values())],
            [True, *(p.episodic for p in providers.values())],
        )

    def _batch(self, advantages: torch.Tensor, returns: torch.Tensor) -> OnPolicyBatch:
        """The algorithm's batch (:meth:`Rollout.batch`)."""
        return self.rollout.batch(advantages, returns, self.memory, self.step)

    def _memory(self) -> RecurrentRollout:
        if self.memory is None:
            raise RuntimeError(f"behavior {self.behavior_name!r} has no network_settings.memory")
        return self.memory

    # -- what the runner needs: the algorithm's ------------------------------------------------

    def policy_module(self) -> nn.Module:
        return self.algorithm.policy_module()

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        return self.algorithm.sampling_policy_module(generator)

    def _shared_modules(self) -> list[nn.Module]:
        return [*super()._shared_modules(), *_modules_of(self.algorithm)]

    def _state_dict(self) -> dict[str, Any]:
        return self.algorithm.state_dict()

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self.algorithm.load_state_dict(state)

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.algorithm.load_weights(state)


def _modules_of(algorithm: object) -> list[nn.Module]:
    """The modules an algorithm holds as attributes (what ``synchronize`` shares)."""
    return [value for value in vars(algorithm).values() if isinstance(value, nn.Module)]
