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
2. step the environment with them (:meth:`OnPolicyTrainer.env_step` steps ``envs``);
3. :meth:`OnPolicyTrainer.record` — record the step's results at row ``t``;
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

import attrs
import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.timers import hierarchical_timer
from evtrain.trainers.algorithm import (
    AlgorithmSpec,
    OnPolicyAlgorithm,
    OnPolicyBatch,
)
from evtrain.trainers.base import Trainer
from evtrain.trainers.envs import final_observations
from evtrain.trainers.finite import zeroed
from evtrain.trainers.loops.gae import compute_gae
from evtrain.trainers.loops.recurrent_rollout import RecurrentRollout
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.on_policy_settings import OnPolicySettings
from evtrain.trainers.signals.reward_signal import RewardSignal
from evtrain.trainers.threaded import ActingCopy

logger = logging.getLogger("evtrain")

Minibatch = tuple[torch.Tensor, ...]
"""(obs, actions, logprobs, advantages, returns) of a batch (``b_``) or minibatch (``mb_``),
followed by the next observations when there are reward providers."""
Finals = tuple[int, npt.NDArray[np.bool_], torch.Tensor]
"""(step, which environments, normalised final observations) of time-limited episodes."""
StepResult = tuple[Any, Any, Any, Any, dict[str, Any]]
"""What ``envs.step`` returns: observations, rewards, terminated, truncated, infos."""


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages shifted and scaled to mean 0 and standard deviation 1."""
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


class OnPolicyTrainer(Trainer):
    """Rollouts and GAE for an on-policy algorithm (see the module's docstring)."""

    algorithm_type: ClassVar[type[OnPolicyAlgorithm]]
    """The algorithm this trainer runs, built from an :class:`AlgorithmSpec`."""
    _skip_update = False
    """A non-finite reward or observation came in this rollout (``on_nonfinite: skip``)."""

    def _setup(self) -> None:
        envs = self.envs
        self.hp = self._hyperparameters()
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
        self.algorithm: OnPolicyAlgorithm = self.algorithm_type(self._algorithm_spec())
        """The algorithm: its networks, optimizers and update."""
        self.agent: ActorCritic | RecurrentActorCritic = self.algorithm.agent
        """The actor-critic the rollout acts and values with (the algorithm's)."""
        self.reward_providers: Mapping[str, RewardSignal] = self.algorithm.reward_providers
        """The algorithm's intrinsic reward providers (empty: extrinsic only)."""
        self.memory: RecurrentRollout | None = None
        """The memories and sequences of a recurrent agent (``network_settings.memory``)."""
        memory = self.settings.network_settings.memory
        if memory is not None and isinstance(self.agent, RecurrentActorCritic):
            self.memory = RecurrentRollout(self.agent, self.num_envs, memory.sequence_length)
        self.provider_rewards: list[npt.NDArray[np.float32]] = []
        """Each reward provider's ``(T, N)`` rewards of the last rollout."""
        self._provider_returns = np.zeros(
            (len(self.reward_providers), self.num_envs), dtype=np.float64
        )
        """Each reward provider's reward so far in each environment's episode."""
        self._allocate_rollout()
        self._acting = ActingCopy(self.agent) if self.settings.threaded else None
        """threaded: the agent the rollout acts with while the update trains ``agent``."""

    def _hyperparameters(self) -> OnPolicySettings:
        """The settings' hyperparameters, ``buffer_size`` rounded up to what a rollout holds."""
        hp: OnPolicySettings = self.settings.hyperparameters  # type: ignore[assignment]  # base checks
        buffer_size = hp.rollout_buffer_size(self.num_envs)
        if buffer_size != hp.buffer_size:
            logger.info(
                "behaviors.%s.hyperparameters.buffer_size: %d rounded up to %d, a multiple of "
                "batch_size (%d) and of the number of environments (%d)",
                self.behavior_name,
                hp.buffer_size,
                buffer_size,
                hp.batch_size,
                self.num_envs,
            )
            hp = attrs.evolve(hp, buffer_size=buffer_size)
        return hp

    def _algorithm_spec(self) -> AlgorithmSpec:
        """What the algorithm is built from: the settings with :attr:`hp`, and the loop's
        generators and non-finite guard (shared objects)."""
        settings = self.settings
        if self.hp is not settings.hyperparameters:
            settings = attrs.evolve(settings, hyperparameters=self.hp)
        return AlgorithmSpec(
            behavior_name=self.behavior_name,
            settings=settings,
            observation_space=self.envs.single_observation_space,
            action_space=self.action_space,
            num_envs=self.num_envs,
            device=self.device,
            world=self.world,
            init_generator=self.init_generator,
            generator=self.generator,
            rng=self.rng,
            finite=self.finite,
        )

    def _caught_up(self) -> None:
        if self._acting is not None:
            self._acting.refresh()

    def _allocate_rollout(self) -> None:
        """The rollout's arrays, and how actions go to the environments (``Box`` actions
        clipped to their bounds)."""
        self._clip_actions = isinstance(self.action_space, spaces.Box)
        if isinstance(self.action_space, spaces.Box):
            self._action_low = self.action_space.low.reshape(-1)
            self._action_high = self.action_space.high.reshape(-1)
            self._action_shape = (self.num_envs, *self.action_space.shape)
        # Filled row by row every iteration; the tensors are stacked once per rollout instead
        # (a per-step tensor slice assignment costs more than the policy's matrix products).
        T, N = self.num_steps, self.num_envs
        self.rewards = np.zeros((T, N), dtype=np.float32)
        self.terminated = np.zeros((T, N), dtype=np.bool_)
        self.truncated = np.zeros((T, N), dtype=np.bool_)
        K = len(self.reward_providers)
        self.bootstrap = np.zeros((T, N) if K == 0 else (T, N, 1 + K), dtype=np.float32)
        self.valid = np.ones((T, N), dtype=np.bool_)
        self._steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        """(obs, action, logprob) of each step of the rollout so far."""
        self._finals: list[Finals] = []

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
        self._steps.append((x, action, logprob))
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
        after :meth:`act`'s actions); :attr:`next_obs` becomes ``next_obs``."""
        final = self._record_row(t, next_obs, reward, terminated, truncated, infos)
        if final is not None:
            self._finals.append(final)
        if self.memory is not None:
            # Episode ends erase the memories; in NEXT_STEP mode only after the next step,
            # which still observes (and values) the final observation.
            dones = self.terminated[t] | self.truncated[t]
            ended = ~self.valid[t] if self.autoreset.next_step else dones
            self.memory.stepped(self._acting_agent(), None if final is None else final[1:], ended)

    def end_rollout(self) -> OnPolicyBatch | None:
        """The rollout valued, GAE computed, flattened into the algorithm's batch; ``None``
        when a non-finite reward or observation skips this update (``on_nonfinite: skip``;
        the ranks agree), the summary period then ended."""
        next_value = self._rollout_values()
        self._sync_step()  # distributed: the schedules follow the global step
        skip, self._skip_update = self._skip_update, False
        if self.finite.policy == "skip" and self.world.any(skip):
            self._end_period()
            return None
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

    def _report_estimates(self) -> None:
        """``Policy/Extrinsic Value Estimate`` and each reward provider's."""
        report = self.reporter.add_stat
        if not self.reward_providers:
            report("Policy/Extrinsic Value Estimate", float(self.b_values.mean()))
            return
        b_values = self.b_values.flatten(0, 1)
        report("Policy/Extrinsic Value Estimate", float(b_values[:, 0].mean()))
        for i, provider in enumerate(self.reward_providers.values(), start=1):
            report(f"Policy/{provider.stat_name} Value Estimate", float(b_values[:, i].mean()))

    @torch.no_grad()
    def _collect_rollout(self) -> torch.Tensor:
        """Step every environment ``num_steps`` times; returns ``V`` of the last observations
        (:meth:`_rollout_values`)."""
        for t in range(self.num_steps):
            self.record(t, *self.env_step(self.act(t)))
        return self._rollout_values()

    @torch.no_grad()
    def _rollout_values(self) -> torch.Tensor:
        """End the collection: ``b_obs``, ``b_actions``, ``b_logprobs``, ``b_values`` (``(T, N,
        ...)`` tensors) beside the ``(T, N)`` numpy arrays ``rewards``, ``terminated``,
        ``truncated``, ``bootstrap`` and ``valid``; returns ``V`` of the last observations."""
        if self.world.size > 1:  # every rank's observations into every rank's statistics
            self.agent.normalizer.merge_ranks(self.world)
        strength = self.settings.reward_signals.extrinsic.strength
        if strength != 1.0:
            self.rewards *= strength
        obs, actions, logprobs = zip(*self._steps, strict=True)
        self.b_obs = torch.stack(obs)
        self.b_actions = torch.stack(actions)
        self.b_logprobs = torch.stack(logprobs)
        finals, self._steps, self._finals = self._finals, [], []
        # threaded: the values come from the critic the update in flight trains
        self.wait_for_update()
        return self._value_rollout(finals)

    def env_step(self, action: torch.Tensor) -> StepResult:
        """``envs.step`` with ``action`` (``Box`` actions clipped to their bounds); a non-finite
        reward or observation is zeroed and skips this rollout's update (``on_nonfinite:
        skip``; :class:`~evtrain.trainers.finite.FiniteGuard` stops the run otherwise)."""
        env_action = action.cpu().numpy()
        if self._clip_actions:
            env_action = np.clip(env_action, self._action_low, self._action_high)
            env_action = env_action.reshape(self._action_shape)
        next_obs, reward, terminated, truncated, infos = self.envs.step(env_action)
        finite = self.finite.step(self.step, reward, next_obs)
        if not finite.all():  # on_nonfinite: skip; this rollout's update is skipped
            reward, next_obs = zeroed(reward, finite), zeroed(next_obs, finite)
            self._skip_update = True
        return next_obs, reward, terminated, truncated, infos

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
        self.valid[t] = valid = self.autoreset.observe(dones, infos)
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        self._record_step(reward, dones, valid)
        self._record_infos(infos, dones, valid)
        self.next_obs = next_obs
        # A time-limited episode is worth V(final observation): keep it to value later.
        # (In NEXT_STEP mode the next step observes it; see _advantages.)  Reward providers
        # value terminated episodes' final observations too, and see them as s'.
        ended = dones if self.reward_providers else truncated & ~terminated
        if not ended.any() or self.autoreset.next_step:
            return None
        final = final_observations(infos, ended)
        final_x = self.agent.normalizer(self.layout.tensor(final, self.device))
        return t, ended, final_x

    def _value_rollout(self, finals: list[Finals]) -> torch.Tensor:
        """``b_values`` and ``bootstrap`` (``V`` of the time-limited finals); returns ``V`` of
        the last observations.

        One batched pass over every observation of the rollout: the values do not steer the
        rollout, and one pass over T*N rows costs about what one step's does.
        """
        T, N = self.num_steps, self.num_envs
        next_x = self.agent.normalizer(self.layout.tensor(self.next_obs, self.device))
        if isinstance(self.agent, ActorCritic):
            values = self.agent.value(
                torch.cat([self.b_obs.flatten(0, 1), next_x, *(f[2] for f in finals)])
            )
        else:  # valued during the rollout, each step with the critic's memory there
            values = self._memory().values(next_x)
        self.b_values = values[: T * N].view(T, N, *values.shape[1:])
        self.bootstrap.fill(0.0)
        offset = (T + 1) * N
        for t, which, final_x in finals:
            count = final_x.shape[0]
            self.bootstrap[t, which] = values[offset : offset + count].cpu().numpy()
            offset += count
        if self.reward_providers:
            # s' of every transition: the next step's observation, the final one where an
            # episode ended (NEXT_STEP mode: the next step's, which is the final one).
            b_next_obs = torch.cat([self.b_obs[1:], next_x[None]])
            for t, which, final_x in finals:
                b_next_obs[t, torch.from_numpy(which).to(self.device)] = final_x
            self.b_next_obs = b_next_obs
        return values[T * N : (T + 1) * N]

    def _observe(self, obs: torch.Tensor) -> torch.Tensor:
        """Flattened, normalised observations (updating the normaliser's statistics)."""
        obs = obs.reshape(self.num_envs, -1)
        if not self.agent.normalizer.enabled:
            return obs
        self.agent.normalizer.update(self._acting_rows(obs))
        x: torch.Tensor = self.agent.normalizer(obs)
        return x

    def _advantages(self, next_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over the rollout, cutting trajectories every ``time_horizon`` steps; with
        reward providers, GAE per provider and the sum of their advantages, one return column
        per value head."""
        values = self.b_values.cpu().numpy()
        next_v = next_value.cpu().numpy()
        extrinsic = self.settings.reward_signals.extrinsic
        if not self.reward_providers:
            advantages, returns = self._gae(
                self.rewards, values, self.bootstrap, next_v, extrinsic.gamma, episodic=True
            )
        else:
            gammas = [extrinsic.gamma, *(s.gamma for s in self.reward_providers.values())]
            episodic = [True, *(s.episodic for s in self.reward_providers.values())]
            per_provider = [
                self._gae(
                    rewards,
                    values[..., i],
                    self.bootstrap[..., i],
                    next_v[:, i],
                    gammas[i],
                    episodic=episodic[i],
                )
                for i, rewards in enumerate([self.rewards, *self.provider_rewards])
            ]
            advantages = np.sum([a for a, _ in per_provider], axis=0, dtype=np.float32)
            returns = np.stack([r for _, r in per_provider], axis=-1)
        return (
            torch.from_numpy(advantages).to(self.device),
            torch.from_numpy(returns).to(self.device),
        )

    def _gae(
        self,
        rewards: npt.NDArray[np.float32],
        values: npt.NDArray[np.float32],
        bootstrap: npt.NDArray[np.float32],
        next_v: npt.NDArray[np.float32],
        gamma: float,
        *,
        episodic: bool,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """One reward's ``(T, N)`` advantages and returns.  An ``episodic`` signal (extrinsic,
        gail) is worth 0 after a termination; the others (ML-Agents' ``ignore_done``) the value
        of the final observation, as after a time limit."""
        following = np.concatenate([values[1:], next_v[None]])
        dones = self.terminated | self.truncated
        if self.autoreset.next_step:
            # The step after an episode end looked at the final observation: its value is
            # the bootstrap value of the truncated step.
            ended = self.truncated & ~self.terminated if episodic else dones
            bootstrap = np.where(ended, following, 0.0)
        elif episodic and self.reward_providers:
            # the finals of terminated episodes were valued for the reward providers
            bootstrap = np.where(self.terminated, 0.0, bootstrap)
        horizon = self.settings.time_horizon
        if horizon < self.num_steps:
            # A time_horizon cut ends a trajectory like a truncation: bootstrap from V(s_t+1).
            cuts = np.zeros_like(dones)
            cuts[horizon - 1 : -1 : horizon] = True
            cuts &= ~dones
            bootstrap = np.where(cuts, following, bootstrap)
            dones = dones | cuts
        return compute_gae(rewards, values, dones, bootstrap, next_v, gamma, self.hp.lambd)

    def _batch(self, advantages: torch.Tensor, returns: torch.Tensor) -> OnPolicyBatch:
        """The rollout flattened into the algorithm's batch (``b_obs``, ``b_actions``,
        ``b_logprobs``, ``b_advantages``, ``b_returns``, and ``b_next_obs`` with reward
        providers), without the autoreset steps of NEXT_STEP mode; with memory, in sequence
        order, with its sequences."""
        b: Minibatch = (
            self.b_obs.flatten(0, 1),
            self.b_actions.flatten(0, 1),
            self.b_logprobs.flatten(0, 1),
            advantages.flatten(),
            returns.flatten(0, 1),
        )
        if self.reward_providers:
            b = (*b, self.b_next_obs.flatten(0, 1))
        sequences = None
        if self.memory is not None:
            # in sequences of sequence_length, cut where GAE cuts trajectories
            breaks = self.terminated | self.truncated
            breaks[self.settings.time_horizon - 1 :: self.settings.time_horizon] = True
            b, sequences = self.memory.batch(b, self.b_obs, breaks, self.valid)
        elif not self.valid.all():
            keep = torch.from_numpy(np.flatnonzero(self.valid)).to(self.device)
            b = tuple(t[keep] for t in b)
        return OnPolicyBatch(
            obs=b[0],
            actions=b[1],
            logprobs=b[2],
            advantages=b[3],
            returns=b[4],
            next_obs=b[5] if self.reward_providers else None,
            sequences=sequences,
            step=self.step,
        )

    @torch.no_grad()
    def _evaluate_reward_providers(self) -> list[npt.NDArray[np.float32]]:
        """Each reward provider's ``(T, N)`` rewards of the rollout's transitions (0 on the
        autoreset steps of NEXT_STEP mode); reports each provider's reward per finished
        episode (``Policy/<Name> Reward``)."""
        T, N = self.num_steps, self.num_envs
        obs = self.b_obs.flatten(0, 1)
        actions = self.b_actions.flatten(0, 1)
        next_obs = self.b_next_obs.flatten(0, 1)
        rewards = [
            np.where(self.valid, p.evaluate(obs, actions, next_obs).reshape(T, N), 0.0)
            for p in self.reward_providers.values()
        ]
        ended = (self.terminated | self.truncated) & self.valid
        report = self.reporter.add_stat
        for t in range(T):
            for i, provider in enumerate(self.reward_providers.values()):
                self._provider_returns[i] += rewards[i][t]
                for n in np.flatnonzero(ended[t]):
                    report(
                        f"Policy/{provider.stat_name} Reward", float(self._provider_returns[i, n])
                    )
            self._provider_returns[:, ended[t]] = 0.0
        return [r.astype(np.float32) for r in rewards]

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
