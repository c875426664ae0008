"""``--inference``: every behavior's deterministic policy on its environments, learning nothing.

The runner loads each behavior's latest checkpoint (or ``--initialize-from``'s) as for a
resume, then calls :func:`run_inference` where it would train.  Each trainer steps its own
environments with its own policy (:meth:`~evtrain.trainers.base.Trainer.run_policy`), and its
own bookkeeping reports the episodes' returns and a summary every ``summary_freq`` steps, with
``Is Training`` 0.  Steps count from 0 up to ``max_steps``, global as in training; nothing is
saved or exported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from evtrain.run.loop import ProgressHook, take_turns

if TYPE_CHECKING:
    from evtrain.events.payloads import RunStatus
    from evtrain.trainers.base import Trainer
    from evtrain.world import World


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
