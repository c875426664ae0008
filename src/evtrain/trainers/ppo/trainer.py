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

With intrinsic reward providers (``reward_signals.gail``, ``curiosity``, ``rnd``; see
:mod:`evtrain.trainers.rewards.build`) the critic has one value head per signal, as in ML-Agents:
each signal's rewards get GAE with its own ``gamma`` and value head, the advantage is their
sum, and the signals' models train on the update's minibatches.  With ``behavioral_cloning``
the policy also learns the demonstrations' actions after each update
(:mod:`evtrain.trainers.rewards.behavioral_cloning`).  Without them the update is the extrinsic-only
one, step for step.

With ``network_settings.memory`` the policy and the critic are recurrent
(:class:`~evtrain.trainers.networks.recurrent.RecurrentActorCritic`): the rollout carries
their memories and the update trains on sequences (:mod:`evtrain.trainers.loops.recurrent_rollout`).
Without it, nothing here changes.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import numpy as np
import torch
from torch import nn

from evtrain.timers import hierarchical_timer
from evtrain.trainers.loops.recurrent_rollout import RecurrentRollout
from evtrain.trainers.loops.schedules import (
    BETA_FLOOR,
    EPSILON_FLOOR,
    report_scheduled,
    scheduled,
)
from evtrain.trainers.networks.mlp import flatten_parameters
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy, flat_obs_dim
from evtrain.trainers.networks.recurrent import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.networks.sampled import SampledPolicy
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.optim import make_adam
from evtrain.trainers.ppo.gradients import supports
from evtrain.trainers.ppo.update import PPOUpdate, clipped_surrogate_loss
from evtrain.trainers.rewards.behavioral_cloning import BehavioralCloning, actor_critic_output
from evtrain.trainers.rewards.build import (
    Expert,
    load_experts,
    make_behavioral_cloning,
    make_reward_providers,
)
from evtrain.trainers.settings import PPOSettings
from evtrain.trainers.threaded import ActingCopy

logger = logging.getLogger("evtrain")

__all__ = ["BETA_FLOOR", "EPSILON_FLOOR", "PPOTrainer", "clipped_surrogate_loss"]


class PPOTrainer(PPOUpdate):
    """PPO for ``Discrete`` and ``Box`` action spaces: the on-policy loop
    (:mod:`~evtrain.trainers.loops.on_policy`) wired to PPO's update
    (:mod:`~evtrain.trainers.ppo.update`).

    Its networks are in :mod:`evtrain.trainers.networks.policies`.
    """

    settings_type = PPOSettings

    def _setup(self) -> None:
        settings, envs = self.settings, self.envs
        self.hp = hp = self._hyperparameters()
        """The hyperparameters in use (``buffer_size`` as the rollout collects it)."""
        self.num_steps = hp.buffer_size // self.num_envs
        """Rollout length per environment."""
        self.action_space = envs.single_action_space
        self.layout = behavior_layout(
            envs.single_observation_space,
            settings.network_settings,
            self.behavior_name,
            self.action_space,
        )
        """Where each part of an observation sits in the rows the rollout stores."""
        self._build_agent()
        experts = load_experts(
            settings,
            self.behavior_name,
            envs.single_observation_space,
            self.action_space,
            self.device,
        )
        # Built after the agent: its initial weights are those of an extrinsic-only run.
        self._build_providers(experts)
        self.flat_params = flatten_parameters(self.agent)
        self.optimizer = make_adam(self.flat_params, hp.learning_rate, eps=1e-5)
        self._analytic_gradients = supports(self.agent)
        self.cloning = self._build_cloning(experts)
        """``behavioral_cloning``, when configured."""
        self._allocate_rollout()
        self._acting = ActingCopy(self.agent) if settings.threaded else None
        """threaded: the agent the rollout acts with while the update trains ``agent``."""

    def _hyperparameters(self) -> PPOSettings:
        """The settings' hyperparameters, ``buffer_size`` rounded up to what a rollout holds."""
        hp: PPOSettings = self.settings.hyperparameters  # type: ignore[assignment]  # base checks
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

    def _build_agent(self) -> None:
        """``agent`` (one value head per reward provider) and, with memory, its rollout."""
        settings = self.settings
        memory = settings.network_settings.memory
        args = (
            self.envs.single_observation_space,
            self.action_space,
            settings.network_settings,
            self.init_generator,
        )
        num_values = 1 + len(settings.reward_signals.intrinsic)
        if memory is None:
            shared = self.hp.shared_critic
            self.agent = ActorCritic(*args, num_values=num_values, shared_critic=shared)
        else:  # (the settings refuse shared_critic with memory)
            self.agent = RecurrentActorCritic(*args, num_values=num_values)
        self.agent.to(self.device)
        self.memory = None
        """The memories and sequences of a recurrent agent (``network_settings.memory``)."""
        if memory is not None and isinstance(self.agent, RecurrentActorCritic):
            self.memory = RecurrentRollout(
                self.agent, self.num_envs, memory.sequence_length, self.hp.batch_size
            )

    def _build_providers(self, experts: dict[str, Expert]) -> None:
        """The intrinsic reward providers and their per-episode bookkeeping."""
        self.signals = make_reward_providers(
            self.settings.reward_signals,
            flat_obs_dim(self.envs.single_observation_space),
            self.action_space,
            self.init_generator,
            self.device,
            experts=experts,
            normalize=self.agent.normalizer,
            sampler=self.generator,
        )
        """The intrinsic reward providers by YAML key (empty: extrinsic only)."""
        self._provider_modules = nn.ModuleDict(self.signals)  # a module: synchronize shares it
        self.provider_rewards = []
        """Each intrinsic reward provider's ``(T, N)`` rewards of the last rollout."""
        self._provider_returns = np.zeros(
            (len(self.settings.reward_signals.intrinsic), self.num_envs), dtype=np.float64
        )
        """Each intrinsic reward provider's reward so far in each environment's episode."""

    def _build_cloning(self, experts: dict[str, Expert]) -> BehavioralCloning | None:
        agent, hp = self.agent, self.hp
        if not isinstance(agent, ActorCritic):  # the settings refuse cloning with memory
            return None
        return make_behavioral_cloning(
            self.settings,
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

    # -- the algorithm -------------------------------------------------------------------------

    def advance(self) -> None:
        """Collect one rollout, update the policy on it, report."""
        next_value = self._collect_for_update()
        if next_value is None:
            return
        values = scheduled(self.hp, self.step, self.settings.max_steps)
        self.optimizer.lr = values.learning_rate
        if self.signals:
            self.provider_rewards = self._evaluate_providers()
        advantages, returns = self._advantages(next_value)
        # The update reads this batch only (threaded: the next rollout, collected while it
        # runs, writes the rollout's arrays).
        b = self._batch(advantages, returns)
        with hierarchical_timer("update"):
            self._run_update(self._update, b, values.epsilon, values.beta)

        report_scheduled(self.reporter, values)
        report = self.reporter.add_stat
        if not self.signals:
            report("Policy/Extrinsic Value Estimate", float(self.b_values.mean()))
        else:
            b_values = self.b_values.flatten(0, 1)
            report("Policy/Extrinsic Value Estimate", float(b_values[:, 0].mean()))
            for i, signal in enumerate(self.signals.values(), start=1):
                report(f"Policy/{signal.stat_name} Value Estimate", float(b_values[:, i].mean()))
        self._end_period()

    # -- what the runner needs ------------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """Raw observations to deterministic actions (argmax, or the clipped mean); with
        memory, ``(observations, memory)`` to ``(actions, next memory)``."""
        if isinstance(self.agent, RecurrentActorCritic):
            return RecurrentPolicy(self.agent, self.action_space).eval()
        return DeterministicPolicy(self.agent, self.action_space).eval()

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        """Raw observations to actions drawn from the policy (not recurrent: ``self_play``
        refuses memory)."""
        if not isinstance(self.agent, ActorCritic):
            return self.policy_module()
        return SampledPolicy(self.agent, self.action_space, generator).eval()

    def _state_dict(self) -> dict[str, Any]:
        state = {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.signals:
            state["reward_signals"] = {
                name: signal.provider_state_dict() for name, signal in self.signals.items()
            }
        if self.cloning is not None:
            state["behavioral_cloning"] = self.cloning.state_dict()
        return state

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        for name, saved in self._saved_providers(state).items():
            self.signals[name].model.load_state_dict(saved["model"])

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_weights(state)
        # FlatAdam copies the state in: two trainers loaded from one state share nothing.
        self.optimizer.load_state_dict(state["optimizer"])
        for name, saved in self._saved_providers(state).items():
            self.signals[name].optimizer.load_state_dict(saved["optimizer"])
        if self.cloning is not None and "behavioral_cloning" in state:
            self.cloning.load_state_dict(state["behavioral_cloning"])

    def _saved_providers(self, state: dict[str, Any]) -> dict[str, Any]:
        saved: dict[str, Any] = state.get("reward_signals", {})
        if set(saved) != set(self.signals):
            raise ValueError(
                f"the state has the intrinsic reward providers {sorted(saved)}, behavior "
                f"{self.behavior_name!r} is configured with {sorted(self.signals)}; "
                "configure the reward providers of the run that saved it"
            )
        return saved
