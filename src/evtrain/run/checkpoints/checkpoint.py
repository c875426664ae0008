"""Checkpoints: atomic files, the rolling ``<Behavior>-<step>`` pairs, and training_status.json.

Layout (ML-Agents', kept on purpose)::

    results/<run_id>/<Behavior>.onnx                 final exported policy
    results/<run_id>/<Behavior>/<Behavior>-<step>.pt  trainer state   } at most keep_checkpoints
    results/<run_id>/<Behavior>/<Behavior>-<step>.onnx policy          } pairs
    results/<run_id>/<Behavior>/checkpoint.pt         latest state, for --resume
    results/<run_id>/run_logs/training_status.json    checkpoint lists, final checkpoints

Every file is written by :func:`~evtrain.atomic.atomic_write` (a trainer state by
:func:`~evtrain.run.checkpoints.checkpoint_file.save_checkpoint`, re-exported here): a reader, a
crash or ``kill -9`` at any moment sees the old complete file or the new complete one, never a torn
one.  ``save`` and ``export`` are emitted only once their file is in place.  Only one rank
writes (``is_writer``); the runner decides which.

The manager writes; the list of tracked checkpoints and their rotation are
:class:`~evtrain.run.checkpoints.checkpoint_list.CheckpointList`'s, and how far a save has got (for
a second Ctrl-C's message, and to cancel one)
:class:`~evtrain.run.checkpoints.save_progress.SaveProgress`'s.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypeVar

import attrs
import torch
from torch import nn

from evtrain.atomic import StrPath, atomic_copy, disk_full, remove_stale_temps
from evtrain.bus import Bus
from evtrain.errors import BusClosedError
from evtrain.events import signals
from evtrain.events.payloads import ExportEvent, SaveEvent
from evtrain.events.signals import EventSignal
from evtrain.export import Example, PolicyExporter
from evtrain.run.checkpoints.checkpoint_file import load_checkpoint, save_checkpoint
from evtrain.run.checkpoints.checkpoint_list import CheckpointList
from evtrain.run.checkpoints.save_progress import SaveCancelled, SaveProgress
from evtrain.run.checkpoints.training_status import ModelCheckpoint, TrainingStatus, finite_or_none
from evtrain.timers import hierarchical_timer
from evtrain.trainers.finite import refuse_nonfinite_weights

__all__ = ["CheckpointManager", "SaveCancelled", "load_checkpoint", "save_checkpoint"]

logger = logging.getLogger("evtrain.run.checkpoints.checkpoint")

P = TypeVar("P")


class CheckpointManager:
    """Saves one behavior's checkpoints, exports its policy, and keeps ``keep_checkpoints`` pairs.

    :param run_folder: ``results/<run_id>``; the behavior's files go to ``run_folder/behavior``.
    :param behavior: the behavior name (the events' ``category``).
    :param keep_checkpoints: pairs kept on disk; ``0`` keeps all.  ``checkpoint.pt`` and the
        final model are never deleted.
    :param status: the run's training status, shared by all behaviors; default a new one at
        ``run_folder/run_logs/training_status.json``.  The manager starts from its checkpoint
        list (so a resumed run keeps rotating the files of the first one).
    :param bus: where ``save`` and ``export`` are emitted; ``None`` emits nothing.
    :param is_writer: whether this process writes.  On other ranks the manager writes, deletes
        and emits nothing: :meth:`save` and :meth:`save_final` return ``[]`` (only
        :meth:`load_latest` works).  The runner decides which rank writes.
    :param resume: reconcile the tracked list with the folder: forget checkpoints whose files
        are all gone, and adopt ``<Behavior>-<step>`` files the list lacks (a process killed
        between writing a checkpoint and recording it).  Without it, files of an earlier run
        (``--force``) stay untracked, as in ML-Agents.  Either way, the writer removes temporary
        files of killed writes.
    """

    def __init__(
        self,
        run_folder: StrPath,
        behavior: str,
        *,
        keep_checkpoints: int = 5,
        status: TrainingStatus | None = None,
        bus: Bus | None = None,
        is_writer: bool = True,
        resume: bool = False,
    ) -> None:
        """:attr:`exporter` may be set to another with ``export(module, example_obs, path)``
        (a Unity run's :class:`~evtrain.export.unity_model.UnityExporter`)."""
        if keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints must be 0 (all) or more, got {keep_checkpoints}")
        self.run_folder = Path(run_folder)
        self.behavior = behavior
        self.folder = self.run_folder / behavior
        """``results/<run_id>/<Behavior>``."""
        self.keep_checkpoints = keep_checkpoints
        """Pairs kept on disk; ``0`` keeps all."""
        self.status = (
            status
            if status is not None
            else TrainingStatus(self.run_folder / "run_logs" / "training_status.json")
        )
        self.bus = bus
        self.is_writer = is_writer
        """Whether this process writes (one rank does)."""
        self.progress = SaveProgress()
        """How far the latest save has got (see :attr:`in_progress`, :attr:`written`)."""
        self.exporter: Any = PolicyExporter()  # traces the policy once, then puts new weights in
        self._list = CheckpointList(
            self.folder,
            behavior,
            self.status,
            keep_checkpoints=keep_checkpoints,
            keep=self.checkpoint_path,
            progress=self.progress,
        )
        if is_writer:
            self.folder.mkdir(parents=True, exist_ok=True)
            # Nothing writes here yet: what looks like a temporary file is a killed write's.
            remove_stale_temps(self.folder)
            remove_stale_temps(self.run_folder, self.final_model_path.name)
            remove_stale_temps(self.run_folder, f"{behavior}-best.onnx")  # evaluation's best
            remove_stale_temps(self.status.path.parent, self.status.path.name)
            if resume:
                self._list.reconcile()

    @property
    def checkpoint_path(self) -> Path:
        """``<Behavior>/checkpoint.pt``: the latest state."""
        return self.folder / "checkpoint.pt"

    @property
    def final_model_path(self) -> Path:
        """``results/<run_id>/<Behavior>.onnx``."""
        return self.run_folder / f"{self.behavior}.onnx"

    @property
    def checkpoints(self) -> tuple[ModelCheckpoint, ...]:
        """The tracked checkpoints, oldest first."""
        return self._list.checkpoints

    @property
    def in_progress(self) -> tuple[str, int] | None:
        """``("checkpoint" | "final save", step)`` while :meth:`save` or :meth:`save_final`
        runs; left set when an exception (a second Ctrl-C) interrupted it."""
        return self.progress.in_progress

    @property
    def written(self) -> list[Path]:
        """The files the latest save has written so far, in order (each complete)."""
        return self.progress.written

    def load_latest(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The state in ``checkpoint.pt``, or ``None`` if there is none (on any rank)."""
        return (
            load_checkpoint(self.checkpoint_path, map_location)
            if self.checkpoint_path.exists()
            else None
        )

    def save(
        self,
        step: int,
        state: dict[str, Any],
        policy: nn.Module | None = None,
        *,
        example_obs: Example | None = None,
        reward: float | None = None,
    ) -> list[SaveEvent | ExportEvent]:
        """Write checkpoint ``step``, in this order, each file atomically:

        1. ``<Behavior>-<step>.pt`` → emit ``save``;
        2. ``checkpoint.pt`` (a copy) — before the export, so an export that fails, hangs or
           is interrupted cannot leave ``--resume`` an older state;
        3. if ``policy`` is given, ``<Behavior>-<step>.onnx``, checked → emit ``export``.  An
           export failure is logged and the checkpoint kept without its ``.onnx``;
        4. training_status.json with the new checkpoint; then the oldest checkpoints beyond
           ``keep_checkpoints`` are deleted, and the status written again.

        Saving a step already tracked (the final save right after a periodic one) replaces it.

        :param example_obs: a batch of observations to export ``policy`` with (required with it;
            a mapping of input names to batches for a policy of several inputs).
        :param reward: recorded with the checkpoint (non-finite values as ``None``).
        :returns: the events emitted, in order (``[]`` when not the writer).
        :raises OSError: the ``.pt`` or ``checkpoint.pt`` could not be written.
        :raises TypeError: ``state`` holds a value ``weights_only`` loading refuses.
        """
        if not self.is_writer:
            return []
        if policy is not None and example_obs is None:
            raise ValueError("save() needs example_obs to export the policy")
        self.progress.begin("checkpoint", step)
        events = self._save(step, state, policy, example_obs, reward)
        self.progress.end()
        return events

    def cancel(self) -> None:
        """Stop a save running on another thread before its next file (a second Ctrl-C):
        it raises :class:`SaveCancelled` there, leaving :attr:`in_progress` set and
        :attr:`written` as far as it got.  Every later save is cancelled too."""
        self.progress.cancel()

    def files_written(self) -> list[Path]:
        """:attr:`written`, plus the file an interruption caught between its rename and its
        record (a second Ctrl-C can land there), if it was replaced."""
        return self.progress.files_written()

    def _save(
        self,
        step: int,
        state: dict[str, Any],
        policy: nn.Module | None,
        example_obs: Example | None,
        reward: float | None,
    ) -> list[SaveEvent | ExportEvent]:
        reward = finite_or_none(reward)
        refuse_nonfinite_weights(self.behavior, step, state, policy)
        pt, onnx = self._list.names(step)
        events: list[SaveEvent | ExportEvent] = []

        self.progress.writing(pt)
        with hierarchical_timer("checkpoint"):
            save_checkpoint(pt, state)
        self.progress.wrote(pt)
        events.append(
            self.emit(
                signals.save, SaveEvent(category=self.behavior, step=step, path=pt, reward=reward)
            )
        )
        self.progress.writing(self.checkpoint_path)
        atomic_copy(pt, self.checkpoint_path)
        self.progress.wrote(self.checkpoint_path)
        if (
            policy is not None
            and example_obs is not None
            and self.export(policy, example_obs, onnx, step)
        ):
            self.progress.wrote(onnx)
            events.append(
                self.emit(signals.export, ExportEvent(category=self.behavior, step=step, path=onnx))
            )

        # An .onnx of this step from an earlier save stays part of the checkpoint if present.
        model = onnx if onnx.exists() else pt
        self._list.record(
            ModelCheckpoint(
                steps=step,
                file_path=str(model),
                reward=reward,
                auxillary_file_paths=(str(pt),) if model == onnx else (),
            )
        )
        return events

    def save_final(
        self,
        step: int,
        state: dict[str, Any],
        policy: nn.Module | None = None,
        *,
        example_obs: Example | None = None,
        reward: float | None = None,
    ) -> list[SaveEvent | ExportEvent]:
        """The end-of-run save (also on Ctrl-C): :meth:`save`, then the step's ``.onnx`` copied
        to ``results/<run_id>/<Behavior>.onnx`` → emit ``export`` (with that path), and
        ``final_checkpoint`` recorded.  Without a model (no policy, or its export failed) the
        final checkpoint is the ``.pt``, and the error is logged.
        """
        if not self.is_writer:
            return []
        if policy is not None and example_obs is None:
            raise ValueError("save_final() needs example_obs to export the policy")
        self.progress.begin("final save", step)
        events = self._save(step, state, policy, example_obs, reward)
        latest = self._list.checkpoints[-1]
        final = latest
        exported = any(isinstance(e, ExportEvent) for e in events)
        if exported:
            try:
                self.progress.writing(self.final_model_path)
                atomic_copy(Path(latest.file_path), self.final_model_path)
            except OSError:
                logger.exception(
                    "Could not copy the final model of %s to %s",
                    self.behavior,
                    self.final_model_path,
                )
            else:
                self.progress.wrote(self.final_model_path)
                final = attrs.evolve(latest, file_path=str(self.final_model_path))
                events.append(
                    self.emit(
                        signals.export,
                        ExportEvent(category=self.behavior, step=step, path=self.final_model_path),
                    )
                )
        elif policy is not None:
            logger.error(
                "No final model for %s: its export failed; the trained state is in %s.",
                self.behavior,
                latest.file_path,
            )
        self.progress.writing(self.status.path)
        self.status.update(self.behavior, final=final)
        self.progress.wrote(self.status.path)
        self.progress.end()
        return events

    def emit(self, signal: EventSignal[P], payload: P) -> P:
        """Emit ``payload`` on ``signal`` (a file now in place); a closed bus is logged."""
        if self.bus is not None:
            try:
                self.bus.emit(signal, payload)
            except BusClosedError:  # announcing is secondary: the files are what must not be lost
                logger.warning("The bus is closed; %s was not emitted: %r", signal.name, payload)
        return payload

    def export(self, policy: nn.Module, example_obs: Example, path: Path, step: int) -> bool:
        """Export ``policy`` to ``path`` (atomically, checked); a failure is logged and
        answered ``False``, never raised: a checkpoint is never lost over its export."""
        self.progress.writing(path)
        try:
            with hierarchical_timer("export"):
                self.exporter.export(policy, example_obs, path)
        except Exception as error:
            # Never lose the checkpoint over its export (ML-Agents users did, at Ctrl-C).  A
            # full disk is the machine's state, not a bug: one line, no traceback.
            logger.error(
                "Exporting the policy of %s at step %d to %s failed%s; the checkpoint is kept "
                "without it.",
                self.behavior,
                step,
                path,
                f": {error}" if disk_full(error) else "",
                exc_info=None if disk_full(error) else error,
            )
            return False
        return True
