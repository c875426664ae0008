"""``--inference``: every behavior's deterministic policy on its environments, learning nothing.

The runner loads each behavior's latest checkpoint (or ``--initialize-from``'s, or its
``init_path``'s) as for a resume, then calls :func:`run_inference` where it would train; a run
without any is refused before its folder is touched (:func:`check_trained_model`).  Each
trainer steps its own environments with its policy's most likely action (the exported
policy's, :meth:`~evtrain.trainers.base.Trainer.run_policy`), and its own bookkeeping reports
the episodes' returns and a summary every ``summary_freq`` steps, with ``Is Training`` 0.
Steps count from 0 up to ``max_steps``; the summaries go to the category
``<behavior>/inference`` (:func:`inference_category`): a TensorBoard run of their own under
the behavior's folder, never points on the training curve at steps it already has.  Nothing is
saved or exported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from evtrain.errors import ConfigError
from evtrain.run.checkpoints.run_folder import is_run_folder
from evtrain.run.loop import ProgressHook, take_turns

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions
    from evtrain.events.payloads import RunStatus
    from evtrain.trainers.base import Trainer
    from evtrain.world import World


INFERENCE_SUFFIX = "/inference"
"""What :func:`inference_category` appends to a behavior's name."""


def inference_category(behavior: str) -> str:
    """The stats category (and event sender) of ``behavior``'s ``--inference`` summaries."""
    return behavior + INFERENCE_SUFFIX


def check_trained_model(options: RunOptions) -> None:
    """Refuse ``--inference`` when a behavior has no trained model to run: no checkpoint in
    the run's folder, no ``--initialize-from`` and no ``init_path``.

    :raises ConfigError: naming the behaviors and both ways to give one.
    """
    cs = options.checkpoint_settings
    if not cs.inference or cs.initialize_from:
        return
    path = cs.write_path
    if path.is_dir() and any(path.iterdir()) and not is_run_folder(path):
        return  # not a run at all: the run folder's own check says so, and what to do
    missing = [
        name
        for name, settings in options.behaviors.items()
        if settings.init_path is None and not any((cs.write_path / name).glob("*.pt"))
    ]
    if missing:
        raise ConfigError(
            [
                f"--inference runs a trained model, and run {cs.run_id!r} has none for "
                f"{', '.join(missing)} (no checkpoint in {cs.write_path}): train the run "
                "first (--inference, with or without --resume, then runs its latest "
                "checkpoint), or run another run's model with --initialize-from RUN_ID "
                "(checkpoint_settings.initialize_from)"
            ]
        )


def run_inference(
    trainers: Mapping[str, Trainer],
    *,
    stop_requested: Callable[[], bool],
    world: World,
    progress: ProgressHook | None,
) -> RunStatus:
    """Run every trainer's policy until each reaches ``max_steps`` or a stop is requested."""
    for trainer in trainers.values():
        trainer.begin_inference()
    return take_turns(
        trainers,
        lambda trainer: trainer.run_policy(),
        stop_requested=stop_requested,
        world=world,
        progress=progress,
    )
