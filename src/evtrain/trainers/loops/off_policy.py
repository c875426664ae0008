"""The off-policy loop (ML-Agents' ``off_policy_trainer``, SB3's ``OffPolicyAlgorithm``): step every
environment once, store the transitions in a replay buffer, and once ``buffer_init_steps``
random-action steps are in, take one gradient step per ``steps_per_update`` environment steps
(the updates-to-data ratio).  The algorithm is not here: :class:`OffPolicyLoop` *has* one, an
:class:`~evtrain.trainers.algorithm.OffPolicyAlgorithm` built from an
:class:`~evtrain.trainers.algorithm.AlgorithmSpec`, which acts, learns from each
:class:`~evtrain.trainers.algorithm.ReplayBatch` the loop samples, and holds the networks.

A trainer type is a subclass that names its algorithm and its settings (SAC's:
:class:`~evtrain.trainers.sac.trainer.SACTrainer`)::

    class DQNTrainer(OffPolicyLoop):
        settings_type = DQNSettings  # has the fields of OffPolicyHyperparameters

        def build_algorithm(self, spec: AlgorithmSpec) -> DQN:
            return DQN(spec)

The loop owns the rest: the environments, the replay buffer (of sequences with
``network_settings.memory``, each environment's memories carried between steps), the
warm-up, the sampling, the learning-rate schedule, the update thread, the non-finite guard
(:class:`~evtrain.trainers.finite.FiniteGuard`: the environment steps here, the gradient steps
in the algorithm), the statistics and the checkpoints.

With ``threaded: true`` the gradient steps due after one environment step run on the update
thread while the environments take the next step, acting with a copy of the algorithm's
:meth:`~evtrain.trainers.algorithm.OffPolicyAlgorithm.acting_module` from before those
gradient steps; the transitions of that step are stored once they are done.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.timers import hierarchical_timer
from evtrain.trainers.algorithm import (
    AlgorithmSpec,
    OffPolicyAlgorithm,
    OffPolicyHyperparameters,
    RecurrentOffPolicyAlgorithm,
    ReplayBatch,
)
from evtrain.trainers.base import Trainer, linear_decay
from evtrain.trainers.envs import final_observations
from evtrain.trainers.finite import zeroed
from evtrain.trainers.loops.replay import ReplayBuffer, SequenceReplayBuffer
from evtrain.trainers.networks.memory import forget
from evtrain.trainers.observations import behavior_layout
from evtrain.trainers.optim import LEARNING_RATE_FLOOR
from evtrain.trainers.threaded import ActingCopy


def space_shape(space: spaces.Space[Any]) -> tuple[int, ...]:
    """An action's shape (a ``Space``'s ``shape`` is optional in its type)."""
    return tuple(space.shape or ())


def stored_action_size(space: spaces.Space[Any]) -> int:
    """Columns of an action as the replay buffer stores it: a ``Box``'s flattened size, one
    index per branch of a ``Discrete`` (1) or ``MultiDiscrete`` space."""
    if isinstance(space, spaces.MultiDiscrete):
        return len(space.nvec)
    return 1 if isinstance(space, spaces.Discrete) else int(np.prod(space_shape(space)))


class OffPolicyLoop(Trainer):
    """Replay, warm-up and updates-to-data for an off-policy algorithm (see the module's
    docstring)."""

    algorithm: OffPolicyAlgorithm
    """What learns (see :meth:`build_algorithm`)."""
    hp: OffPolicyHyperparameters
    replay: ReplayBuffer | SequenceReplayBuffer
    num_updates: int
    """Gradient steps taken so far."""
    memories: dict[str, torch.Tensor]
    """With memory: each environment's memories now, by name (empty otherwise)."""
    _stats_sum: dict[str, float | torch.Tensor]
    """The sum of every gradient step's statistics since the last summary (see
    _write_summary); 0-d tensors stay on the device until then."""
    _stats_updates: int
    _lr_sum: float
    _acting: ActingCopy[nn.Module] | None
    _held: list[tuple[torch.Tensor, tuple[npt.NDArray[Any], ...]]]
    """threaded: each step's observations and transitions, stored once the gradient steps
    running meanwhile are done (they sample the replay buffer and normalise with it)."""
    _seen_t: torch.Tensor
    """threaded: the observations of the step being taken that the normaliser counts."""
    _unfinite: npt.NDArray[np.bool_] | None = None
    """Environments whose last step was non-finite and zeroed (``on_nonfinite: skip``): their
    next transition starts from the zeroed observation and is not stored either."""

    def _setup(self) -> None:
        settings, network = self.settings, self.settings.network_settings
        self.action_space = self.envs.single_action_space
        self.algorithm = self.build_algorithm(self._spec())
        self.parts = _parts(self.algorithm)
        """The algorithm's modules and parameters (what rank 0 broadcasts, see synchronize)."""
        self.hp = cast("OffPolicyHyperparameters", settings.hyperparameters)
        self.layout = behavior_layout(
            self.envs.single_observation_space, network, self.behavior_name, self.action_space
        )
        """Where each part of an observation sits in the rows the replay buffer stores."""
        self.memories = {}
        action_size = stored_action_size(self.action_space)
        if network.memory is None:
            self.replay = ReplayBuffer(
                self.hp.buffer_size,
                self.layout.size,
                action_size,
                byte_columns=self.layout.byte_size,
            )
        else:  # (images as float32: the sequences keep no byte columns)
            sizes = cast("RecurrentOffPolicyAlgorithm", self.algorithm).memory_sizes
            self.memories = {
                name: torch.zeros((self.num_envs, size), device=self.device)
                for name, size in sizes.items()
            }
            self.replay = SequenceReplayBuffer(
                self.hp.buffer_size,
                self.layout.size,
                action_size,
                network.memory.sequence_length,
                sizes,
                self.num_envs,
            )
        self.num_updates = 0
        self._stats_sum, self._stats_updates, self._lr_sum = {}, 0, 0.0
        self._held = []
        self._acting = None
        """threaded: the copy of the algorithm's acting module the environments act with."""
        if settings.threaded and network.memory is None:  # (with memory: refused threaded)
            self._acting = ActingCopy(self.algorithm.acting_module())

    def _spec(self) -> AlgorithmSpec:
        return AlgorithmSpec(
            behavior_name=self.behavior_name,
            settings=self.settings,
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

    # -- what a trainer type supplies -----------------------------------------------------------

    @abc.abstractmethod
    def build_algorithm(self, spec: AlgorithmSpec) -> OffPolicyAlgorithm:
        """The algorithm this trainer type trains, built from ``spec`` (the loop's settings,
        spaces, device and generators); called once, by the constructor."""

    def _observed(self, *step: npt.NDArray[Any]) -> None:
        """``(obs, action, real_next, dones, valid)`` of a step (SAC: for its reward
        providers)."""

    def _after_updates(self, step: int) -> None:
        """What else learns after the gradient steps of environment step ``step``, on the
        update thread too (SAC: its reward providers' models and cloning)."""

    def _updates_always(self) -> bool:
        """Whether :meth:`_learn` runs even with no gradient step due."""
        return False

    # -- the loop --------------------------------------------------------------------------------

    def advance(self) -> None:
        """Step every environment once, store the transitions, take the due gradient steps."""
        # -- act: uniform random actions while warming up, then the algorithm's policy
        obs = self.layout.rows(self.next_obs)
        obs_t = torch.as_tensor(obs, device=self.device)
        seen = self._acting_rows(obs_t)
        if self._acting is not None:  # what the normaliser will count once caught up
            self._seen_t = seen
        acting = self._acting.module if self._acting is not None else None
        self.algorithm.observe(seen, acting)
        taken = self.memories
        acted = self.algorithm.act(
            obs_t,
            step=self.step,
            warmup=self.step < self.hp.buffer_init_steps,
            generator=self.act_generator,
            acting=acting,
            memories=taken,
        )
        if taken:
            self.memories = dict(acted.memories)
        self._step_envs(obs, obs_t, acted.actions, acted.env_actions, taken)
        self._learn_due()

    def _step_envs(
        self,
        obs: npt.NDArray[np.float32],
        obs_t: torch.Tensor,
        action: npt.NDArray[Any],
        env_action: npt.NDArray[Any],
        taken: Mapping[str, torch.Tensor],
    ) -> None:
        """Step and store ``(s, a, r, s', terminated)``; ``s'`` is the final observation where
        an episode ended.  ``taken``: the memories the step was taken with."""
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
        step = (obs, action, reward * strength, real_next, terminated, dones)
        if isinstance(self.replay, SequenceReplayBuffer):  # (with memory: not threaded)
            self._store_sequences(step, taken)
        else:
            self._store(step, keep)
        self._record_step(reward, dones, valid)
        self._record_infos(infos, dones, valid)
        self._observed(obs, action, real_next, dones, valid)
        self.next_obs = next_obs

    def _store(self, step: tuple[npt.NDArray[Any], ...], keep: npt.NDArray[np.bool_]) -> None:
        """Store the ``keep`` rows of ``step`` ``(s, a, r, s', terminated, done)``; threaded:
        once caught up (see :meth:`_caught_up`)."""
        obs, action, reward, real_next, terminated, _ = step
        transitions = (obs[keep], action[keep], reward[keep], real_next[keep], terminated[keep])
        if self._acting is None:
            assert isinstance(self.replay, ReplayBuffer)  # (sequences: _store_sequences)
            self.replay.add(*transitions)
        else:
            self._held.append((self._seen_t.clone(), transitions))

    def _store_sequences(
        self, step: tuple[npt.NDArray[Any], ...], taken: Mapping[str, torch.Tensor]
    ) -> None:
        """Store one step in the sequences, with the memories it was taken with; forget the
        memories of the episodes that ended (NEXT_STEP mode: after the reset step too)."""
        assert isinstance(self.replay, SequenceReplayBuffer)
        valid = self.autoreset.valid
        obs, action, reward, real_next, terminated, dones = step
        memories = {name: m.cpu().numpy() for name, m in taken.items()}
        self.replay.add(obs, action, reward, real_next, terminated, dones, valid, memories)
        self.memories = {name: forget(m, dones | ~valid) for name, m in self.memories.items()}

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
            self.algorithm.set_learning_rate(lr)
            count = max(0, due - self.num_updates)
        if count or self._updates_always():
            # threaded: what learns after the gradient steps runs on the update thread too: it
            # trains what the gradient steps use, and samples the replay buffer with `rng`
            with hierarchical_timer("update"):
                self._run_update(self._learn, count, lr, self.step)
        self.num_updates = max(self.num_updates, due)
        self._end_period()

    def _learn(self, count: int, lr: float, step: int) -> None:
        """``count`` gradient steps at learning rate ``lr``, then what else learns at
        environment step ``step``."""
        for _ in range(count):
            stats = self.algorithm.update(self._sample(step))
            if stats:
                for key, value in stats.items():
                    self._stats_sum[key] = self._stats_sum.get(key, 0.0) + value
                self._stats_updates += 1
            self._lr_sum += lr
        self.finite.check_updates(step)  # on_nonfinite: stop (one sync per environment step)
        self._after_updates(step)

    def _sample(self, step: int) -> ReplayBatch:
        """A minibatch of ``batch_size`` transitions (with memory: of whole sequences) on the
        device."""
        hp, device = self.hp, self.device
        if isinstance(self.replay, SequenceReplayBuffer):
            L = self.replay.sequence_length
            sampled = self.replay.sample_sequences(max(1, hp.batch_size // L), self.rng)
            mb = {name: t.to(device) for name, t in sampled.items()}
            return ReplayBatch(
                obs=mb["obs"],
                actions=mb["actions"],
                rewards=mb["rewards"],
                next_obs=mb["next_obs"],
                terminations=mb["terminated"],
                mask=mb["mask"],
                memories={name: mb[name] for name in self.replay.memories},
                step=step,
            )
        obs, actions, rewards, next_obs, terminated = (
            t.to(device) for t in self.replay.sample(hp.batch_size, self.rng)
        )
        return ReplayBatch(
            obs=obs,
            actions=actions,
            rewards=rewards,
            next_obs=next_obs,
            terminations=terminated,
            step=step,
        )

    def _caught_up(self) -> None:
        # The observations and transitions of the steps taken while gradient steps ran, in
        # order: the trained normaliser and the replay buffer end up as they would unthreaded.
        for obs_t, transitions in self._held:
            self.algorithm.observe(obs_t, None)
            assert isinstance(self.replay, ReplayBuffer)  # (with memory: not threaded)
            self.replay.add(*transitions)
        self._held.clear()
        if self._acting is not None:
            self._acting.refresh()

    def _write_summary(self, label: int) -> None:
        if self._stats_updates:
            totals = [torch.as_tensor(v, device=self.device) for v in self._stats_sum.values()]
            means = (torch.stack(totals) / self._stats_updates).tolist()
            for key, value in zip(self._stats_sum, means, strict=True):
                self.reporter.add_stat(key, value)
            self.reporter.add_stat("Policy/Learning Rate", self._lr_sum / self._stats_updates)
            self._stats_sum = {}
            self._stats_updates = 0
            self._lr_sum = 0.0
        super()._write_summary(label)

    # -- what the runner needs ------------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        return self.algorithm.policy_module()

    def _state_dict(self) -> dict[str, Any]:
        state = self.algorithm.state_dict()
        state["num_updates"] = self.num_updates
        if self.hp.save_replay_buffer:
            state["replay_buffer"] = self.replay.state_dict()
        return state

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.algorithm.load_weights(state)

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self.algorithm.load_state_dict(state)
        self.num_updates = int(state["num_updates"])
        if "replay_buffer" in state:
            self.replay.load_state_dict(state["replay_buffer"])


def _parts(algorithm: OffPolicyAlgorithm) -> nn.ModuleDict:
    """The modules and parameters an algorithm holds as attributes, as one module: what
    :meth:`~evtrain.trainers.base.Trainer.synchronize` finds among the trainer's attributes."""
    parts = nn.ModuleDict()
    for name, value in vars(algorithm).items():
        if isinstance(value, nn.Parameter):
            parts.register_parameter(name, value)
        elif isinstance(value, nn.Module):
            parts[name] = value
    return parts
