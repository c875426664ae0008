"""The on-policy loop (ML-Agents' ``on_policy_trainer``, SB3's ``OnPolicyAlgorithm``): collect a
rollout of ``buffer_size`` steps, value it, compute advantages with GAE, flatten it into a batch
and cut that into minibatches.  The algorithm's update is not here: an on-policy trainer
subclasses :class:`OnPolicyTrainer`, builds its networks in ``_setup`` and writes ``advance``
from these steps (PPO's: :class:`~evtrain.trainers.ppo.trainer.PPOTrainer`).

What a subclass's ``_setup`` sets before calling :meth:`OnPolicyTrainer._allocate_rollout`:
``hp`` (its hyperparameters, :class:`OnPolicyHyperparameters`), ``num_steps`` (rollout length
per environment), ``layout`` (:func:`~evtrain.trainers.observations.behavior_layout`),
``agent`` (an actor-critic of :mod:`evtrain.trainers.networks.policies` or
:mod:`~evtrain.trainers.networks.recurrent`), ``memory`` (a
:class:`~evtrain.trainers.loops.recurrent_rollout.RecurrentRollout` with memory, else
``None``), ``signals`` (:func:`~evtrain.trainers.rewards.build.make_reward_providers`),
``_provider_returns`` and ``_acting`` (the :class:`~evtrain.trainers.threaded.ActingCopy` of a
threaded run, else ``None``).

Implementation choices follow "The 37 implementation details of PPO" (Huang et al. 2022):
per-minibatch advantage normalisation, time-limit bootstrapping, ``time_horizon`` cuts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces

from evtrain.timers import hierarchical_timer
from evtrain.trainers.base import Trainer
from evtrain.trainers.envs import final_observations
from evtrain.trainers.finite import zeroed
from evtrain.trainers.loops.gae import compute_gae
from evtrain.trainers.loops.recurrent_rollout import RecurrentRollout
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.observations import ObservationLayout
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.threaded import ActingCopy

Minibatch = tuple[torch.Tensor, ...]
"""(obs, actions, logprobs, advantages, returns) of a batch (``b_``) or minibatch (``mb_``),
followed by the next observations when there are intrinsic reward providers."""
Finals = tuple[int, npt.NDArray[np.bool_], torch.Tensor]
"""(step, which environments, normalised final observations) of time-limited episodes."""


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages shifted and scaled to mean 0 and standard deviation 1."""
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


class OnPolicyHyperparameters(Protocol):
    """What the loop reads of a trainer's hyperparameters (:class:`PPOSettings` has them)."""

    @property
    def buffer_size(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def lambd(self) -> float: ...
    @property
    def normalize_advantage(self) -> bool: ...


class OnPolicyTrainer(Trainer):
    """Rollouts, GAE and minibatches for an on-policy algorithm (see the module's docstring)."""

    hp: OnPolicyHyperparameters
    action_space: spaces.Space[Any]
    num_steps: int
    layout: ObservationLayout
    agent: ActorCritic | RecurrentActorCritic
    memory: RecurrentRollout | None
    signals: dict[str, RewardProvider]
    provider_rewards: list[npt.NDArray[np.float32]]
    _provider_returns: npt.NDArray[np.float64]
    _acting: ActingCopy[ActorCritic | RecurrentActorCritic] | None
    _skip_update = False
    """A non-finite reward or observation came in this rollout (``on_nonfinite: skip``)."""

    def _caught_up(self) -> None:
        if self._acting is not None:
            self._acting.refresh()

    def _allocate_rollout(self) -> None:
        """The rollout's arrays, and how actions go to the environments (``Box`` actions
        clipped to their bounds); the last step of a subclass's ``_setup``."""
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
        K = len(self.signals)
        self.bootstrap = np.zeros((T, N) if K == 0 else (T, N, 1 + K), dtype=np.float32)
        self.valid = np.ones((T, N), dtype=np.bool_)

    @property
    def steps_per_update(self) -> int:
        """One rollout: ``buffer_size`` steps of every rank."""
        return self.hp.buffer_size * self.world.size

    def _collect_for_update(self) -> torch.Tensor | None:
        """Collect one rollout (:meth:`_collect_rollout`) and agree on the global step; ``V`` of
        the last observations, or ``None`` when a non-finite reward or observation skips this
        update (``on_nonfinite: skip``; the ranks agree), the summary period then ended."""
        with hierarchical_timer("rollout"):
            next_value = self._collect_rollout()
        self._sync_step()  # distributed: the schedules follow the global step
        skip, self._skip_update = self._skip_update, False
        if self.finite.policy == "skip" and self.world.any(skip):
            self._end_period()
            return None
        return next_value

    @torch.no_grad()
    def _collect_rollout(self) -> torch.Tensor:
        """Step every environment ``num_steps`` times; returns ``V`` of the last observations.

        Fills ``b_obs``, ``b_actions``, ``b_logprobs``, ``b_values`` (``(T, N, ...)`` tensors)
        and the ``(T, N)`` numpy arrays ``rewards``, ``terminated``, ``truncated``,
        ``bootstrap`` and ``valid``.
        """
        obs_list, action_list, logprob_list = [], [], []
        finals: list[Finals] = []
        acting = self.agent if self._acting is None else self._acting.module
        memory = self.memory
        for t in range(self.num_steps):
            # -- act: sample a_t ~ pi(.|s_t) and keep log pi(a_t|s_t) for the ratio
            # (torch.tensor copies: a vector env may reuse its observation array.)
            x = self._observe(self.layout.tensor(self.next_obs, self.device))
            if isinstance(acting, ActorCritic):
                action, logprob = acting.act(x, self.act_generator)
            else:  # with memory: the critic steps along, carrying its own memory
                action, logprob = self._memory().act(acting, x, self.act_generator)
            obs_list.append(x)
            action_list.append(action)
            logprob_list.append(logprob)
            # -- step the environments
            final = self._step_envs(t, action)
            if final is not None:
                finals.append(final)
            if memory is not None:
                # Episode ends erase the memories; in NEXT_STEP mode only after the next step,
                # which still observes (and values) the final observation.
                dones = self.terminated[t] | self.truncated[t]
                ended = ~self.valid[t] if self.autoreset.next_step else dones
                memory.stepped(acting, None if final is None else final[1:], ended)

        if self.world.size > 1:  # every rank's observations into every rank's statistics
            self.agent.normalizer.merge_ranks(self.world)
        strength = self.settings.reward_signals.extrinsic.strength
        if strength != 1.0:
            self.rewards *= strength
        self.b_obs = torch.stack(obs_list)
        self.b_actions = torch.stack(action_list)
        self.b_logprobs = torch.stack(logprob_list)
        # threaded: the values come from the critic the update in flight trains
        self.wait_for_update()
        return self._value_rollout(finals)

    def _env_step(self, action: torch.Tensor) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
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

    def _step_envs(self, t: int, action: torch.Tensor) -> Finals | None:
        """Step every environment with ``action``, record row ``t`` of the rollout; returns
        the normalised final observations of the episodes a time limit ended, if any."""
        next_obs, reward, terminated, truncated, infos = self._env_step(action)
        dones = terminated | truncated
        self.valid[t] = valid = self.autoreset.observe(dones, infos)
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        self._record_step(reward, dones, valid)
        self._record_infos(infos, dones, valid)
        self.next_obs = next_obs
        # A time-limited episode is worth V(final observation): keep it to value later.
        # (In NEXT_STEP mode the next step observes it; see _advantages.)  Intrinsic reward
        # providers value terminated episodes' final observations too, and see them as s'.
        ended = dones if self.signals else truncated & ~terminated
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
        if self.signals:
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
        intrinsic reward providers, GAE per provider and the sum of their advantages, one return
        column per value head."""
        values = self.b_values.cpu().numpy()
        next_v = next_value.cpu().numpy()
        extrinsic = self.settings.reward_signals.extrinsic
        if not self.signals:
            advantages, returns = self._gae(
                self.rewards, values, self.bootstrap, next_v, extrinsic.gamma, episodic=True
            )
        else:
            gammas = [extrinsic.gamma, *(s.gamma for s in self.signals.values())]
            episodic = [True, *(s.episodic for s in self.signals.values())]
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
        """One signal's ``(T, N)`` advantages and returns.  An ``episodic`` signal (extrinsic,
        gail) is worth 0 after a termination; the others (ML-Agents' ``ignore_done``) the value
        of the final observation, as after a time limit."""
        following = np.concatenate([values[1:], next_v[None]])
        dones = self.terminated | self.truncated
        if self.autoreset.next_step:
            # The step after an episode end looked at the final observation: its value is
            # the bootstrap value of the truncated step.
            ended = self.truncated & ~self.terminated if episodic else dones
            bootstrap = np.where(ended, following, 0.0)
        elif episodic and self.signals:
            # the finals of terminated episodes were valued for the intrinsic reward providers
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

    def _batch(self, advantages: torch.Tensor, returns: torch.Tensor) -> Minibatch:
        """The rollout flattened into one batch (``b_obs``, ``b_actions``, ``b_logprobs``,
        ``b_advantages``, ``b_returns``, and ``b_next_obs`` with intrinsic reward providers),
        without the autoreset steps of NEXT_STEP mode."""
        b: Minibatch = (
            self.b_obs.flatten(0, 1),
            self.b_actions.flatten(0, 1),
            self.b_logprobs.flatten(0, 1),
            advantages.flatten(),
            returns.flatten(0, 1),
        )
        if self.signals:
            b = (*b, self.b_next_obs.flatten(0, 1))
        if self.memory is not None:
            # in sequences of sequence_length, cut where GAE cuts trajectories
            breaks = self.terminated | self.truncated
            breaks[self.settings.time_horizon - 1 :: self.settings.time_horizon] = True
            return self.memory.batch(b, self.b_obs, breaks, self.valid)
        if not self.valid.all():
            keep = torch.from_numpy(np.flatnonzero(self.valid)).to(self.device)
            b = tuple(t[keep] for t in b)
        return b

    def _minibatches(self, b: Minibatch, num_minibatches: int) -> Iterator[Minibatch]:
        """One epoch's minibatches of ``b``, shuffled, advantages normalised per minibatch.

        With memory, whole sequences: as many minibatches as they fill (see
        :mod:`evtrain.trainers.loops.recurrent_rollout`), whatever ``num_minibatches`` says.
        """
        if self.memory is not None:
            for mb in self.memory.minibatches(b, self.generator, self.world):
                yield (*mb[:3], normalized(mb[3]), *mb[4:]) if self.hp.normalize_advantage else mb
            return
        if num_minibatches == 1:
            # Nothing to shuffle: the order of a single minibatch does not matter.
            yield b
            return
        perm = torch.randperm(b[0].shape[0], generator=self.generator, device=self.device)
        for mb_inds in torch.tensor_split(perm, num_minibatches):
            mb = tuple(t[mb_inds] for t in b)
            if self.hp.normalize_advantage:
                mb = (*mb[:3], normalized(mb[3]), *mb[4:])
            yield mb

    def _memory(self) -> RecurrentRollout:
        if self.memory is None:
            raise RuntimeError(f"behavior {self.behavior_name!r} has no network_settings.memory")
        return self.memory
