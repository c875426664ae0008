"""The interface every trainer offers the runner, and the bookkeeping all of them share.

A trainer owns the networks of one behavior and steps its vector environment.  The runner
calls :meth:`Trainer.advance` until :attr:`Trainer.should_stop`, saves :meth:`state_dict`
every ``checkpoint_interval`` steps and exports :meth:`policy_module`.  Everything a trainer
wants to say goes through its :class:`StatsReporter`: one ``stats`` event per ``summary_freq``
steps, labelled with the boundary step, as ML-Agents' ``RLTrainer`` does.  ``--inference``
calls :meth:`Trainer.begin_inference` once, then :meth:`Trainer.run_policy` instead of
``advance``: the same bookkeeping, with the deterministic policy and no learning.

Data-parallel runs (:mod:`evtrain.distributed`): :attr:`Trainer.world` holds the ranks.  The
bookkeeping here makes :attr:`Trainer.step` the global step (every rank's transitions) and
merges each summary period's statistics on rank 0; :meth:`Trainer.synchronize` starts every
rank from rank 0's networks.  An algorithm averages its gradients with
``self.world.average_(grad)`` before each optimizer step, and merges observation normalisers
with ``merge_ranks`` — PPO and SAC do; a subclass of either inherits it.

A trainer *has* its parts, deriving from nothing of evtrain's: :attr:`Trainer.bookkeeping`
(steps, episodes, summaries; :mod:`evtrain.trainers.bookkeeping`) and
:attr:`Trainer.update_runner` (``threaded: true``; :mod:`evtrain.trainers.threaded`), whose
methods a loop calls through the trainer (``_record_step``, ``_sync_step``, ``_end_period``,
``_run_update``, :meth:`Trainer.wait_for_update`, ...).  Its checkpoint is
:mod:`evtrain.trainers.trainer_state`'s, ``--inference`` :mod:`evtrain.trainers.inference`'s.
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, Protocol

import attrs
import numpy as np
import numpy.typing as npt
import torch
from gymnasium.vector import VectorEnv
from torch import nn

from evtrain.bus.reporter import StatsReporter
from evtrain.events.stats import StatsPropertyType
from evtrain.trainers import inference, trainer_state
from evtrain.trainers.bookkeeping import Bookkeeping
from evtrain.trainers.envs import AutoresetTracker, autoreset_mode
from evtrain.trainers.finite import FiniteGuard
from evtrain.trainers.info_stats import InfoStats
from evtrain.trainers.networks.memory import StatefulPolicy
from evtrain.trainers.settings import TrainerSettings, absent_when_none
from evtrain.trainers.threaded import ThreadedUpdates
from evtrain.world import World

P = ParamSpec("P")
BoolArray = npt.NDArray[np.bool_]


def linear_decay(initial: float, floor: float, step: int, max_steps: int) -> float:
    """``initial`` at step 0, falling linearly to ``floor`` at ``max_steps`` and staying there
    (ML-Agents' ``DecayedValue`` with power 1).  An ``initial`` already below ``floor`` stays
    constant: a schedule never raises a value."""
    floor = min(floor, initial)
    progress = min(step / max_steps, 1.0)
    return initial + (floor - initial) * progress


class Attachment(Protocol):
    """Something the runner attaches to a trainer (``self_play``'s
    :class:`~evtrain.trainers.ghost.GhostController`): it acts after each of the trainer's
    turns, and its state is saved in the trainer's checkpoint, so ``--resume`` restores it."""

    def after_turn(self) -> None:
        """Called by the runner after each :meth:`Trainer.advance`."""

    def state_dict(self) -> dict[str, Any]:
        """Its state: tensors and plain values (``torch.load(weights_only=True)`` reads them)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""

    def close(self) -> None:
        """Called by :meth:`Trainer.close`: end what it made (a league's exploiter, copies)."""


class Trainer(abc.ABC):
    """Trains one behavior on a Gymnasium vector environment and reports on the bus.

    :param behavior_name: the stats category (e.g. ``"CartPole"``).
    :param settings: the behavior's settings; ``hyperparameters`` must be an instance of the
        class registered with this trainer in :data:`evtrain.trainers.registry.TRAINER_TYPES`.
    :param envs: a vector environment that resets itself (``SAME_STEP`` preferred, see
        :mod:`evtrain.trainers.envs`).  The trainer resets it with ``seed`` and steps it; the
        caller closes it.
    :param reporter: where statistics go.
    :param seed: seeds the environments, the network initialisation and all sampling.
    :param device: where the networks live.
    """

    settings_type: type[Any] = object
    """The hyperparameter settings class this trainer accepts."""

    def __init__(
        self,
        behavior_name: str,
        settings: TrainerSettings,
        envs: VectorEnv[Any, Any, Any],
        reporter: StatsReporter,
        *,
        seed: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if not isinstance(settings.hyperparameters, self.settings_type):
            raise TypeError(
                f"{type(self).__name__} for behavior {behavior_name!r} needs hyperparameters of "
                f"type {self.settings_type.__name__}, got "
                f"{type(settings.hyperparameters).__name__}; check trainer_type"
            )
        self.behavior_name = behavior_name
        self.settings = settings
        self.envs = envs
        self.reporter = reporter
        self.finite = FiniteGuard(behavior_name, settings.on_nonfinite, reporter)
        """Checks rewards, observations, losses and gradients for NaN and infinity."""
        self.seed = seed
        self.device = torch.device(device)
        self.num_envs: int = envs.num_envs
        self.world = World.current()
        """This job's ranks; one in a one-process run."""
        self.init_generator = torch.Generator().manual_seed(seed)
        """Draws the initial weights (networks are built on the CPU, then moved)."""
        self.generator = torch.Generator(self.device).manual_seed(seed)
        """Every random draw on ``device``: action sampling, minibatch shuffling."""
        self.rng = np.random.default_rng(seed)
        """Every random draw made in numpy (replay sampling, warm-up actions)."""
        self._init_parts()
        self.attachments: dict[str, Attachment] = {}
        """What the runner attached, by name; saved with :meth:`state_dict` (under
        ``"attachments"``) and restored by :meth:`load_state_dict` (not by
        :meth:`load_weights`: it starts afresh)."""
        self._policy: nn.Module | StatefulPolicy | None = None
        """The deterministic policy :meth:`run_policy` acts with (a recurrent one with each
        environment's memory); ``None`` while training."""
        obs, _ = envs.reset(seed=seed)
        # Typed Any: an array, or a Dict observation space's dictionary of arrays.
        self.next_obs: Any = _batch(obs)
        """The observation each sub-environment is in now, as the vector environment gives it:
        an array, or for a ``Dict`` observation space a dictionary of arrays."""
        reporter.add_property(
            StatsPropertyType.HYPERPARAMETERS, attrs.asdict(settings, filter=absent_when_none)
        )
        self._setup()

    def _init_parts(self) -> None:
        """The update runner, the autoreset tracker and the bookkeeping (the constructor's)."""
        self.update_runner = ThreadedUpdates(
            self.behavior_name,
            self.settings.threaded,
            world=self.world,
            device=self.device,
            seed=self.seed,
            generator=self.generator,
            caught_up=_weakly(self._caught_up),
        )
        """Runs the updates (on the behavior's update thread with ``threaded``)."""
        self.autoreset = AutoresetTracker(autoreset_mode(self.envs), self.num_envs)
        self.bookkeeping = Bookkeeping(
            self.behavior_name,
            self.settings,
            self.reporter,
            self.world,
            self.envs,
            self.autoreset,
            self.num_envs,
            self.update_runner.wait,
            _weakly(self._write_summary),
        )
        """Steps, episodes and summaries."""

    def _setup(self) -> None:  # noqa: B027 (a hook: a trainer may need nothing more)
        """Build what the algorithm needs (networks, optimizers, buffers); the constructor's
        last step, once the shared state exists.  The constructor's signature is declared
        only here: a subclass overrides this hook instead of re-declaring ``__init__`` (and
        calls ``super()._setup()`` when it extends a trainer that has one)."""

    # -- what the runner calls ----------------------------------------------------------------

    @property
    def should_stop(self) -> bool:
        """``max_steps`` reached."""
        return self.step >= self.settings.max_steps

    @property
    def steps_per_update(self) -> int:
        """Steps (global) one :meth:`advance` adds: here one vector step of every rank; a
        trainer that collects longer rollouts says how long (PPO: ``buffer_size`` per rank).
        The runner warns when ``max_steps`` or ``summary_freq`` do not fit it."""
        return self.num_envs * self.world.size

    @abc.abstractmethod
    def advance(self) -> None:
        """Collect experience, learn from it, and report (one ``stats`` event whenever
        :attr:`step` crosses a multiple of ``summary_freq``, labelled with the last multiple
        crossed)."""

    def begin_inference(self) -> None:
        """Run the deterministic policy from now on, learning nothing (``--inference``): the
        runner calls :meth:`run_policy` instead of :meth:`advance`.  Steps count afresh from 0
        up to ``max_steps`` (global, as in training), and summaries say ``Is Training`` 0."""
        self.wait_for_update()
        self._policy = inference.begin(self.policy_module(), self.device, self.bookkeeping)

    def run_policy(self) -> None:
        """Step every environment once with the policy and report as :meth:`advance` does:
        episode returns and lengths, ``Step``, a summary per ``summary_freq`` steps.

        :raises RuntimeError: :meth:`begin_inference` was not called.
        """
        if self._policy is None:
            raise RuntimeError("run_policy() runs the policy of begin_inference(): call it first")
        books, envs = self.bookkeeping, self.envs
        next_obs = inference.step(
            envs, self.next_obs, self._policy, self.device, self.autoreset, books
        )
        self.next_obs = _batch(next_obs)

    def _acting_rows(self, obs: torch.Tensor) -> torch.Tensor:
        """The rows of ``obs`` (one per sub-environment, before a step) whose sub-environment
        acts in that step: all, but for agent slots (``envs.acting``) whose agent has left its
        episode or not appeared yet, whose observation is a stale one the observation
        normaliser must not count."""
        acting = getattr(self.envs, "acting", None)
        if acting is None or acting.all():
            return obs
        return obs[torch.from_numpy(acting).to(obs.device)]

    @abc.abstractmethod
    def policy_module(self) -> torch.nn.Module:
        """A module mapping a float32 batch of raw observations to deterministic actions,
        observation normalisation included, ready for ``torch.onnx.export``.

        It shares parameters with the trainer; ``copy.deepcopy`` it for a frozen snapshot.
        """

    def sampling_policy_module(self, generator: torch.Generator) -> torch.nn.Module:
        """Like :meth:`policy_module`, but the actions are drawn from the policy as training
        draws them, with ``generator``: what ``self_play``'s opponents act with
        (:mod:`evtrain.trainers.ghost`).  Shares parameters with the trainer.

        This default is :meth:`policy_module` itself (the most likely action); a trainer that
        can sample says so by overriding it (PPO does).
        """
        del generator
        return self.policy_module()

    def synchronize(self) -> None:
        """Start every rank from rank 0's networks and normaliser statistics (a collective;
        the runner calls it once the trainer is built and any checkpoint loaded).

        Also switches observation normalisers to collecting batches between ``merge_ranks``.
        Does nothing in a one-process run.
        """
        trainer_state.synchronize(self)

    def _shared_modules(self) -> list[nn.Module]:
        """The modules every rank must hold alike: here the trainer's own attributes; a loop
        adds its algorithm's."""
        return [value for value in vars(self).values() if isinstance(value, nn.Module)]

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks, optimizers, normaliser, step and RNG states,
        and the state of each of :attr:`attachments`.

        Tensors and plain Python values only, so ``torch.load(weights_only=True)`` reads it.
        The environments are not part of it: a resumed trainer starts fresh episodes.  With
        ``threaded``, the update in flight is waited for: the state includes it.
        """
        return trainer_state.state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (``--resume``).

        The sampling generator is restored only when the state comes from the same kind of
        device (CPU and CUDA generators keep different states); otherwise it keeps its seed.
        In a distributed run every rank loads rank 0's state, so the random generators are
        instead seeded afresh from this rank's seed and the step: ranks must not sample alike.

        :raises ValueError: the state comes from another trainer type.
        """
        trainer_state.load_state_dict(self, state)

    def load_weights(self, state: dict[str, Any]) -> None:
        """Start from the networks (and normaliser) of :meth:`state_dict`'s output, nothing else:
        step, optimizers, RNGs and any replay buffer start fresh (``--initialize-from``).

        :raises ValueError: the state comes from another trainer type.
        """
        trainer_state.check_type(self, state)
        self._load_weights(state)
        self._loaded()

    # -- what subclasses implement -------------------------------------------------------------

    @abc.abstractmethod
    def _state_dict(self) -> dict[str, Any]:
        """The subclass's own part of :meth:`state_dict`."""

    @abc.abstractmethod
    def _load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the subclass's own part of :meth:`state_dict`."""

    @abc.abstractmethod
    def _load_weights(self, state: dict[str, Any]) -> None:
        """Restore only the networks and normaliser from :meth:`state_dict`'s output."""

    # -- what loops call: the bookkeeping's and the update runner's ----------------------------

    @property
    def step(self) -> int:
        """Environment steps so far (global in a distributed run; see :class:`Bookkeeping`)."""
        return self.bookkeeping.step

    @step.setter
    def step(self, value: int) -> None:
        self.bookkeeping.step = value

    @property
    def local_step(self) -> int:
        return self.bookkeeping.local_step

    @property
    def info_stats(self) -> InfoStats:
        return self.bookkeeping.info_stats

    @property
    def last_mean_reward(self) -> float | None:
        """See :attr:`Bookkeeping.last_mean_reward`: what the runner records with a checkpoint."""
        return self.bookkeeping.last_mean_reward

    @property
    def act_generator(self) -> torch.Generator:
        """The action draws of the environments' steps (see :class:`ThreadedUpdates`)."""
        return self.update_runner.act_generator

    def write_final_summary(self) -> None:
        """See :meth:`Bookkeeping.write_final_summary`."""
        self.bookkeeping.write_final_summary()

    def wait_for_update(self) -> None:
        """See :meth:`ThreadedUpdates.wait`."""
        self.update_runner.wait()

    def close(self) -> None:
        """See :meth:`ThreadedUpdates.close`, then close the attachments; the caller, the envs."""
        self.update_runner.close()
        for attachment in self.attachments.values():
            attachment.close()

    def _record_step(self, rewards: Any, dones: BoolArray, valid: BoolArray) -> None:
        self.bookkeeping.record_step(rewards, dones, valid)

    def _record_infos(self, infos: Mapping[str, Any], dones: BoolArray, valid: BoolArray) -> None:
        self.bookkeeping.record_infos(infos, dones, valid)

    def _sync_step(self) -> None:
        self.bookkeeping.sync_step()

    def _end_period(self) -> None:
        self.bookkeeping.end_period()

    def _run_update(self, update: Callable[..., None], *args: Any) -> None:
        self.update_runner.run(update, *args)

    def _write_summary(self, label: int) -> None:
        """Write the summary labelled ``label``; a loop that sums statistics over a period
        reports them first, then calls this."""
        self.bookkeeping.write_summary(label)

    def _caught_up(self) -> None:  # noqa: B027 (a hook: a loop without acting copies has none)
        """``threaded`` only: no update is running now; make what the environments act with
        equal to the trained networks again, and store what was held back meanwhile."""

    def _loaded(self) -> None:
        """The networks were replaced: with ``threaded``, the acting copies follow."""
        self.update_runner.loaded()


def _weakly(method: Callable[P, None]) -> Callable[P, None]:
    """``method`` (bound to a trainer) without a reference to the trainer: its parts call
    back through it, and a dropped trainer is still freed at once (its update thread ends)."""
    ref = weakref.WeakMethod(method)

    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        bound = ref()
        if bound is not None:
            bound(*args, **kwargs)

    return call


def _batch(obs: Any) -> Any:
    """A vector environment's observations: an array, or a ``Dict`` space's dictionary."""
    return obs if isinstance(obs, dict) else np.asarray(obs)
