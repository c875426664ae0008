"""What a run builds before its first step: torch's settings, the seed, and per behavior a
checkpoint manager, the state to start from, the environments and the trainer.

torch is imported only inside these functions (``import evtrain`` stays light).
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.bus.reporter import StatsReporter
from evtrain.errors import RunFolderError
from evtrain.ranks import get_rank
from evtrain.run.evaluation.inference import inference_category
from evtrain.run.wiring import active_initializer
from evtrain.trainers.registry import trainer_type

if TYPE_CHECKING:
    from collections.abc import Callable

    from evtrain.bus import Bus
    from evtrain.config.options import RunOptions
    from evtrain.run.checkpoints.checkpoint import CheckpointManager
    from evtrain.run.checkpoints.training_status import TrainingStatus
    from evtrain.run.environments.shared_steps import SharedSteps
    from evtrain.run.parameters.curriculum import Curriculum
    from evtrain.trainers.base import Trainer
    from evtrain.trainers.ghost import GhostController
    from evtrain.world import World

logger = logging.getLogger("evtrain")


def configure_torch(options: RunOptions) -> None:
    """Apply ``torch_settings.num_threads``, and keep freed memory in the process (see
    :func:`keep_freed_memory`)."""
    import torch

    threads = options.torch_settings.num_threads
    if threads is not None:
        torch.set_num_threads(threads)
    keep_freed_memory()


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameters (``malloc.h``)."""
TRIM_THRESHOLD = 256 * 1024 * 1024
MMAP_THRESHOLD = 32 * 1024 * 1024


def keep_freed_memory() -> bool:
    """On glibc, stop ``free`` from handing memory back to the kernel at every update.

    An update allocates and frees the same few hundred KiB tensors each time. With glibc's
    defaults those blocks are ``mmap``-ed or trimmed off the heap when freed, so the next update
    pays a page fault per 4 KiB to get them back (600+ per SAC update, about 10% of its time).
    A trim threshold of 256 MiB and an mmap threshold of 32 MiB keep them in the heap for reuse.
    The process keeps up to 256 MiB it no longer uses instead of returning it.

    Left alone when ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_MMAP_THRESHOLD_`` is set (glibc
    reads those itself, so a user's choice wins), and off glibc.

    :returns: whether the thresholds were set.
    """
    import os
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if "MALLOC_TRIM_THRESHOLD_" in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    import ctypes

    libc = ctypes.CDLL(None)
    ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and ok)


def with_drawn_seed(options: RunOptions, world: World) -> RunOptions:
    """``options`` with ``env_settings.seed`` drawn (on rank 0, shared) when it is -1, logged;
    else ``options`` itself.  Drawn before the run folder is stamped, so its
    ``configuration.yaml`` holds the seed the run used and the run can be given again."""
    if options.env_settings.seed >= 0:
        return options
    seed = world.broadcast_object(random.SystemRandom().randrange(2**31))
    logger.info("env_settings.seed is -1: using seed %d", seed)
    return attrs.evolve(options, env_settings=attrs.evolve(options.env_settings, seed=seed))


def rank_seed(options: RunOptions, world: World) -> int:
    """This rank's seed: ``env_settings.seed`` (rank 0's draw when -1) + 1000 x rank."""
    return with_drawn_seed(options, world).env_settings.seed + 1000 * get_rank()


def training_status(options: RunOptions) -> TrainingStatus:
    """The run's training_status.json: the recorded one when resuming (or inferring)."""
    from evtrain.run.checkpoints.training_status import TrainingStatus

    cs = options.checkpoint_settings
    path = cs.run_logs_dir / "training_status.json"
    if path.exists() and (cs.resume or cs.inference):
        return TrainingStatus.load(path)
    return TrainingStatus(path)


def build_behavior(
    options: RunOptions,
    name: str,
    settings: Any,
    bus: Bus,
    seed: int,
    status: TrainingStatus,
    curriculum: Curriculum | None = None,
    shared: SharedSteps | None = None,
) -> tuple[Trainer, CheckpointManager]:
    """Behavior ``name``'s trainer, at the state it starts from and in sync with the other
    ranks, and its checkpoint manager.

    :param curriculum: the run's ``environment_parameters``: it wraps the environments and
        hears the trainer's episodes and summaries.
    :param shared: ``env_settings.shared_env``'s environment: the behavior acts in its view.

    :raises RunFolderError: ``--resume``/``--inference`` without a checkpoint, or
        ``--initialize-from`` a run without this behavior, an ``init_path`` without a
        checkpoint.
    :raises CheckpointError: the checkpoint cannot be read, or does not fit the trainer the
        options build (:func:`evtrain.run.checkpoints.checkpoint_fit.misfit`).
    """
    cs = options.checkpoint_settings
    manager = _checkpoint_manager(options, name, settings, bus, status)
    state = _initial_state(options, name, manager)
    envs, reporter = _envs_and_reporter(options, name, settings, bus, curriculum, shared)
    if options.env_settings.unity and shared is not None:
        manager.exporter = _unity_exporter(shared, name, envs)
    trainer_cls = trainer_type(settings.trainer_type).load()
    self_play: GhostController | None = None
    try:
        _check_self_play(name, settings, envs)  # before the trainer says anything
        trainer = trainer_cls(name, settings, envs, reporter, seed=seed, device=_device(options))
        self_play = _self_play(options, trainer, settings, _league_envs(options, name, shared))
        if state is not None:
            try:
                trainer.load_state_dict(state)
            except (RuntimeError, KeyError, ValueError, IndexError) as error:
                # torch's size/key mismatch lists: said as the config keys that changed
                from evtrain.run.checkpoints.checkpoint_fit import misfit

                source = None if cs.resume else _init_source(options, name)
                raise misfit(options, name, source or manager.checkpoint_path, error) from None
        trainer.synchronize()
        if self_play is not None:
            self_play.start()
    except BaseException:
        if self_play is not None:
            self_play.close()
        envs.close()
        raise
    if state is not None:
        logger.info("%s starts at step %d", name, trainer.step)
    return trainer, manager


def _checkpoint_manager(
    options: RunOptions, name: str, settings: Any, bus: Bus, status: TrainingStatus
) -> CheckpointManager:
    """Behavior ``name``'s checkpoint manager: rank 0 writes."""
    from evtrain.run.checkpoints.checkpoint import CheckpointManager

    cs = options.checkpoint_settings
    return CheckpointManager(
        cs.write_path,
        name,
        keep_checkpoints=settings.keep_checkpoints,
        status=status,
        bus=bus,
        is_writer=get_rank() == 0,
        resume=cs.resume,
    )


def _unity_exporter(shared: SharedSteps, name: str, envs: Any) -> Any:
    """What exports a Unity run's behavior ``name``: the graph Unity's model loader runs."""
    from evtrain.export.unity_model import UnityExporter

    spec = shared.env.specs[name]  # type: ignore[union-attr]
    space = envs.single_observation_space
    inputs = list(space.spaces) if hasattr(space, "spaces") else None  # a Dict's keys
    return UnityExporter(spec.observation_specs, spec.action_spec, inputs)


def _check_self_play(name: str, settings: Any, envs: Any) -> None:
    """Refuse ``self_play`` on environments without two teams of the behavior (a
    :class:`~evtrain.errors.ConfigError`)."""
    if settings.self_play is not None:
        from evtrain.trainers.ghost import team_slots

        team_slots(name, envs)


def _self_play(
    options: RunOptions, trainer: Trainer, settings: Any, league_envs: Callable[[], Any] | None
) -> GhostController | None:
    """The behavior's ``self_play``, attached to its trainer before a checkpoint is loaded
    (which restores it too); without its league's exploiter under ``--inference``, which
    trains nothing."""
    self_play = settings.self_play
    if self_play is None:
        return None
    from evtrain.trainers.ghost import GhostController

    if options.checkpoint_settings.inference:
        self_play = attrs.evolve(self_play, league=None)
    return GhostController(trainer, self_play, league_envs)


def _league_envs(
    options: RunOptions, name: str, shared: SharedSteps | None
) -> Callable[[], Any] | None:
    """What makes the copies of ``self_play.league``'s exploiter: the behavior's environment
    again, without the run's ``environment_parameters`` (none with a shared environment)."""
    if shared is not None:
        return None
    from evtrain.run.environments.envs import make_envs

    return lambda: make_envs(options.env_settings, behavior=name, behaviors=options.behaviors)


def _envs_and_reporter(
    options: RunOptions,
    name: str,
    settings: Any,
    bus: Bus,
    curriculum: Curriculum | None,
    shared: SharedSteps | None,
) -> tuple[Any, StatsReporter]:
    """Behavior ``name``'s environments (its view of ``shared``, if given) and the reporter
    its trainer reports through: the curriculum's, which hears the summaries, when the run
    has ``environment_parameters``."""
    from evtrain.run.environments.envs import make_envs

    # --inference reports apart from training: never onto the training curve's earlier steps.
    category = inference_category(name) if options.checkpoint_settings.inference else name
    if shared is not None:
        view = shared.view(name)
        if curriculum is None:
            return view, StatsReporter(bus, category)
        first = name == next(iter(options.behaviors))  # every view reaches the same instances
        if first and not options.env_settings.unity:  # a build's: build_channels
            curriculum.attach(view, options.env_settings.env_id)
        return view, curriculum.reporter(bus, category, settings.max_steps)
    behaviors = options.behaviors
    if curriculum is None:
        envs = make_envs(options.env_settings, behavior=name, behaviors=behaviors)
        return envs, StatsReporter(bus, category)
    envs = make_envs(options.env_settings, curriculum.wrapper(), behavior=name, behaviors=behaviors)
    curriculum.attach(envs, options.env_settings.env_id)
    return envs, curriculum.reporter(bus, category, settings.max_steps)


def _initial_state(
    options: RunOptions, name: str, manager: CheckpointManager
) -> dict[str, Any] | None:
    """The state ``name`` starts from: the latest checkpoint (``--resume``, ``--inference``),
    an earlier checkpoint's with the counters at 0 (the behavior's ``init_path``, else
    ``--initialize-from``), or none."""
    from evtrain.run.checkpoints.checkpoint_file import load_checkpoint

    cs = options.checkpoint_settings
    source = None if cs.resume else _init_source(options, name)
    if source is None and (cs.resume or cs.inference):
        state = manager.load_latest()
        if state is None and not cs.inference and not _any_checkpoint(options):
            # Killed before its first checkpoint: start again, in the same folder (its
            # journals, still to be delivered, stay); --force would delete them.
            logger.info("%s: run %r has no checkpoint yet; it starts at step 0", name, cs.run_id)
            return None
        if state is None:
            raise RunFolderError(
                f"cannot resume behavior {name!r}: {manager.checkpoint_path} does not exist "
                "(the run never reached a checkpoint). Start it again with --force "
                "(checkpoint_settings.force)."
            )
        return state
    if source is None:
        return None
    # Weights (and optimizer/normaliser state) of the earlier run; the counters restart.
    return {**load_checkpoint(source), "step": 0, "last_summary": 0}


def _any_checkpoint(options: RunOptions) -> bool:
    """Whether some behavior of the run has a ``checkpoint.pt`` (one without it, beside one
    with it, is a behavior the run did not have: an error, not a fresh start)."""
    folder = options.checkpoint_settings.write_path
    return any((folder / name / "checkpoint.pt").exists() for name in options.behaviors)


def _init_source(options: RunOptions, name: str) -> Path | None:
    """The checkpoint file ``name`` is initialized from, or ``None``.

    ML-Agents' rules: a behavior's ``init_path`` wins over ``initialize_from``; an
    ``init_path`` that is a bare file name is looked up in ``initialize_from``'s folder of the
    behavior.  A folder stands for its ``checkpoint.pt`` (a behavior folder) or its
    ``<name>/checkpoint.pt`` (a run folder).
    """
    cs = options.checkpoint_settings
    init_dir = cs.maybe_init_path
    init_path = options.behaviors[name].init_path
    if init_path is None:
        if init_dir is None:
            return None
        source = init_dir / name / "checkpoint.pt"
        if not source.exists():
            raise RunFolderError(
                f"--initialize-from {cs.initialize_from!r}: no checkpoint for behavior "
                f"{name!r} at {source}"
            )
        return source
    key = f"behaviors.{name}.init_path"
    path = Path(init_path).expanduser()
    if init_dir is not None and path.parent == Path():
        path = init_dir / name / path
    if not path.exists():
        raise RunFolderError(
            f"{key}: {path} does not exist; give a checkpoint .pt file, or a run or behavior "
            "folder holding checkpoint.pt"
        )
    if path.is_file():
        return path
    for source in (path / "checkpoint.pt", path / name / "checkpoint.pt"):
        if source.is_file():
            return source
    raise RunFolderError(
        f"{key}: {path} is a folder without checkpoint.pt or {name}/checkpoint.pt; give a "
        "checkpoint .pt file, or a run or behavior folder holding one"
    )


def _device(options: RunOptions) -> str:
    """The initializer's choice, else ``torch_settings.device``, else CUDA when present."""
    import torch

    initializer = active_initializer()
    return (
        (initializer.device if initializer is not None else None)
        or options.torch_settings.device
        or ("cuda" if torch.cuda.is_available() else "cpu")
    )
