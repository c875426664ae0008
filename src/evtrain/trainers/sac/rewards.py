"""SAC's intrinsic reward providers (gail, curiosity, rnd) and behavioral cloning.

How SAC uses the signals, and where it differs from ML-Agents:

- **Rewards at update time.** The replay buffer keeps the environment's reward (``extrinsic``
  strength applied).  Each gradient step evaluates every signal on its sampled minibatch
  (observations normalised as the critics see them) and learns from the sum
  ``r_extrinsic + sum_i strength_i * r_i``, so a transition is paid what the signals' models
  say now, not what they said when it was collected (ML-Agents does the same).
- **One critic, one gamma.** ML-Agents' SAC gives each signal its own Q head with its own
  ``gamma``, and its curiosity and rnd heads ignore episode ends.  evtrain's twin critics learn
  the summed reward, discounted with the extrinsic ``gamma``, with no bootstrap after a
  termination, for every signal: an intrinsic reward provider's ``gamma`` is not applied (a warning
  says so when it differs), and there is no ``Policy/<Signal> Value Estimate``.
- **The signals' models** train on minibatches of their own from the replay buffer, one per
  ``reward_signal_steps_per_update`` environment steps (after ``buffer_init_steps``), as in
  ML-Agents.
- **Stats:** ``Policy/<Signal> Reward`` is each finished episode's sum of the signal's reward,
  evaluated as the transitions are collected; the losses keep their ML-Agents names.
- **Behavioral cloning** updates once per ``time_horizon`` steps of every environment (as
  ML-Agents updates once per trajectory), after ``buffer_init_steps``.  SAC's ``Box`` actions
  are in ``[-1, 1]``: the demonstrations' are rescaled from the action bounds.  With
  ``Discrete`` actions the signals see the action index (curiosity and gail one-hot it) and
  the cloning is the cross-entropy of the policy's logits, as for PPO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.bus.reporter import StatsReporter
from evtrain.trainers.loops.replay import Transitions
from evtrain.trainers.rewards.behavioral_cloning import BehavioralCloning, PolicyOutput
from evtrain.trainers.rewards.build import (
    load_experts,
    make_behavioral_cloning,
    make_reward_providers,
)
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.settings import SACSettings, TrainerSettings
from evtrain.world import World


class SACRewardProviders:
    """The signals and the cloning of one SAC trainer (see the module's docstring).

    :param action_space: ``Box``, or ``Discrete``/``MultiDiscrete`` (whose actions the
        trainer stores as ``[B, branches]`` indices).
    :param policy: the actor's differentiable action in ``[-1, 1]`` (``Box``) or its logits
        (``Discrete``) for normalised observations (for the cloning).
    :param actor_params: the actor's flat parameter buffer (for the cloning).
    """

    def __init__(
        self,
        settings: TrainerSettings,
        behavior_name: str,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        obs_dim: int,
        *,
        normalize: Callable[[torch.Tensor], torch.Tensor],
        policy: PolicyOutput,
        actor_params: nn.Parameter,
        num_envs: int,
        reporter: StatsReporter,
        init_generator: torch.Generator,
        generator: torch.Generator,
        device: torch.device,
        world: World,
    ) -> None:
        hp: SACSettings = settings.hyperparameters  # type: ignore[assignment]  # SAC's own
        self.hp = hp
        self.normalize = normalize
        self.reporter = reporter
        self.device = device
        self.world = world
        self.discrete = isinstance(action_space, spaces.Discrete)
        experts = load_experts(
            settings, behavior_name, observation_space, action_space, device, unit_actions=True
        )
        self.signals: dict[str, RewardProvider] = make_reward_providers(
            settings.reward_signals,
            obs_dim,
            action_space,
            init_generator,
            device,
            experts=experts,
            normalize=normalize,
            sampler=generator,
        )
        self.cloning: BehavioralCloning | None = make_behavioral_cloning(
            settings,
            experts,
            params=actor_params,
            policy=policy,
            normalize=normalize,
            learning_rate=hp.learning_rate,
            batch_size=hp.batch_size,
            discrete=self.discrete,
            generator=generator,
            world=world,
        )
        self.cloning_every = settings.time_horizon * num_envs * world.size
        """Environment steps (global) per cloning update."""
        self.signal_updates = 0
        """Updates of the signals' models so far."""
        self.cloning_updates = 0
        """Cloning updates so far."""
        self._episode = np.zeros((len(self.signals), num_envs), dtype=np.float64)
        """Each signal's reward so far in each environment's episode."""

    def __bool__(self) -> bool:
        return bool(self.signals) or self.cloning is not None

    def modules(self) -> nn.ModuleDict:
        """The signals' models, as one module (for the trainer's synchronisation)."""
        return nn.ModuleDict(self.signals)

    @torch.no_grad()
    def observe(
        self,
        obs: npt.NDArray[Any],
        actions: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        dones: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_],
    ) -> None:
        """Add one vector step's signal rewards to the episodes' sums; report the sums of the
        episodes it ended (``Policy/<Signal> Reward``)."""
        if not self.signals:
            return
        x = self.normalize(torch.as_tensor(obs, device=self.device))
        x_next = self.normalize(torch.as_tensor(next_obs, device=self.device))
        a = self._actions(torch.as_tensor(actions, device=self.device))
        for i, signal in enumerate(self.signals.values()):
            self._episode[i] += np.where(valid, signal.evaluate(x, a, x_next), 0.0)
        for n in np.flatnonzero(dones & valid):
            for i, signal in enumerate(self.signals.values()):
                self.reporter.add_stat(f"Policy/{signal.stat_name} Reward", self._episode[i, n])
        self._episode[:, dones & valid] = 0.0

    @torch.no_grad()
    def rewards(
        self,
        mb_obs: torch.Tensor,
        mb_actions: torch.Tensor,
        mb_next_obs: torch.Tensor,
        mb_rewards: torch.Tensor,
    ) -> torch.Tensor:
        """The minibatch's rewards plus every signal's (normalised observations)."""
        total = mb_rewards
        mb_actions = self._actions(mb_actions)
        for signal in self.signals.values():
            reward = signal.evaluate(mb_obs, mb_actions, mb_next_obs)
            total = total + torch.as_tensor(reward, device=mb_rewards.device)
        return total

    def update(self, step: int, replay: Transitions, rng: np.random.Generator) -> None:
        """The signals' model updates and the cloning updates due at environment step
        ``step`` (after ``buffer_init_steps``)."""
        hp = self.hp
        elapsed = step - hp.buffer_init_steps
        if self.signals and len(replay) >= hp.batch_size:
            due = int(elapsed / hp.reward_signal_steps_per_update)
            for _ in range(due - self.signal_updates):
                self._update_providers(replay, rng)
            self.signal_updates = max(self.signal_updates, due)
        if self.cloning is not None and elapsed >= 0:
            due = elapsed // self.cloning_every + 1
            for _ in range(due - self.cloning_updates):
                for key, value in self.cloning.update(step).items():
                    self.reporter.add_stat(key, value)
            self.cloning_updates = max(self.cloning_updates, due)

    def _update_providers(self, replay: Transitions, rng: np.random.Generator) -> None:
        mb_obs, mb_actions, _, mb_next_obs, _ = (
            t.to(self.device) for t in replay.sample(self.hp.batch_size, rng)
        )
        x, x_next = self.normalize(mb_obs), self.normalize(mb_next_obs)
        mb_actions = self._actions(mb_actions)
        for signal in self.signals.values():
            for key, loss in signal.update(x, mb_actions, x_next, self.world).items():
                self.reporter.add_stat(key, float(loss))

    def _actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions as the signals take them: a ``Discrete`` action's index ``[B]`` from the
        trainer's ``[B, 1]`` (the replay buffer's float column holds it exactly)."""
        return actions[:, 0].long() if self.discrete else actions

    def state_dict(self) -> dict[str, Any]:
        """The signals' models and optimizers, the cloning's optimizer and both counts."""
        state: dict[str, Any] = {
            "reward_signals": {n: s.provider_state_dict() for n, s in self.signals.items()},
            "signal_updates": self.signal_updates,
            "cloning_updates": self.cloning_updates,
        }
        if self.cloning is not None:
            state["behavioral_cloning"] = self.cloning.state_dict()
        return state

    def load_weights(self, state: dict[str, Any]) -> None:
        """The signals' models of :meth:`state_dict`'s output.

        :raises ValueError: it holds other signals than those configured.
        """
        saved = state.get("reward_signals", {})
        if set(saved) != set(self.signals):
            raise ValueError(
                f"the state has the intrinsic reward providers {sorted(saved)}, the behavior "
                f"is configured with {sorted(self.signals)}; configure the reward providers of "
                "the run that saved it"
            )
        for name, signal in self.signals.items():
            signal.model.load_state_dict(saved[name]["model"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        for name, signal in self.signals.items():
            signal.optimizer.load_state_dict(state["reward_signals"][name]["optimizer"])
        self.signal_updates = int(state.get("signal_updates", 0))
        self.cloning_updates = int(state.get("cloning_updates", 0))
        if self.cloning is not None and "behavioral_cloning" in state:
            self.cloning.load_state_dict(state["behavioral_cloning"])
