"""Proximal Policy Optimization (Schulman et al. 2017) on a Gymnasium vector environment.

One :meth:`PPOTrainer.advance` is one iteration of the paper's Algorithm 1: run the policy for
``buffer_size / num_envs`` steps in each environment, compute advantages with GAE, then
optimise the clipped surrogate objective for ``num_epoch`` epochs of ``batch_size``
minibatches.  Implementation choices follow "The 37 implementation details of PPO" (Huang et
al. 2022) as SB3 and cleanrl do: orthogonal init, Adam with ``eps=1e-5``, per-minibatch
advantage normalisation, global gradient clipping, time-limit bootstrapping.

With ``threaded: true`` (:mod:`evtrain.trainers.threaded`) the update of one rollout runs on
the update thread while the next rollout is collected, acting with a copy of the agent from
before that update; the next rollout's values, advantages and update wait for it.

With intrinsic reward signals (``reward_signals.gail``, ``curiosity``, ``rnd``; see
:mod:`evtrain.trainers.intrinsic`) the critic has one value head per signal, as in ML-Agents:
each signal's rewards get GAE with its own ``gamma`` and value head, the advantage is their
sum, and the signals' models train on the update's minibatches.  With ``behavioral_cloning``
the policy also learns the demonstrations' actions after each update
(:mod:`evtrain.trainers.behavioral_cloning`).  Without them the update is the extrinsic-only
one, step for step.

With ``network_settings.memory`` the policy and the critic are recurrent
(:class:`~evtrain.trainers.recurrent_policies.RecurrentActorCritic`): the rollout carries
their memories and the update trains on sequences (:mod:`evtrain.trainers.ppo_memory`).
Without it, nothing here changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.timers import hierarchical_timer
from evtrain.trainers.base import Trainer, linear_decay
from evtrain.trainers.behavioral_cloning import actor_critic_output
from evtrain.trainers.envs import final_observations
from evtrain.trainers.finite import finite_mean, zeroed
from evtrain.trainers.gae import compute_gae
from evtrain.trainers.intrinsic import load_experts, make_behavioral_cloning, make_reward_signals
from evtrain.trainers.networks import clip_grad_norm_, flatten_parameters, zero_grad_
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.optim import LEARNING_RATE_FLOOR, make_adam
from evtrain.trainers.policies import ActorCritic, DeterministicPolicy, flat_obs_dim
from evtrain.trainers.ppo_gradients import ppo_gradients, supports
from evtrain.trainers.ppo_memory import RecurrentRollout
from evtrain.trainers.recurrent_policies import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.settings import PPOSettings
from evtrain.trainers.threaded import ActingCopy

EPSILON_FLOOR = 0.1
"""Where a linear clip-range schedule ends (ML-Agents' value)."""
BETA_FLOOR = 1.0e-5
"""Where a linear entropy-coefficient schedule ends (ML-Agents' value)."""

logger = logging.getLogger("evtrain")

_Minibatch = tuple[torch.Tensor, ...]
"""(obs, actions, logprobs, advantages, returns) of a batch (``b_``) or minibatch (``mb_``),
followed by the next observations when there are intrinsic reward signals."""
_Finals = tuple[int, npt.NDArray[np.bool_], torch.Tensor]
"""(step, which environments, normalised final observations) of time-limited episodes."""


def clipped_surrogate_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
) -> torch.Tensor:
    """The negated clipped surrogate objective ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]``.

    ``r = exp(new_logprob - old_logprob)`` is the probability ratio of the taken actions.
    """
    ratio = torch.exp(new_logprob - old_logprob)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -torch.min(surr1, surr2).mean()


def _normalized(advantages: torch.Tensor) -> torch.Tensor:
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


class PPOTrainer(Trainer):
    """PPO for ``Discrete`` and ``Box`` action spaces (see :mod:`evtrain.trainers.policies`)."""

    settings_type = PPOSettings
    _skip_update = False
    """A non-finite reward or observation came in this rollout (``on_nonfinite: skip``)."""

    def _setup(self) -> None:
        settings, envs = self.settings, self.envs
        hp: PPOSettings = settings.hyperparameters  # type: ignore[assignment]  # checked by base
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
        self.hp = hp
        """The hyperparameters in use (``buffer_size`` as the rollout collects it)."""
        self.num_steps = hp.buffer_size // self.num_envs
        """Rollout length per environment."""
        self.action_space = envs.single_action_space
        self.layout = behavior_layout(
            envs.single_observation_space, settings.network_settings, self.behavior_name
        )
        """Where each part of an observation sits in the rows the rollout stores."""
        intrinsic = settings.reward_signals.intrinsic
        memory = settings.network_settings.memory
        agent_class = ActorCritic if memory is None else RecurrentActorCritic
        self.agent: ActorCritic | RecurrentActorCritic = agent_class(
            envs.single_observation_space,
            self.action_space,
            settings.network_settings,
            self.init_generator,
            num_values=1 + len(intrinsic),
        ).to(self.device)
        self.memory: RecurrentRollout | None = None
        """The memories and sequences of a recurrent agent (``network_settings.memory``)."""
        if memory is not None and isinstance(self.agent, RecurrentActorCritic):
            self.memory = RecurrentRollout(
                self.agent, self.num_envs, memory.sequence_length, hp.batch_size
            )
        experts = load_experts(
            settings,
            self.behavior_name,
            envs.single_observation_space,
            self.action_space,
            self.device,
        )
        # Built after the agent: its initial weights are those of an extrinsic-only run.
        self.signals = make_reward_signals(
            settings.reward_signals,
            flat_obs_dim(envs.single_observation_space),
            self.action_space,
            self.init_generator,
            self.device,
            experts=experts,
            normalize=self.agent.normalizer,
            sampler=self.generator,
        )
        """The intrinsic reward signals by YAML key (empty: extrinsic only)."""
        self._signal_modules = nn.ModuleDict(self.signals)  # a module: synchronize shares it
        self.signal_rewards: list[npt.NDArray[np.float32]] = []
        """Each intrinsic signal's ``(T, N)`` rewards of the last rollout."""
        self._signal_returns = np.zeros((len(intrinsic), self.num_envs), dtype=np.float64)
        """Each intrinsic signal's reward so far in each environment's episode."""
        self.flat_params = flatten_parameters(self.agent)
        """All of the agent's parameters (and gradients) as one tensor, for the optimizer."""
        self.optimizer = make_adam(self.flat_params, hp.learning_rate, eps=1e-5)
        self._analytic_gradients = supports(self.agent)
        """Whether the gradient step computes its gradients without autograd."""
        agent = self.agent
        self.cloning = (
            make_behavioral_cloning(
                settings,
                experts,
                params=self.flat_params,
                policy=actor_critic_output(agent, self.generator),
                normalize=agent.normalizer,
                learning_rate=hp.learning_rate,
                batch_size=hp.batch_size,
                discrete=agent.discrete,
                generator=self.generator,
                world=self.world,
            )
            if isinstance(agent, ActorCritic)  # the settings refuse cloning with memory
            else None
        )
        """``behavioral_cloning``, when configured."""
        self._clip_actions = isinstance(self.action_space, spaces.Box)
        if isinstance(self.action_space, spaces.Box):
            self._action_low = self.action_space.low.reshape(-1)
            self._action_high = self.action_space.high.reshape(-1)
            self._action_shape = (self.num_envs, *self.action_space.shape)
        self._allocate_rollout()
        self._acting = ActingCopy(self.agent) if settings.threaded else None
        """threaded: the agent the rollout acts with while the update trains ``agent``."""

    def _caught_up(self) -> None:
        if self._acting is not None:
            self._acting.refresh()

    def _allocate_rollout(self) -> None:
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

    # -- the algorithm -------------------------------------------------------------------------

    def advance(self) -> None:
        """Collect one rollout, update the policy on it, report."""
        hp = self.hp
        with hierarchical_timer("rollout"):
            next_value = self._collect_rollout()
        self._sync_step()  # distributed: the schedules follow the global step
        # A non-finite reward or observation (on_nonfinite: skip; the ranks agree): no update.
        skip, self._skip_update = self._skip_update, False
        if self.finite.policy == "skip" and self.world.any(skip):
            self._end_period()
            return
        # Scheduled values are taken at update time, from the step count that includes the
        # rollout just collected, as ML-Agents' optimizer (``get_current_step()`` in
        # ``update``) and SB3 (``progress_remaining`` after ``collect_rollouts``) both do: the
        # first update already runs slightly decayed, the one that reaches max_steps at the
        # floor.
        lr = self._scheduled(hp.learning_rate, hp.learning_rate_schedule, LEARNING_RATE_FLOOR)
        clip_coef = self._scheduled(hp.epsilon, hp.epsilon_schedule, EPSILON_FLOOR)
        ent_coef = self._scheduled(hp.beta, hp.beta_schedule, BETA_FLOOR)
        self.optimizer.lr = lr
        if self.signals:
            self.signal_rewards = self._evaluate_signals()
        advantages, returns = self._advantages(next_value)
        # The update reads this batch only (threaded: the next rollout, collected while it
        # runs, writes the rollout's arrays).
        b = self._batch(advantages, returns)
        with hierarchical_timer("update"):
            self._run_update(self._update, b, clip_coef, ent_coef)

        report = self.reporter.add_stat
        report("Policy/Learning Rate", lr)
        report("Policy/Epsilon", clip_coef)
        report("Policy/Beta", ent_coef)
        if not self.signals:
            report("Policy/Extrinsic Value Estimate", float(self.b_values.mean()))
        else:
            b_values = self.b_values.flatten(0, 1)
            report("Policy/Extrinsic Value Estimate", float(b_values[:, 0].mean()))
            for i, signal in enumerate(self.signals.values(), start=1):
                report(f"Policy/{signal.stat_name} Value Estimate", float(b_values[:, i].mean()))
        self._end_period()

    def _scheduled(self, initial: float, schedule: str, floor: float) -> float:
        if schedule == "constant":
            return initial
        return linear_decay(initial, floor, self.step, self.settings.max_steps)

    @torch.no_grad()
    def _collect_rollout(self) -> torch.Tensor:
        """Step every environment ``num_steps`` times; returns ``V`` of the last observations.

        Fills ``b_obs``, ``b_actions``, ``b_logprobs``, ``b_values`` (``(T, N, ...)`` tensors)
        and the ``(T, N)`` numpy arrays ``rewards``, ``terminated``, ``truncated``,
        ``bootstrap`` and ``valid``.
        """
        obs_list, action_list, logprob_list = [], [], []
        finals: list[_Finals] = []
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

    @torch.no_grad()
    def _evaluate_signals(self) -> list[npt.NDArray[np.float32]]:
        """Each intrinsic signal's ``(T, N)`` rewards of the rollout's transitions (0 on the
        autoreset steps of NEXT_STEP mode); reports each signal's reward per finished episode
        (``Policy/<Name> Reward``)."""
        T, N = self.num_steps, self.num_envs
        obs = self.b_obs.flatten(0, 1)
        actions = self.b_actions.flatten(0, 1)
        next_obs = self.b_next_obs.flatten(0, 1)
        rewards = [
            np.where(self.valid, s.evaluate(obs, actions, next_obs).reshape(T, N), 0.0)
            for s in self.signals.values()
        ]
        ended = (self.terminated | self.truncated) & self.valid
        report = self.reporter.add_stat
        for t in range(T):
            for i, signal in enumerate(self.signals.values()):
                self._signal_returns[i] += rewards[i][t]
                for n in np.flatnonzero(ended[t]):
                    report(f"Policy/{signal.stat_name} Reward", float(self._signal_returns[i, n]))
            self._signal_returns[:, ended[t]] = 0.0
        return [r.astype(np.float32) for r in rewards]

    def _step_envs(self, t: int, action: torch.Tensor) -> _Finals | None:
        """Step every environment with ``action``, record row ``t`` of the rollout; returns
        the normalised final observations of the episodes a time limit ended, if any."""
        env_action = action.cpu().numpy()
        if self._clip_actions:
            env_action = np.clip(env_action, self._action_low, self._action_high)
            env_action = env_action.reshape(self._action_shape)
        next_obs, reward, terminated, truncated, infos = self.envs.step(env_action)
        finite = self.finite.step(self.step, reward, next_obs)
        if not finite.all():  # on_nonfinite: skip; this rollout's update is skipped
            reward, next_obs = zeroed(reward, finite), zeroed(next_obs, finite)
            self._skip_update = True
        dones = terminated | truncated
        self.valid[t] = valid = self.autoreset.observe(dones)
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        self._record_step(reward, dones, valid)
        self.next_obs = next_obs
        # A time-limited episode is worth V(final observation): keep it to value later.
        # (In NEXT_STEP mode the next step observes it; see _advantages.)  Intrinsic signals
        # value terminated episodes' final observations too, and see them as s'.
        ended = dones if self.signals else truncated & ~terminated
        if not ended.any() or self.autoreset.next_step:
            return None
        final = final_observations(infos, ended)
        final_x = self.agent.normalizer(self.layout.tensor(final, self.device))
        return t, ended, final_x

    def _value_rollout(self, finals: list[_Finals]) -> torch.Tensor:
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
        self.agent.normalizer.update(obs)
        x: torch.Tensor = self.agent.normalizer(obs)
        return x

    def _advantages(self, next_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over the rollout, cutting trajectories every ``time_horizon`` steps; with
        intrinsic signals, GAE per signal and the sum of their advantages, one return column
        per value head."""
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
            per_signal = [
                self._gae(
                    rewards,
                    values[..., i],
                    self.bootstrap[..., i],
                    next_v[:, i],
                    gammas[i],
                    episodic=episodic[i],
                )
                for i, rewards in enumerate([self.rewards, *self.signal_rewards])
            ]
            advantages = np.sum([a for a, _ in per_signal], axis=0, dtype=np.float32)
            returns = np.stack([r for _, r in per_signal], axis=-1)
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
            # the finals of terminated episodes were valued for the intrinsic signals
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

    def _update(self, b: _Minibatch, clip_coef: float, ent_coef: float) -> None:
        """``num_epoch`` passes of minibatch gradient steps on the clipped objective over the
        batch ``b`` (:meth:`_batch`)."""
        hp = self.hp
        batch_size = b[0].shape[0]
        # From the settings, not the batch: every rank must take as many gradient steps (each
        # is an all-reduce), even when dropped autoreset steps leave them different batches.
        num_minibatches = max(1, min(hp.buffer_size // hp.batch_size, batch_size))
        if num_minibatches == 1 and hp.normalize_advantage and self.memory is None:
            # One minibatch is the whole batch, the same every epoch: normalise it once.
            b = (*b[:3], _normalized(b[3]), *b[4:])

        pg_losses, v_losses, entropies = [], [], []
        signal_losses: dict[str, list[torch.Tensor]] = {}
        for epoch in range(hp.num_epoch):
            for mb in self._minibatches(b, num_minibatches):
                # Entropy enters the loss only with a nonzero beta; otherwise it is measured
                # once per minibatch in the first epoch (the rollout policy's), for the stats.
                pg_loss, v_loss, entropy = self._gradient_step(
                    mb, clip_coef, ent_coef, with_entropy=ent_coef > 0.0 or epoch == 0
                )
                pg_losses.append(pg_loss)
                v_losses.append(v_loss)
                if entropy is not None:
                    entropies.append(entropy)
                # -- the intrinsic signals' models learn from the same minibatch (ML-Agents)
                for signal in self.signals.values():
                    for key, loss in signal.update(mb[0], mb[1], mb[5], self.world).items():
                        signal_losses.setdefault(key, []).append(loss)
        self.finite.check_updates(self.step)  # on_nonfinite: stop (one sync per update)

        report = self.reporter.add_stat
        # Without the gradient steps skipped as non-finite (on_nonfinite: skip), if any.
        for key, losses in (("Losses/Policy Loss", pg_losses), ("Losses/Value Loss", v_losses)):
            mean = finite_mean(losses)
            if mean is not None:
                report(key, mean)
        report("Policy/Entropy", float(torch.stack(entropies).mean()))
        for key, losses in signal_losses.items():
            report(key, float(torch.stack(losses).mean()))
        # -- behavioral cloning: once per update, after it (ML-Agents)
        if self.cloning is not None:
            for key, value in self.cloning.update(self.step).items():
                report(key, value)

    def _batch(self, advantages: torch.Tensor, returns: torch.Tensor) -> _Minibatch:
        """The rollout flattened into one batch (``b_obs``, ``b_actions``, ``b_logprobs``,
        ``b_advantages``, ``b_returns``, and ``b_next_obs`` with intrinsic signals), without
        the autoreset steps of NEXT_STEP mode."""
        b: _Minibatch = (
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

    def _minibatches(self, b: _Minibatch, num_minibatches: int) -> Iterator[_Minibatch]:
        """One epoch's minibatches of ``b``, shuffled, advantages normalised per minibatch.

        With memory, whole sequences: as many minibatches as they fill (see
        :mod:`evtrain.trainers.ppo_memory`), whatever ``num_minibatches`` says.
        """
        if self.memory is not None:
            for mb in self.memory.minibatches(b, self.generator, self.world):
                yield (*mb[:3], _normalized(mb[3]), *mb[4:]) if self.hp.normalize_advantage else mb
            return
        if num_minibatches == 1:
            # Nothing to shuffle: the order of a single minibatch does not matter.
            yield b
            return
        perm = torch.randperm(b[0].shape[0], generator=self.generator, device=self.device)
        for mb_inds in torch.tensor_split(perm, num_minibatches):
            mb = tuple(t[mb_inds] for t in b)
            if self.hp.normalize_advantage:
                mb = (*mb[:3], _normalized(mb[3]), *mb[4:])
            yield mb

    def _gradient_step(
        self, mb: _Minibatch, clip_coef: float, ent_coef: float, *, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One optimizer step on minibatch ``mb``; returns ``pg_loss``, ``v_loss`` and the mean
        entropy (``None`` unless ``with_entropy``), detached.

        The gradients come from :mod:`~evtrain.trainers.ppo_gradients` where it supports the
        agent (the same numbers, without autograd's per-operation cost), else from autograd.
        """
        flat_params = self.flat_params
        zero_grad_(flat_params)
        if self._analytic_gradients and isinstance(self.agent, ActorCritic):
            pg_loss, v_loss, entropy_loss = ppo_gradients(
                self.agent,
                mb,
                clip_coef=clip_coef,
                vf_coef=self.hp.vf_coef,
                ent_coef=ent_coef,
                with_entropy=with_entropy,
            )
        else:
            pg_loss, v_loss, entropy_loss = self._autograd_backward(
                mb, clip_coef, ent_coef, with_entropy=with_entropy
            )
        self.world.average_(flat_params.grad)  # data parallel: the mean over ranks
        grad_norm = clip_grad_norm_(flat_params, self.hp.max_grad_norm)
        if self.finite.update(self.step, pg_loss + v_loss, grad_norm):
            self.optimizer.step()
        return pg_loss, v_loss, entropy_loss

    def _autograd_backward(
        self, mb: _Minibatch, clip_coef: float, ent_coef: float, *, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The loss on minibatch ``mb`` and its gradients through autograd (into the zeroed
        ``.grad`` buffers); returns the detached ``pg_loss``, ``v_loss`` and mean entropy."""
        mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns = mb[:5]
        if isinstance(self.agent, ActorCritic):
            newlogprob, entropy, newvalue = self.agent.evaluate(
                mb_obs, mb_actions, entropy=with_entropy, entropy_grad=ent_coef > 0.0
            )
        else:  # with memory: the minibatch's sequences, from their recorded memories
            newlogprob, entropy, newvalue = self._memory().evaluate(
                mb_actions, entropy=with_entropy, entropy_grad=ent_coef > 0.0
            )

        # -- policy loss: clipped surrogate objective (paper eq. 7)
        pg_loss = clipped_surrogate_loss(newlogprob, mb_logprobs, mb_advantages, clip_coef)
        # -- value loss: regression onto the GAE returns
        v_loss = F.mse_loss(newvalue, mb_returns)
        loss = pg_loss + self.hp.vf_coef * v_loss
        # -- entropy bonus (paper eq. 9)
        entropy_loss = None
        if entropy is not None:
            entropy_loss = entropy.mean()
            if ent_coef > 0.0:
                loss = loss - ent_coef * entropy_loss

        torch.autograd.backward(loss)
        return (
            pg_loss.detach(),
            v_loss.detach(),
            None if entropy_loss is None else entropy_loss.detach(),
        )

    # -- what the runner needs ------------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """Raw observations to deterministic actions (argmax, or the clipped mean); with
        memory, ``(observations, memory)`` to ``(actions, next memory)``."""
        if isinstance(self.agent, RecurrentActorCritic):
            return RecurrentPolicy(self.agent, self.action_space).eval()
        return DeterministicPolicy(self.agent, self.action_space).eval()

    def _memory(self) -> RecurrentRollout:
        if self.memory is None:
            raise RuntimeError(f"behavior {self.behavior_name!r} has no network_settings.memory")
        return self.memory

    def _state_dict(self) -> dict[str, Any]:
        state = {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.signals:
            state["reward_signals"] = {
                name: signal.signal_state_dict() for name, signal in self.signals.items()
            }
        if self.cloning is not None:
            state["behavioral_cloning"] = self.cloning.state_dict()
        return state

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        for name, saved in self._saved_signals(state).items():
            self.signals[name].model.load_state_dict(saved["model"])

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_weights(state)
        # FlatAdam copies the state in: two trainers loaded from one state share nothing.
        self.optimizer.load_state_dict(state["optimizer"])
        for name, saved in self._saved_signals(state).items():
            self.signals[name].optimizer.load_state_dict(saved["optimizer"])
        if self.cloning is not None and "behavioral_cloning" in state:
            self.cloning.load_state_dict(state["behavioral_cloning"])

    def _saved_signals(self, state: dict[str, Any]) -> dict[str, Any]:
        saved: dict[str, Any] = state.get("reward_signals", {})
        if set(saved) != set(self.signals):
            raise ValueError(
                f"the state has the intrinsic reward signals {sorted(saved)}, behavior "
                f"{self.behavior_name!r} is configured with {sorted(self.signals)}; "
                "configure the reward signals of the run that saved it"
            )
        return saved
