"""The loop of a run: behaviors take turns until every one reaches ``max_steps``, and what that
loop will do that the settings do not say (train past ``max_steps``, summarise less often).

Training (:mod:`evtrain.run.learn`) and ``--inference`` (:mod:`evtrain.run.evaluation.inference`)
share it; they differ in what one turn of a trainer is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from evtrain.events.payloads import RunStatus
from evtrain.timers import hierarchical_timer

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer
    from evtrain.world import World

ProgressHook = Callable[[str, int, int], None]
"""Called after every trainer update with (behavior, step, max_steps)."""


def take_turns(
    trainers: Mapping[str, Trainer],
    advance: Callable[[Trainer], None],
    *,
    stop_requested: Callable[[], bool],
    world: World,
    progress: ProgressHook | None,
    after: Callable[[str, Trainer], None] | None = None,
) -> RunStatus:
    """``advance`` every behavior in turn until all reach ``max_steps`` or a stop is requested
    (on any rank: the ranks agree after every turn, so they stop at the same step).

    :param after: called after each turn, once ``progress`` has its step (the runner saves a
        due checkpoint there).
    """
    while not all(t.should_stop for t in trainers.values()):
        for name, trainer in trainers.items():
            if trainer.should_stop:
                continue
            with hierarchical_timer("advance"):
                advance(trainer)
            if progress is not None:
                progress(name, trainer.step, trainer.settings.max_steps)
            if after is not None:
                after(name, trainer)
            if world.any(stop_requested()):
                return RunStatus.INTERRUPTED
    return RunStatus.COMPLETED


def schedule_warnings(name: str, trainer: Trainer, *, inference: bool) -> list[str]:
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
