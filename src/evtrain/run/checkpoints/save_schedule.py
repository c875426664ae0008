"""When and what a run saves: a checkpoint every ``checkpoint_every`` steps, the final save, and
what a second interrupt left on disk.

Each save takes a snapshot of the trainer's state and policy on the training thread and hands
it to the :class:`~evtrain.run.checkpoints.saver.BackgroundSaver`, which writes, exports and emits
``save``/``export`` while training goes on.  A checkpoint implies its statistics: before a
save writes, what was emitted so far is flushed to every local writer (journaled for a spool
one).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evtrain.run.checkpoints.saver import BackgroundSaver, snapshot
from evtrain.run.interrupt import StopRequest
from evtrain.run.loop import ProgressHook
from evtrain.run.run_bus import RunBus
from evtrain.timers import hierarchical_timer

if TYPE_CHECKING:
    from evtrain.run.checkpoints.checkpoint import CheckpointManager
    from evtrain.trainers.base import Trainer

logger = logging.getLogger("evtrain")


@runtime_checkable
class SavingProgress(Protocol):
    """A progress hook that also shows when a behavior saves and exports, which holds the
    runner for a while (:class:`evtrain.run.progress.ProgressDisplay` is one)."""

    def __call__(self, behavior: str, step: int, max_steps: int) -> None: ...

    def saving(self, behavior: str) -> AbstractContextManager[None]: ...


class SaveSchedule:
    """The saves of one run's behaviors.

    :param trainers: the run's trainers by behavior (filled in as the run builds them).
    :param managers: their checkpoint managers, likewise.
    :param rewards: each behavior's mean return in its last summary period, recorded with
        its checkpoints.
    """

    def __init__(
        self,
        trainers: Mapping[str, Trainer],
        managers: Mapping[str, CheckpointManager],
        rewards: Mapping[str, float | None],
        run_bus: RunBus,
        progress: ProgressHook | None,
    ) -> None:
        self.trainers = trainers
        self.managers = managers
        self.rewards = rewards
        self.run_bus = run_bus
        self.progress = progress
        self.saver = BackgroundSaver()
        """Writes the checkpoints and exports, off the training thread."""
        self.next_checkpoint: dict[str, int] = {}
        self.models: dict[str, Path] = {}
        """The final exported policy per behavior."""
        self.finished: list[str] = []
        """Behaviors whose final save is done."""

    def start(self) -> None:
        """Training starts: each behavior's next checkpoint is due at the next multiple of
        its ``checkpoint_every``."""
        self.next_checkpoint = {
            name: _next_multiple(t.step, t.settings.checkpoint_every)
            for name, t in self.trainers.items()
        }

    def checkpoint_if_due(self, name: str, trainer: Trainer) -> None:
        """After a turn of ``name``: save a checkpoint if one is due."""
        # At max_steps the final save writes this checkpoint.
        if trainer.step < self.next_checkpoint[name] or trainer.should_stop:
            return
        self.save(name, final=False)
        interval = trainer.settings.checkpoint_every
        self.next_checkpoint[name] = _next_multiple(trainer.step, interval)

    def save_final(self, stop: StopRequest) -> None:
        """Every behavior's final save, waited for."""
        # The last period's reward goes into the final checkpoint record; a subscriber that
        # hangs may delay the final save by the drain timeout, never more, and a signal ends
        # that wait (the events still reach the subscribers in the drain).
        with stop.skippable("for subscribers before the final save"):
            self.run_bus.flush(self.run_bus.deadline(), "before the final save", True)
        for name in self.trainers:
            self.save(name, final=True)
        self.saver.wait()
        for name, manager in self.managers.items():
            self.finished.append(name)
            if manager.is_writer and manager.final_model_path.exists():
                self.models[name] = manager.final_model_path

    def save(self, name: str, *, final: bool) -> None:
        """Hand a snapshot of ``name``'s state and policy to the background saver (the
        training thread goes on while it writes, exports and emits ``save``/``export``)."""
        trainer, manager = self.trainers[name], self.managers[name]
        if not manager.is_writer:
            return
        trainer.wait_for_update()  # threaded: the files hold every update of the steps so far
        with hierarchical_timer("snapshot"):
            state = snapshot(trainer.state_dict())
            policy = snapshot(trainer.policy_module())
            example = example_obs(trainer.envs.single_observation_space, trainer.next_obs)
        step, reward = trainer.step, self.rewards.get(name)
        save = manager.save_final if final else manager.save
        if final:  # a moment to wait for (tests signal during the final save)
            logger.info("Final save of %s at step %d: checkpoint and export", name, step)
        progress, run_bus = self.progress, self.run_bus

        def job() -> None:
            # A checkpoint implies its statistics: what was emitted so far is written and
            # synced by every local writer (journaled for a spool one) before the checkpoint
            # is; a writer that hangs holds it back by the drain timeout, never more.
            run_bus.flush(run_bus.deadline(), f"before saving {name}", True)
            shown = progress.saving(name) if isinstance(progress, SavingProgress) else nullcontext()
            with shown, hierarchical_timer("save_model"):
                save(step, state, policy, example_obs=example, reward=reward)

        self.saver.submit(f"{'final save' if final else 'checkpoint'} of {name} at {step}", job)

    def abort(self) -> None:
        """A second interrupt: the file being written is completed, saves not yet started are
        dropped, and the log says what the interrupted save wrote."""
        self.saver.abort(self._cancel_saves)
        logger.warning(_abort_message(self.managers, self.finished))

    def close(self) -> None:
        """Wait for the saves still queued (``save`` and ``export`` come before
        ``run_finished``)."""
        self.saver.close()

    def _cancel_saves(self) -> None:
        for manager in self.managers.values():
            manager.cancel()


def example_obs(space: Any, next_obs: Any) -> Any:
    """A float32 copy of the first observation, as a batch of one, to export with: one per
    input of the policy (the ``Box``, or each key of a ``Dict``), by input name."""
    import numpy as np

    from evtrain.trainers.observations import policy_inputs

    inputs = policy_inputs(space, next_obs)
    return {name: np.array(x[:1], dtype=np.float32, copy=True) for name, x in inputs.items()}


def _next_multiple(step: int, interval: int) -> int:
    return (step // interval + 1) * interval


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
