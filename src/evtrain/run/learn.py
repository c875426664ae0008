"""``evtrain learn``: train every behavior of a config, reporting everything on the bus.

The runner owns the run's lifecycle — folder, plugins, environments, trainers, checkpoints,
signals, shutdown — and the trainers own the algorithms.  Every exit path (completion,
Ctrl-C/SIGTERM, an exception) emits ``run_finished`` and drains the bus.

Here: the run's lifecycle, from the folder to ``run_finished``.  When and what it saves is
:class:`~evtrain.run.checkpoints.save_schedule.SaveSchedule`'s; its flushes and its drain,
:class:`~evtrain.run.run_bus.RunBus`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.bus import Bus
from evtrain.config.options import RunOptions
from evtrain.errors import ConfigError, RunFolderError, UnityRestartLimitError
from evtrain.events import signals
from evtrain.events.payloads import RunFinished, RunStarted, RunStatus, StatsEvent
from evtrain.events.stats import CUMULATIVE_REWARD
from evtrain.ranks import get_rank
from evtrain.run.build import (
    build_behavior,
    configure_torch,
    rank_seed,
    training_status,
    with_drawn_seed,
)
from evtrain.run.checkpoints.checkpoint_fit import saved_configurations
from evtrain.run.checkpoints.elastic import record_start, resumed_after_restart
from evtrain.run.checkpoints.run_folder import RunFolder, prepare_run_folder, write_configuration
from evtrain.run.checkpoints.save_schedule import SaveSchedule
from evtrain.run.checkpoints.save_schedule import SavingProgress as SavingProgress
from evtrain.run.environments.co_players import CoPlayerWiring
from evtrain.run.environments.shared_steps import SharedSteps
from evtrain.run.evaluation.evaluations import Evaluations
from evtrain.run.evaluation.inference import INFERENCE_SUFFIX, check_trained_model, run_inference
from evtrain.run.interrupt import stop_on_interrupts
from evtrain.run.loop import ProgressHook, schedule_warnings, take_turns
from evtrain.run.options import load_options
from evtrain.run.parameters.curriculum import Curriculum
from evtrain.run.progress import console_logging
from evtrain.run.run_bus import RunBus
from evtrain.run.stops import connect_stops
from evtrain.run.wiring import attach_plugins, initialized, make_bus
from evtrain.timers import hierarchical_timer, reset_timers
from evtrain.trainers.ghost import face_rivals
from evtrain.trainers.registry import trainer_type, use_trainer_types
from evtrain.world import World

if TYPE_CHECKING:
    from evtrain.run.checkpoints.checkpoint import CheckpointManager
    from evtrain.trainers.base import Trainer

logger = logging.getLogger("evtrain")


@attrs.frozen(kw_only=True)
class LearnResult:
    """What a run did."""

    run_id: str
    status: RunStatus
    steps: dict[str, int]
    """Environment steps per behavior."""
    mean_reward: dict[str, float | None]
    """Mean return of the episodes in each behavior's last summary period (None: none ended)."""
    write_path: Path
    models: dict[str, Path]
    """The final exported policy per behavior (``results/<run_id>/<Behavior>.onnx``)."""
    journaled: dict[str, int] = attrs.field(factory=dict)
    """Per tracker writer whose tracker did not take everything before the run ended: the
    events kept in its journal (``evtrain sync RUN_ID`` delivers them)."""
    stop_reason: str | None = None
    """Why a subscriber stopped the run (status ``stopped``), else ``None``."""


def learn(
    config: str | Path | RunOptions | Mapping[str, Any],
    bus: Bus | None = None,
    *,
    progress: ProgressHook | None = None,
) -> LearnResult:
    """Train as ``evtrain learn`` does.

    Subscribers already connected to ``bus`` see the same events as the plugins; a bus passed
    in is flushed, not closed, at the end (its owner closes it), and what the run connected to
    it (the plugins' writers, and what subscriber plugins connected) is disconnected and closed.

    Under ``torchrun`` every rank calls it: the active initializer (``torch``) sets up the process
    group first, unless the caller has done so already.
    """
    with console_logging():  # the notes of reading the config too
        options, types = load_options(config)
        with use_trainer_types(types), initialized(options):
            # A restarted torchrun group resumes; its checkpoints' configurations are kept first.
            options = resumed_after_restart(options, World.current())
            with saved_configurations(options):
                return _learn(options, bus, progress)


def _learn(options: RunOptions, bus: Bus | None, progress: ProgressHook | None) -> LearnResult:
    if options.sweep is not None:
        raise ConfigError(
            [
                "sweep: this config describes a sweep, which trains many runs; run it with "
                "evtrain sweep CONFIG --study NAME --trials N (docs/sweeps.md), or remove the "
                "sweep section to train once"
            ]
        )
    _check_behaviors(options)
    options.torch_settings.check_device()
    check_trained_model(options)
    world = World.current()
    options = with_drawn_seed(options, world)  # configuration.yaml says which seed was drawn
    # Locked for the whole run; a run that fails before its first step removes what it wrote
    # in a folder that held nothing before, so the same command can be given again.
    with _prepare_run_folder(options, world, get_rank()) as folder:
        reset_timers()  # this run's timers.json times this run only
        run_bus = make_bus(options) if bus is None else bus
        run = _Run(options, run_bus, own_bus=bus is None, world=world, progress=progress)
        return run.run(folder)


def _check_behaviors(options: RunOptions) -> None:
    if not options.behaviors:
        raise ConfigError(["behaviors: expected at least one behavior to train"])
    for name, settings in options.behaviors.items():
        trainer_type(settings.trainer_type)  # validated already; fail before touching disk
        if not name:
            raise ConfigError(["behaviors: a behavior name must not be empty"])
        num_envs = options.env_settings.num_envs
        if num_envs > settings.max_steps:
            # Each step of the vector env is num_envs steps: the run would overshoot
            # max_steps by a rollout of them (100,000 envs made 800,000 steps of 2,048).
            raise ConfigError(
                [
                    f"env_settings.num_envs: {num_envs:,} environments take {num_envs:,} steps "
                    f"at each step, more than behaviors.{name}.max_steps ({settings.max_steps:,}"
                    f"); use --num-envs (env_settings.num_envs) {settings.max_steps} or fewer, "
                    "or raise max_steps"
                ]
            )


class _Run:
    """One call of :func:`learn` once its folder is ready: what it builds, and every step from
    ``run_started`` to ``run_finished``.

    :param own_bus: the run made ``bus`` and closes it; otherwise it only detaches from it.
    """

    shared: SharedSteps | None = None
    """``env_settings.shared_env``: the environment every behavior acts in, and its loop."""

    def __init__(
        self,
        options: RunOptions,
        bus: Bus,
        *,
        own_bus: bool,
        world: World,
        progress: ProgressHook | None,
    ) -> None:
        self.options = options
        self.bus = bus
        self.run_bus = RunBus(bus, own=own_bus, drain_timeout=options.bus.drain_timeout)
        self.world = world
        self.progress = progress
        self.status = RunStatus.FAILED
        self.stop_reason: str | None = None
        """Why a subscriber stopped the run (:meth:`Bus.request_stop`)."""
        self.rewards = _RewardTracker()
        self.trainers: dict[str, Trainer] = {}
        self.managers: dict[str, CheckpointManager] = {}
        self.saves = SaveSchedule(
            self.trainers, self.managers, self.rewards.mean, self.run_bus, progress
        )
        self.evaluations = Evaluations(options, self.trainers, self.managers, self.saves, bus)
        """The behaviors' ``evaluation``: episodes off the training thread, the best model."""
        self.aborted = False
        """A second interrupt aborted the run."""
        self.co_players = CoPlayerWiring(self.trainers)
        """Each behavior acting for its agents in the other behaviors' PettingZoo copies."""

    def run(self, folder: RunFolder) -> LearnResult:
        """Start, train (or infer), save; every exit emits ``run_finished`` and drains the bus.

        :param folder: told once a behavior took a step (a run that fails before keeps
            nothing that would make the fixed rerun need ``--force``).
        """
        cs = self.options.checkpoint_settings
        # The handlers stay from before the first step to the end of the drain: a signal
        # during the final save or the drain is a request like any other (see interrupt.py).
        with stop_on_interrupts() as stop:
            self.evaluations.stop_requested = lambda: stop.requested is not None
            self.interrupted = lambda: stop.requested
            try:
                try:
                    self._start()
                    with hierarchical_timer("train"):
                        self.status = self._steps(
                            lambda: stop.requested is not None or self.bus.stop_request is not None
                        )
                    if self.status is RunStatus.INTERRUPTED and stop.requested is None:
                        self._stopped_by_request()
                    if self.status is not RunStatus.INTERRUPTED:
                        self.evaluations.finish()  # its best model before the final save
                    if not cs.inference:
                        stop.phase = "saving"
                        self.saves.save_final(stop)
                except UnityRestartLimitError:  # the models are sound: kept, as at the end
                    self.saves.save_final(stop)
                    raise
                except KeyboardInterrupt:
                    self._abort()
                    raise
                finally:
                    folder.stepped = any(t.step for t in self.trainers.values())
                    stop.phase = "closing"
                    self._close()
            except KeyboardInterrupt:
                if not self.aborted:  # the second interrupt came during the drain
                    self._abort()
                    self.run_bus.close_now()
                raise
        return LearnResult(
            run_id=cs.run_id,
            status=self.status,
            steps={name: t.step for name, t in self.trainers.items()},
            mean_reward={name: self.rewards.mean.get(name) for name in self.trainers},
            write_path=cs.write_path,
            models=self.saves.models,
            journaled=self.run_bus.journaled,
            stop_reason=self.stop_reason,
        )

    def _stopped_by_request(self) -> None:
        """The loop ended on a subscriber's :meth:`~evtrain.Bus.request_stop` (here, or on
        another rank: the ranks stop together), not on a signal."""
        request = self.bus.stop_request
        self.status = RunStatus.STOPPED
        self.stop_reason = "requested on another rank" if request is None else request.reason
        logger.info("Stopping early: %s", self.stop_reason)

    def _start(self) -> None:
        """Plugins, ``run_started``, then one trainer per behavior (built, loaded, in sync)."""
        options, cs, bus = self.options, self.options.checkpoint_settings, self.bus
        self.run_bus.handles.extend(attach_plugins(options, bus))
        started = RunStarted(
            run_id=cs.run_id, options=options.as_dict(), world_size=self.world.size, rank=get_rank()
        )
        bus.emit(signals.run_started, started)
        rewards = bus.connect(signals.stats, self.rewards, name="evtrain.learn.rewards")
        self.run_bus.handles.append(rewards)
        for name, settings in options.behaviors.items():
            self.run_bus.handles.extend(connect_stops(bus, name, settings))
        configure_torch(options)
        seed = rank_seed(options, self.world)
        status_file = training_status(options)
        curriculum = Curriculum.of_run(options, bus, status_file, self.world)
        self.shared = SharedSteps.of_run(options, self.world, curriculum, self.interrupted)
        for index, (name, settings) in enumerate(options.behaviors.items()):
            with hierarchical_timer("build"):
                self.trainers[name], self.managers[name] = build_behavior(
                    options, name, settings, bus, seed + index, status_file, curriculum, self.shared
                )
        face_rivals(self.trainers)  # self-play across behaviors: each other's opponents
        self.evaluations.start(rank=get_rank())
        self.co_players = CoPlayerWiring(self.trainers)
        self.co_players.refresh_all()
        for name, trainer in self.trainers.items():
            for warning in schedule_warnings(name, trainer, inference=cs.inference):
                logger.warning(warning)
            if cs.resume and not cs.inference and trainer.step >= trainer.settings.max_steps:
                logger.warning(
                    "%s: run %s already reached max_steps %d (at step %d); raise "
                    "behaviors.%s.max_steps to continue",
                    name,
                    cs.run_id,
                    trainer.settings.max_steps,
                    trainer.step,
                    name,
                )

    def _steps(self, stop_requested: Callable[[], bool]) -> RunStatus:
        """Train (or, ``--inference``, run the policies) until every behavior reaches
        ``max_steps`` or a stop is requested; then the period still open becomes a last
        summary, so that even a run shorter than ``summary_freq`` writes one (an abort never
        gets there)."""
        world, progress = self.world, self.progress
        turns = take_turns if self.shared is None else self.shared.take_turns
        if self.options.checkpoint_settings.inference:
            status = run_inference(
                self.trainers, turns, stop_requested=stop_requested, world=world, progress=progress
            )
        else:
            self.saves.start()
            status = turns(
                self.trainers,
                lambda trainer: trainer.advance(),
                stop_requested=stop_requested,
                world=world,
                progress=progress,
                after=self._after_turn,
            )
        for trainer in self.trainers.values():
            trainer.write_final_summary()
        return status

    def _after_turn(self, name: str, trainer: Trainer) -> None:
        """After each turn of a behavior: what is attached to it acts (``self_play``: team,
        snapshot, opponent), its co-players in the other behaviors' copies take its new
        policy, and a due checkpoint is saved."""
        for attachment in trainer.attachments.values():
            attachment.after_turn()
        self.co_players.refresh(name, trainer)
        self.saves.checkpoint_if_due(name, trainer)
        self.evaluations.after_turn(name, trainer)

    def _abort(self) -> None:
        """A second interrupt: the file being written is completed, saves not yet started are
        dropped, and the log says what the interrupted save wrote."""
        self.aborted = True
        self.status = RunStatus.INTERRUPTED
        self.saves.abort()

    def _close(self) -> None:
        """Finish the saves, close the environments, emit ``run_finished``, drain the bus."""
        started = time.monotonic()
        self.evaluations.close()  # an evaluation still in flight (interrupted) is dropped
        self.saves.close()  # save and export are emitted before run_finished
        for trainer in self.trainers.values():
            trainer.close()  # threaded: the update still running, if any, ends first
            trainer.envs.close()  # a shared environment closes with its first view
        steps = sum(t.step for t in self.trainers.values())
        self.bus.take_stop_request()  # a later run on the same bus starts without it
        finished = RunFinished(
            run_id=self.options.checkpoint_settings.run_id,
            status=self.status,
            steps=steps,
            reason=self.stop_reason,
        )
        self.run_bus.finish(finished)
        logger.debug("Drained the bus in %.3f s", time.monotonic() - started)


def _prepare_run_folder(options: RunOptions, world: World, rank: int) -> RunFolder:
    """Rank 0 (the one writer) checks, locks and prepares the run folder, then tells the other
    ranks whether that failed, so that they stop with the same error instead of waiting for
    it.  The other ranks hold no lock: rank 0's stands for the job."""
    error: RunFolderError | None = None
    folder = RunFolder(options.checkpoint_settings.write_path, None, fresh=False, created=False)
    if rank == 0:
        try:
            folder = prepare_run_folder(options)
        except RunFolderError as problem:
            error = problem
    with _released_on_error(folder):
        if rank == 0 and error is None and not options.checkpoint_settings.inference:
            # An inference run must not overwrite what the model was trained with.
            try:
                write_configuration(options)
                record_start(options, world)
            except RunFolderError as problem:
                error = problem
        message = world.broadcast_object(None if error is None else str(error))
        if error is not None:
            raise error
        if message is not None:
            raise RunFolderError(message)
    return folder


@contextmanager
def _released_on_error(folder: RunFolder) -> Iterator[None]:
    with ExitStack() as stack:
        stack.push(folder)  # its __exit__ discards and releases, on an error only
        yield
        stack.pop_all()


class _RewardTracker:
    """Follows each behavior's mean episode return from the ``stats`` events it emits."""

    def __init__(self) -> None:
        self.mean: dict[str, float | None] = {}

    def __call__(self, event: StatsEvent) -> None:
        summary = event.values.get(CUMULATIVE_REWARD)
        if summary is not None and summary.num:
            self.mean[event.category.removesuffix(INFERENCE_SUFFIX)] = summary.mean
