"""``evtrain learn``: train every behavior of a config, reporting everything on the bus.

The runner owns the run's lifecycle — folder, plugins, environments, trainers, checkpoints,
signals, shutdown — and the trainers own the algorithms.  Every exit path (completion,
Ctrl-C/SIGTERM, an exception) emits ``run_finished`` and drains the bus.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from evtrain.bus import Bus
from evtrain.bus.reporter import StatsReporter
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.config.options import RunOptions
from evtrain.errors import ConfigError, RunFolderError
from evtrain.events import signals
from evtrain.events.payloads import RunFinished, RunStarted, RunStatus, StatsEvent
from evtrain.events.stats import CUMULATIVE_REWARD, StatsAggregationMethod
from evtrain.ranks import get_rank
from evtrain.run.interrupt import stop_on_signals
from evtrain.run.options import load_options
from evtrain.run.run_folder import prepare_run_folder, write_configuration
from evtrain.run.wiring import (
    active_initializer,
    attach_plugins,
    initialized,
    make_bus,
    trainer_types_for,
)
from evtrain.timers import hierarchical_timer, reset_timers
from evtrain.trainers.registry import trainer_type, use_trainer_types
from evtrain.world import World

if TYPE_CHECKING:
    from evtrain.run.checkpoint import CheckpointManager
    from evtrain.run.training_status import TrainingStatus
    from evtrain.trainers.base import Trainer

logger = logging.getLogger("evtrain")

HISTOGRAM = StatsAggregationMethod.HISTOGRAM

ProgressHook = Callable[[str, int, int], None]
"""Called after every trainer update with (behavior, step, max_steps)."""


@runtime_checkable
class SavingProgress(Protocol):
    """A progress hook that also shows when a behavior saves and exports, which holds the
    runner for a while (:class:`evtrain.run.progress.ProgressDisplay` is one)."""

    def __call__(self, behavior: str, step: int, max_steps: int) -> None: ...

    def saving(self, behavior: str) -> AbstractContextManager[None]: ...


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


def learn(
    config: str | Path | RunOptions | Mapping[str, Any],
    bus: Bus | None = None,
    *,
    progress: ProgressHook | None = None,
) -> LearnResult:
    """Train as ``evtrain learn`` does.

    Subscribers already connected to ``bus`` see the same events as the plugins; a bus
    passed in is flushed, not closed, at the end (its owner closes it), and what the run
    connected to it (the plugins' writers) is disconnected and closed.

    Under ``torchrun`` every rank calls it: the active initializer (``torch``) sets up the
    process group first, unless the caller has done so already.
    """
    options = load_options(config)
    with use_trainer_types(trainer_types_for(options.plugins)), initialized(options):
        return _learn(options, bus, progress)


def _learn(options: RunOptions, bus: Bus | None, progress: ProgressHook | None) -> LearnResult:
    if not options.behaviors:
        raise ConfigError(["behaviors: expected at least one behavior to train"])
    for name, settings in options.behaviors.items():
        trainer_type(settings.trainer_type)  # validated already; fail before touching disk
        if not name:
            raise ConfigError(["behaviors: a behavior name must not be empty"])
    options.torch_settings.check_device()
    cs = options.checkpoint_settings
    world = World.current()
    rank = get_rank()
    fresh = rank == 0 and not cs.write_path.exists()
    discard = False
    _prepare_run_folder(options, world, rank)
    reset_timers()  # this run's timers.json times this run only
    own_bus = bus is None
    run_bus = make_bus(options) if bus is None else bus
    status = RunStatus.FAILED
    trainers: dict[str, Trainer] = {}
    managers: dict[str, CheckpointManager] = {}
    models: dict[str, Path] = {}
    handles: list[SubscriptionHandle] = []
    finished: list[str] = []  # behaviors whose final save is done
    try:
        handles.extend(attach_plugins(options, run_bus))
        run_bus.emit(
            signals.run_started,
            RunStarted(
                run_id=cs.run_id, options=options.as_dict(), world_size=world.size, rank=rank
            ),
        )
        rewards = _RewardTracker()
        handles.append(run_bus.connect(signals.stats, rewards, name="evtrain.learn.rewards"))
        _configure_torch(options)
        seed = _seed(options, world)
        status_file = _training_status(options)
        for index, (name, settings) in enumerate(options.behaviors.items()):
            with hierarchical_timer("build"):
                trainers[name], managers[name] = _build(
                    options, name, settings, run_bus, seed + index, status_file
                )
        for name, trainer in trainers.items():
            for warning in _schedule_warnings(name, trainer, inference=cs.inference):
                logger.warning(warning)
        with stop_on_signals() as stop, hierarchical_timer("train"):
            status = _train(
                options,
                trainers,
                managers,
                rewards=rewards,
                stop_requested=lambda: stop.requested is not None,
                world=world,
                progress=progress,
            )
        if not cs.inference:
            run_bus.flush()  # the last period's reward goes into the final checkpoint record
            for name, trainer in trainers.items():
                _save(
                    managers[name], trainer, rewards.mean.get(name), final=True, progress=progress
                )
                finished.append(name)
                if managers[name].is_writer and managers[name].final_model_path.exists():
                    models[name] = managers[name].final_model_path
    except KeyboardInterrupt:
        status = RunStatus.INTERRUPTED
        logger.warning(_abort_message(managers, finished))
        raise
    except ConfigError:
        # Refused before the first step (e.g. SAC on a discrete env): a folder this call
        # created holds nothing worth keeping, and would make the fixed rerun need --force.
        discard = fresh and not any(t.step for t in trainers.values())
        raise
    finally:
        steps = sum(t.step for t in trainers.values())
        for trainer in trainers.values():
            trainer.envs.close()
        _finish(run_bus, own_bus, cs.run_id, status, steps, handles)
        if discard:
            shutil.rmtree(cs.write_path, ignore_errors=True)
    return LearnResult(
        run_id=cs.run_id,
        status=status,
        steps={name: t.step for name, t in trainers.items()},
        mean_reward={name: rewards.mean.get(name) for name in trainers},
        write_path=cs.write_path,
        models=models,
    )


def _abort_message(managers: Mapping[str, CheckpointManager], saved: Collection[str]) -> str:
    """What a second Ctrl-C left on disk: the files of the save it interrupted, if any, by
    name (a periodic checkpoint, or a final save that had begun)."""
    parts = []
    for name, manager in managers.items():
        if manager.in_progress is not None:
            kind, step = manager.in_progress
            files = ", ".join(
                str(p.relative_to(manager.run_folder)) for p in manager.files_written()
            )
            parts.append(
                f"the {kind} of {name} at step {step} wrote {files or 'no file'} before it "
                "was interrupted"
            )
        elif name in saved:
            parts.append(f"the final save of {name} was complete")
        else:
            parts.append(f"no final save of {name}")
    if all(part.startswith("no final save") for part in parts):
        return "Aborted: no final save. The last checkpoint on disk is complete."
    return f"Aborted: {'; '.join(parts)}. Every file on disk is complete."


def _prepare_run_folder(options: RunOptions, world: World, rank: int) -> None:
    """Rank 0 checks and prepares the run folder, then tells the other ranks whether that
    failed, so that they stop with the same error instead of waiting for it."""
    error: RunFolderError | None = None
    if rank == 0:
        try:
            prepare_run_folder(options)
            if not options.checkpoint_settings.inference:
                # An inference run must not overwrite what the model was trained with.
                write_configuration(options)
        except RunFolderError as problem:
            error = problem
    message = world.broadcast_object(None if error is None else str(error))
    if error is not None:
        raise error
    if message is not None:
        raise RunFolderError(message)


class _RewardTracker:
    """Follows each behavior's mean episode return from the ``stats`` events it emits."""

    def __init__(self) -> None:
        self.mean: dict[str, float | None] = {}

    def __call__(self, event: StatsEvent) -> None:
        summary = event.values.get(CUMULATIVE_REWARD)
        if summary is not None and summary.num:
            self.mean[event.category] = summary.mean


def _save(
    manager: CheckpointManager,
    trainer: Trainer,
    reward: float | None,
    *,
    final: bool,
    progress: ProgressHook | None,
) -> None:
    import numpy as np

    example = np.asarray(trainer.next_obs[:1], dtype=np.float32)
    save = manager.save_final if final else manager.save
    shown = (
        progress.saving(manager.behavior) if isinstance(progress, SavingProgress) else nullcontext()
    )
    with shown, hierarchical_timer("save_model"):
        save(
            trainer.step,
            trainer.state_dict(),
            trainer.policy_module(),
            example_obs=example,
            reward=reward,
        )


def _schedule_warnings(name: str, trainer: Trainer, *, inference: bool) -> list[str]:
    """What a run of ``trainer`` will do that its settings do not say: train past
    ``max_steps`` to the end of an update, or write fewer summaries than ``summary_freq``
    asks for."""
    settings = trainer.settings
    max_steps, freq = settings.max_steps, settings.summary_freq
    update = trainer.num_envs * trainer.world.size if inference else trainer.steps_per_update
    unit = "update" if inference else "rollout"
    what = _update_words(trainer, update, inference)
    warnings = []
    start = 0 if inference else trainer.step  # inference counts its own steps from 0
    if start >= max_steps:
        return []
    end = start + -(-(max_steps - start) // update) * update
    if end != max_steps:
        if start == 0 and max_steps < update:
            warnings.append(
                f"{name}: max_steps {max_steps} is less than one {unit} ({what}): "
                f"the run will take {end} steps"
            )
        else:
            warnings.append(
                f"{name}: max_steps {max_steps} is not a multiple of the {unit} ({what}): "
                f"the run stops at the end of the {unit} that reaches it, at step {end}"
            )
    if end < (start // freq + 1) * freq:
        if start == 0:
            reason = f"summary_freq {freq} exceeds max_steps {max_steps}"
        else:
            reason = f"no multiple of summary_freq {freq} lies between steps {start} and {end}"
        warnings.append(f"{name}: {reason}: only the final summary will be written")
    elif freq < update:
        warnings.append(
            f"{name}: summary_freq {freq} is less than one {unit} ({what}): summaries can "
            f"only be written once per {unit}, each labelled with the last multiple of "
            f"{freq} it reaches"
        )
    return warnings


def _update_words(trainer: Trainer, update: int, inference: bool) -> str:
    """What one advance is, for a warning: ``"buffer_size 20480"``, ``"8 steps"``."""
    from evtrain.trainers.ppo import PPOTrainer

    if not isinstance(trainer, PPOTrainer) or inference:
        return f"{update} steps"
    ranks = trainer.world.size
    return f"buffer_size {trainer.hp.buffer_size}" + (f" x {ranks} ranks" if ranks > 1 else "")


def _train(
    options: RunOptions,
    trainers: Mapping[str, Trainer],
    managers: Mapping[str, CheckpointManager],
    *,
    rewards: _RewardTracker,
    stop_requested: Callable[[], bool],
    world: World,
    progress: ProgressHook | None,
) -> RunStatus:
    """Advance every behavior in turn until all reach ``max_steps`` or a stop is requested
    (on any rank: the ranks agree after every advance, so they stop at the same step)."""
    next_checkpoint = {
        name: (t.step // t.settings.checkpoint_interval + 1) * t.settings.checkpoint_interval
        for name, t in trainers.items()
    }
    inference = options.checkpoint_settings.inference
    runs = {name: _Inference(trainer) for name, trainer in trainers.items()} if inference else {}
    status = _advance_all(
        trainers, managers, runs, next_checkpoint, rewards, stop_requested, world, progress
    )
    # Completed or stopped cleanly (an abort never gets here): the period still open becomes
    # a last summary, so that even a run shorter than summary_freq writes one.
    for name, trainer in trainers.items():
        if inference:
            runs[name].write_final_summary()
        else:
            trainer.write_final_summary()
    return status


def _advance_all(
    trainers: Mapping[str, Trainer],
    managers: Mapping[str, CheckpointManager],
    runs: Mapping[str, _Inference],
    next_checkpoint: dict[str, int],
    rewards: _RewardTracker,
    stop_requested: Callable[[], bool],
    world: World,
    progress: ProgressHook | None,
) -> RunStatus:
    """The loop of :func:`_train` (``runs`` non-empty: ``--inference``)."""
    inference = bool(runs)
    while not all(t.should_stop for t in trainers.values()):
        for name, trainer in trainers.items():
            if trainer.should_stop:
                continue
            with hierarchical_timer("advance"):
                if inference:
                    runs[name].advance()
                else:
                    trainer.advance()
            if progress is not None:
                progress(name, trainer.step, trainer.settings.max_steps)
            due = trainer.step >= next_checkpoint[name] and not trainer.should_stop
            if due and not inference:  # at max_steps the final save writes this checkpoint
                _save(
                    managers[name],
                    trainer,
                    rewards.mean.get(name),
                    final=False,
                    progress=progress,
                )
                interval = trainer.settings.checkpoint_interval
                next_checkpoint[name] = (trainer.step // interval + 1) * interval
            if world.any(stop_requested()):
                return RunStatus.INTERRUPTED
    return RunStatus.COMPLETED


class _Inference:
    """Runs a trainer's deterministic policy on its environments without learning, reporting
    returns every ``summary_freq`` steps with ``Is Training`` 0 (``--inference``)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.policy = trainer.policy_module()
        self.returns = [0.0] * trainer.num_envs
        self.lengths = [0] * trainer.num_envs
        self.start = trainer.step
        trainer.step = 0  # inference counts its own steps up to max_steps
        # Steps are global, as in training: every rank steps its environments once per advance.
        self.steps_per_advance = int(trainer.world.sum([trainer.num_envs])[0])
        self.last_summary = 0
        self.summarised_at = 0

    def advance(self) -> None:
        import numpy as np
        import torch

        trainer, reporter = self.trainer, self.trainer.reporter
        with torch.no_grad():
            obs = torch.as_tensor(np.asarray(trainer.next_obs, dtype=np.float32))
            actions = self.policy(obs).cpu().numpy()
        next_obs, rewards, terminated, truncated, _ = trainer.envs.step(actions)
        trainer.next_obs = np.asarray(next_obs)
        for i, (reward, done) in enumerate(zip(rewards, terminated | truncated, strict=True)):
            self.returns[i] += float(reward)
            self.lengths[i] += 1
            if done:
                reporter.add_stat(CUMULATIVE_REWARD, self.returns[i], HISTOGRAM)
                reporter.add_stat("Environment/Episode Length", float(self.lengths[i]))
                self.returns[i], self.lengths[i] = 0.0, 0
        trainer.step += self.steps_per_advance
        freq = trainer.settings.summary_freq
        boundary = trainer.step // freq * freq
        if boundary > self.last_summary:
            self._write_summary(boundary)

    def write_final_summary(self) -> None:
        """The open period as a last summary at the last step (see the trainer's)."""
        if self.trainer.step != self.summarised_at:
            self._write_summary(self.trainer.step)

    def _write_summary(self, label: int) -> None:
        trainer, reporter = self.trainer, self.trainer.reporter
        reporter.add_stat("Is Training", 0.0)
        reporter.set_stat("Step", float(trainer.step))
        world = trainer.world
        reporter.write_stats(label, merge=world.merge_stats if world.size > 1 else None)
        self.last_summary = label
        self.summarised_at = trainer.step


def _training_status(options: RunOptions) -> TrainingStatus:
    from evtrain.run.training_status import TrainingStatus

    path = options.checkpoint_settings.run_logs_dir / "training_status.json"
    if path.exists() and (
        options.checkpoint_settings.resume or options.checkpoint_settings.inference
    ):
        return TrainingStatus.load(path)
    return TrainingStatus(path)


def _build(
    options: RunOptions,
    name: str,
    settings: Any,
    bus: Bus,
    seed: int,
    status: TrainingStatus,
) -> tuple[Trainer, CheckpointManager]:
    import torch

    from evtrain.run.checkpoint import CheckpointManager, load_checkpoint
    from evtrain.run.envs import make_envs

    cs = options.checkpoint_settings
    manager = CheckpointManager(
        cs.write_path,
        name,
        keep_checkpoints=settings.keep_checkpoints,
        status=status,
        bus=bus,
        is_writer=get_rank() == 0,
        resume=cs.resume,
    )
    state: dict[str, Any] | None = None
    if cs.resume or (cs.inference and cs.maybe_init_path is None):
        state = manager.load_latest()
        if state is None:
            raise RunFolderError(
                f"cannot resume behavior {name!r}: {manager.checkpoint_path} does not exist "
                "(the run never reached a checkpoint). Start it again with --force."
            )
    elif cs.maybe_init_path is not None:
        source = cs.maybe_init_path / name / "checkpoint.pt"
        if not source.exists():
            raise RunFolderError(
                f"--initialize-from {cs.initialize_from!r}: no checkpoint for behavior {name!r} "
                f"at {source}"
            )
        # Weights (and optimizer/normaliser state) of the earlier run; the counters restart.
        state = {**load_checkpoint(source), "step": 0, "last_summary": 0}
    envs = make_envs(options.env_settings)
    trainer_cls = trainer_type(settings.trainer_type).load()
    initializer = active_initializer()
    device = (
        (initializer.device if initializer is not None else None)
        or options.torch_settings.device
        or ("cuda" if torch.cuda.is_available() else "cpu")
    )
    try:
        trainer = trainer_cls(
            name, settings, envs, StatsReporter(bus, name), seed=seed, device=device
        )
        if state is not None:
            trainer.load_state_dict(state)
        trainer.synchronize()
    except BaseException:
        envs.close()
        raise
    if state is not None:
        logger.info("%s starts at step %d", name, trainer.step)
    return trainer, manager


def _configure_torch(options: RunOptions) -> None:
    import torch

    threads = options.torch_settings.num_threads
    if threads is not None:
        torch.set_num_threads(threads)


def _seed(options: RunOptions, world: World) -> int:
    """This rank's seed: ``env_settings.seed`` (rank 0's draw when -1) + 1000 x rank."""
    seed = options.env_settings.seed
    if seed < 0:
        seed = world.broadcast_object(random.SystemRandom().randrange(2**31))
        logger.info("env_settings.seed is -1: using seed %d", seed)
    return seed + 1000 * get_rank()


def _finish(
    bus: Bus,
    own_bus: bool,
    run_id: str,
    status: RunStatus,
    steps: int,
    handles: list[SubscriptionHandle],
) -> None:
    started = time.monotonic()
    try:
        bus.emit(signals.run_finished, RunFinished(run_id=run_id, status=status, steps=steps))
    finally:
        if own_bus:
            bus.close()
        else:
            # The caller's bus outlives this run: detach (drain, then close) what the run
            # connected, so a second run on the same bus does not write into this run's files.
            for handle in handles:
                handle.disconnect()
            bus.flush()
    logger.debug("Drained the bus in %.3f s", time.monotonic() - started)
