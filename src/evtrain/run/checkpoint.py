"""Checkpoints: atomic files, the rolling ``<Behavior>-<step>`` pairs, and training_status.json.

Layout (ML-Agents', kept on purpose)::

    results/<run_id>/<Behavior>.onnx                 final exported policy
    results/<run_id>/<Behavior>/<Behavior>-<step>.pt  trainer state   } at most keep_checkpoints
    results/<run_id>/<Behavior>/<Behavior>-<step>.onnx policy          } pairs
    results/<run_id>/<Behavior>/checkpoint.pt         latest state, for --resume
    results/<run_id>/run_logs/training_status.json    checkpoint lists, final checkpoints

Every file is written by :func:`~evtrain.atomic.atomic_write` (a trainer state by
:func:`~evtrain.run.checkpoint_file.save_checkpoint`, re-exported here): a reader, a crash or
``kill -9`` at any moment sees the old complete file or the new complete one, never a torn
one.  ``save`` and ``export`` are emitted only once their file is in place.  Only one rank
writes (``is_writer``); the runner decides which.
"""

from __future__ import annotations

import logging
import re
import threading
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
from evtrain.run.checkpoint_file import load_checkpoint, save_checkpoint
from evtrain.run.training_status import ModelCheckpoint, TrainingStatus, finite_or_none
from evtrain.timers import hierarchical_timer
from evtrain.trainers.finite import refuse_nonfinite_weights

__all__ = ["CheckpointManager", "SaveCancelled", "load_checkpoint", "save_checkpoint"]

logger = logging.getLogger("evtrain.run.checkpoint")

P = TypeVar("P")


class SaveCancelled(Exception):
    """A save stopped before its next file by :meth:`CheckpointManager.cancel`."""


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` is (an atomic write replaces it with another), ``None``: none."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_mtime_ns)


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
        self.in_progress: tuple[str, int] | None = None
        """``("checkpoint" | "final save", step)`` while :meth:`save` or :meth:`save_final`
        runs; left set when an exception (a second Ctrl-C) interrupted it."""
        self.written: list[Path] = []
        """The files the latest save has written so far, in order (each complete)."""
        self._pending: tuple[Path, tuple[int, int] | None] | None = None
        self._cancelled = threading.Event()
        self._exporter = PolicyExporter()  # traces the policy once, then puts new weights in
        # Paths are rebased onto this folder: the run folder may have moved, or the run been
        # resumed from another working directory, since they were recorded.
        self._checkpoints = [self._rebased(c) for c in self.status.checkpoints(behavior)]
        if is_writer:
            self.folder.mkdir(parents=True, exist_ok=True)
            # Nothing writes here yet: what looks like a temporary file is a killed write's.
            remove_stale_temps(self.folder)
            remove_stale_temps(self.run_folder, self.final_model_path.name)
            remove_stale_temps(self.status.path.parent, self.status.path.name)
            if resume:
                self._reconcile()

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
        return tuple(self._checkpoints)

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
        self._begin("checkpoint", step)
        events = self._save(step, state, policy, example_obs, reward)
        self.in_progress = None
        return events

    def _begin(self, kind: str, step: int) -> None:
        self.in_progress = (kind, step)
        self.written = []
        self._pending = None

    def cancel(self) -> None:
        """Stop a save running on another thread before its next file (a second Ctrl-C):
        it raises :class:`SaveCancelled` there, leaving :attr:`in_progress` set and
        :attr:`written` as far as it got.  Every later save is cancelled too."""
        self._cancelled.set()

    def _writing(self, path: Path) -> None:
        """``path`` is about to be replaced: note which file is there now.

        :raises SaveCancelled: :meth:`cancel` was called.
        """
        if self._cancelled.is_set():
            raise SaveCancelled(f"the save stopped before {path.name}")
        self._pending = (path, _identity(path))

    def _wrote(self, path: Path) -> None:
        self.written = [p for p in self.written if p != path] + [path]
        self._pending = None

    def files_written(self) -> list[Path]:
        """:attr:`written`, plus the file an interruption caught between its rename and its
        record (a second Ctrl-C can land there), if it was replaced."""
        if self._pending is not None:
            path, before = self._pending
            if _identity(path) not in (None, before):
                return [p for p in self.written if p != path] + [path]
        return list(self.written)

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
        name = f"{self.behavior}-{step}"
        pt, onnx = self.folder / f"{name}.pt", self.folder / f"{name}.onnx"
        events: list[SaveEvent | ExportEvent] = []

        self._writing(pt)
        with hierarchical_timer("checkpoint"):
            save_checkpoint(pt, state)
        self._wrote(pt)
        events.append(
            self._emit(
                signals.save, SaveEvent(category=self.behavior, step=step, path=pt, reward=reward)
            )
        )
        self._writing(self.checkpoint_path)
        atomic_copy(pt, self.checkpoint_path)
        self._wrote(self.checkpoint_path)
        if (
            policy is not None
            and example_obs is not None
            and self._export(policy, example_obs, onnx, step)
        ):
            self._wrote(onnx)
            events.append(
                self._emit(
                    signals.export, ExportEvent(category=self.behavior, step=step, path=onnx)
                )
            )

        # An .onnx of this step from an earlier save stays part of the checkpoint if present.
        model = onnx if onnx.exists() else pt
        self._record(
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
        self._begin("final save", step)
        events = self._save(step, state, policy, example_obs, reward)
        latest = self._checkpoints[-1]
        final = latest
        exported = any(isinstance(e, ExportEvent) for e in events)
        if exported:
            try:
                self._writing(self.final_model_path)
                atomic_copy(Path(latest.file_path), self.final_model_path)
            except OSError:
                logger.exception(
                    "Could not copy the final model of %s to %s",
                    self.behavior,
                    self.final_model_path,
                )
            else:
                self._wrote(self.final_model_path)
                final = attrs.evolve(latest, file_path=str(self.final_model_path))
                events.append(
                    self._emit(
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
        self._writing(self.status.path)
        self.status.update(self.behavior, final=final)
        self._wrote(self.status.path)
        self.in_progress = None
        return events

    # -- internals -------------------------------------------------------------------------------

    def _emit(self, signal: EventSignal[P], payload: P) -> P:
        if self.bus is not None:
            try:
                self.bus.emit(signal, payload)
            except BusClosedError:  # announcing is secondary: the files are what must not be lost
                logger.warning("The bus is closed; %s was not emitted: %r", signal.name, payload)
        return payload

    def _export(self, policy: nn.Module, example_obs: Example, path: Path, step: int) -> bool:
        self._writing(path)
        try:
            with hierarchical_timer("export"):
                self._exporter.export(policy, example_obs, path)
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

    def _record(self, checkpoint: ModelCheckpoint) -> None:
        """Track ``checkpoint`` (durable by now), then delete the oldest beyond the limit.

        The status is written before deleting, and again after: a kill in between leaves
        entries whose files are gone (harmless), never files nobody tracks.
        """
        # A re-saved step's files were overwritten in place: forget the entry, keep the files.
        self._checkpoints = [c for c in self._checkpoints if c.steps != checkpoint.steps]
        self._checkpoints.append(checkpoint)
        self._writing(self.status.path)
        self.status.update(self.behavior, checkpoints=self._checkpoints)
        self._wrote(self.status.path)
        if not 0 < self.keep_checkpoints < len(self._checkpoints):
            return
        excess = len(self._checkpoints) - self.keep_checkpoints
        dropped, self._checkpoints = self._checkpoints[:excess], self._checkpoints[excess:]
        kept = {p for c in self._checkpoints for p in c.files}
        for old in dropped:
            for file in old.files:
                if file in kept or file == self.checkpoint_path:
                    continue
                try:
                    file.unlink(missing_ok=True)
                except OSError:  # e.g. open in a subscriber on Windows; rotation goes on
                    logger.warning("Could not delete old checkpoint file %s", file, exc_info=True)
        self.status.update(self.behavior, checkpoints=self._checkpoints)

    def _rebased(self, checkpoint: ModelCheckpoint) -> ModelCheckpoint:
        return attrs.evolve(
            checkpoint,
            file_path=str(self.folder / Path(checkpoint.file_path).name),
            auxillary_file_paths=tuple(
                str(self.folder / Path(p).name) for p in checkpoint.auxillary_file_paths
            ),
        )

    def _reconcile(self) -> None:
        tracked = [c for c in self._checkpoints if any(f.exists() for f in c.files)]
        steps = {c.steps for c in tracked}
        pattern = re.compile(rf"^{re.escape(self.behavior)}-(\d+)\.(pt|onnx)$")
        found: dict[int, dict[str, Path]] = {}
        for file in self.folder.iterdir():
            match = pattern.match(file.name)
            if match and int(match[1]) not in steps:
                found.setdefault(int(match[1]), {})[match[2]] = file
        for step in sorted(found):
            files = found[step]
            model = files.get("onnx") or files["pt"]
            tracked.append(
                ModelCheckpoint(
                    steps=step,
                    file_path=str(model),
                    creation_time=model.stat().st_mtime,
                    auxillary_file_paths=tuple(str(f) for f in files.values() if f != model),
                )
            )
        if tracked != self._checkpoints:
            self._checkpoints = tracked
            self.status.update(self.behavior, checkpoints=tracked)
