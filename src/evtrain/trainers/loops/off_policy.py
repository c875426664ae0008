"""The off-policy loop (ML-Agents' ``off_policy_trainer``, SB3's ``OffPolicyAlgorithm``): step every
environment once, store the transitions in a replay buffer, and once ``buffer_init_steps``
random-action steps are in, take one gradient step per ``steps_per_update`` environment steps
(the updates-to-data ratio).  The algorithm's update is not here: an off-policy trainer
subclasses :class:`OffPolicyTrainer` and supplies its hooks (SAC's:
:class:`~evtrain.trainers.sac.trainer.SACTrainer`).

What a subclass's ``_setup`` sets: ``hp`` (:class:`OffPolicyHyperparameters`), ``layout``
(:func:`~evtrain.trainers.observations.behavior_layout`), ``action_space``, ``replay`` (a
:class:`~evtrain.trainers.loops.replay.ReplayBuffer`, or a buffer of sequences),
``num_updates``, ``_stats_sum``/``update_stats``/``_stats_updates``/``_lr_sum`` (the update
statistics summed until a summary) and ``_acting`` (threaded, else ``None``).  The hooks:
:meth:`~OffPolicyTrainer._act`, :meth:`~OffPolicyTrainer._gradient_step`,
:meth:`~OffPolicyTrainer._optimizers`, and optionally :meth:`~OffPolicyTrainer._store`,
:meth:`~OffPolicyTrainer._observed`, :meth:`~OffPolicyTrainer._providers_update`.

With ``threaded: true`` the gradient steps due after one environment step run on the update
thread while the environments take the next step, acting with a copy of the networks from
before those gradient steps; the transitions of that step are stored once they are done.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces

from evtrain.timers import hierarchical_timer
from evtrain.trainers.base import Trainer, linear_decay
from evtrain.trainers.envs import final_observations
from evtrain.trainers.finite import zeroed
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import ObservationLayout
from evtrain.trainers.optim import LEARNING_RATE_FLOOR, FlatAdam
from evtrain.trainers.threaded import ActingCopy


def space_shape(space: spaces.Space[Any]) -> tuple[int, ...]:
    """An action's shape (a ``Space``'s ``shape`` is optional in its type)."""
    return tuple(space.shape or ())


class OffPolicyHyperparameters(Protocol):
    """What the loop reads of a trainer's hyperparameters (:class:`SACSettings` has them)."""

    @property
    def batch_size(self) -> int: ...
    @property
    def buffer_init_steps(self) -> int: ...
    @property
    def steps_per_update(self) -> float: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def learning_rate_schedule(self) -> str: ...


class Replay(Protocol):
    """What the loop does with a replay buffer."""

    def __len__(self) -> int: ...
    def add(self, *transitions: Any) -> None: ...


class OffPolicyTrainer(Trainer):
    """Replay, warm-up and updates-to-data for an off-policy algorithm (see the module's
    docstring)."""

    hp: OffPolicyHyperparameters
    normalizer: ObservationNormalizer
    layout: ObservationLayout
    action_space: spaces.Space[Any]
    replay: Replay
    num_updates: int
    """Gradient steps taken so far."""
    update_stats: tuple[str, ...]
    """The names of :attr:`_stats_sum`'s statistics."""
    _stats_sum: torch.Tensor
    """The sum of every update's statistics since the last summary (see _write_summary)."""
    _stats_updates: int
    _lr_sum: float
    _acting: ActingCopy[Any] | None
    _held: list[tuple[torch.Tensor, tuple[npt.NDArray[Any], ...]]]
    """threaded: each step's observations and transitions, stored once the gradient steps
    running meanwhile are done (they sample the replay buffer and normalise with it)."""
    _seen_t: torch.Tensor
    """threaded: the observations of the step being taken that the normaliser counts."""
    _unfinite: npt.NDArray[np.bool_] | None = None
    """Environments whose last step was non-finite and zeroed (``on_nonfinite: skip``): their
    next transition starts from the zeroed observation and is not stored either."""

    # -- the hooks an algorithm supplies --------------------------------------------------------

    @abc.abstractmethod
    def _act(
        self, obs: npt.NDArray[np.float32], obs_t: torch.Tensor, acting: Any
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(action as stored, action as the environments take it)`` for observations
        ``obs`` (rows of :attr:`layout`; ``obs_t`` on the device), acting with ``acting``
        (threaded) or the trained networks; random while warming up."""

    @abc.abstractmethod
    def _gradient_step(self) -> None:
        """One gradient step on a minibatch of :attr:`replay`."""

    @abc.abstractmethod
    def _optimizers(self) -> tuple[FlatAdam, ...]:
        """The optimizers the learning-rate schedule sets."""

    def _observed(self, *step: npt.NDArray[Any]) -> None:
        """``(obs, action, real_next, dones, valid)`` of a step, for reward providers."""

    def _providers_update(self, step: int) -> None:
        """What else learns after the gradient steps of environment step ``step``."""

    def _updates_always(self) -> bool:
        """Whether :meth:`_learn` runs even with no gradient step due."""
        return False

    def _store(
        self,
        step: tuple[npt.NDArray[Any], ...],
        keep: npt.NDArray[np.bool_],
        obs_t: torch.Tensor,
    ) -> None:
        """Store the ``keep`` rows of ``step`` ``(s, a, r, s', terminated, done)``; threaded:
        once caught up (see :meth:`_caught_up`)."""
        obs, action, reward, real_next, terminated, _ = step
        transitions = (obs[keep], action[keep], reward[keep], real_next[keep], terminated[keep])
        if self._acting is None:
            self.replay.add(*transitions)
        else:
            self._held.append((self._seen_t.clone(), transitions))

    # -- the loop --------------------------------------------------------------------------------

    def advance(self) -> None:
        """Step every environment once, store the transitions, take the due gradient steps."""
        # -- act: uniform random actions while warming up, then the algorithm's policy
        obs = self.layout.rows(self.next_obs)
        obs_t = torch.as_tensor(obs, device=self.device)
        if self._acting is not None:  # what the normaliser will count once caught up
            self._seen_t = self._acting_rows(obs_t)
        acting = self._acting.module if self._acting is not None else None
        action, env_action = self._act(obs, obs_t, acting)
        self._step_envs(obs, obs_t, action, env_action)
        self._learn_due()

    def _step_envs(
        self,
        obs: npt.NDArray[np.float32],
        obs_t: torch.Tensor,
        action: npt.NDArray[Any],
        env_action: npt.NDArray[Any],
    ) -> None:
        """Step and store ``(s, a, r, s', terminated)``; ``s'`` is the final observation where
        an episode ended."""
        next_obs, reward, terminated, truncated, infos = self.envs.step(
            env_action.reshape((self.num_envs, *space_shape(self.action_space)))
        )
        finite = self.finite.step(self.step, reward, next_obs)
        dones = terminated | truncated
        keep = valid = self.autoreset.observe(dones, infos)  # keep: the transitions stored
        if not finite.all() or self._unfinite is not None:  # on_nonfinite: skip
            reward, next_obs = zeroed(reward, finite), zeroed(next_obs, finite)
            stored = finite if self._unfinite is None else finite & ~self._unfinite
            self._unfinite = None if finite.all() else ~finite
            keep = valid & stored
        real_next = self.layout.rows(next_obs, copy=True)
        if dones.any() and not self.autoreset.next_step:
            real_next[dones] = self.layout.rows(final_observations(infos, dones))
        strength = self.settings.reward_signals.extrinsic.strength
        self._store((obs, action, reward * strength, real_next, terminated, dones), keep, obs_t)
        self._record_step(reward, dones, valid)
        self._record_infos(infos, dones, valid)
        self._observed(obs, action, real_next, dones, valid)
        self.next_obs = next_obs

    def _learn_due(self) -> None:
        """One gradient step per ``steps_per_update`` environment steps after warm-up."""
        hp = self.hp
        self._sync_step()  # distributed: count every rank's steps, so all ranks agree on `due`
        due = int((self.step - hp.buffer_init_steps) / hp.steps_per_update)
        self.wait_for_update()  # threaded: the last step's gradient steps; this step stored
        count, lr = 0, hp.learning_rate
        if len(self.replay) >= hp.batch_size:
            if hp.learning_rate_schedule == "linear":
                lr = linear_decay(lr, LEARNING_RATE_FLOOR, self.step, self.settings.max_steps)
            for optimizer in self._optimizers():
                optimizer.lr = lr
            count = max(0, due - self.num_updates)
        if count or self._updates_always():
            # threaded: the signals' and cloning's updates run after the gradient steps on the
            # update thread too: they train the actor and the signal models the gradient steps
            # use, and sample the replay buffer with the same generator
            with hierarchical_timer("update"):
                self._run_update(self._learn, count, lr, self.step)
        self.num_updates = max(self.num_updates, due)
        self._end_period()

    def _learn(self, count: int, lr: float, step: int) -> None:
        """``count`` gradient steps at learning rate ``lr``, then the signals' and cloning's
        updates due at environment step ``step``."""
        for _ in range(count):
            self._gradient_step()
            self._lr_sum += lr
        self.finite.check_updates(step)  # on_nonfinite: stop (one sync per environment step)
        self._providers_update(step)

    def _caught_up(self) -> None:
        # The observations and transitions of the steps taken while gradient steps ran, in
        # order: the trained normaliser and the replay buffer end up as they would unthreaded.
        for obs_t, transitions in self._held:
            self.normalizer.update(obs_t)
            self.replay.add(*transitions)
        self._held.clear()
        if self._acting is not None:
            self._acting.refresh()

    def _write_summary(self, label: int) -> None:
        if self._stats_updates:
            means = (self._stats_sum / self._stats_updates).tolist()
            for key, value in zip(self.update_stats, means, strict=True):
                self.reporter.add_stat(key, value)
            self.reporter.add_stat("Policy/Learning Rate", self._lr_sum / self._stats_updates)
            self._stats_sum.zero_()
            self._stats_updates = 0
            self._lr_sum = 0.0
        super()._write_summary(label)
