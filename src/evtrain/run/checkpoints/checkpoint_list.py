"""One behavior's tracked ``<Behavior>-<step>`` checkpoints: their names, the rolling window of
``keep_checkpoints``, and the list in training_status.json that says which files they are."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import attrs

from evtrain.run.checkpoints.save_progress import SaveProgress
from evtrain.run.checkpoints.training_status import ModelCheckpoint, TrainingStatus

logger = logging.getLogger("evtrain.run.checkpoints.checkpoint")


class CheckpointList:
    """The checkpoints of ``behavior`` in ``folder``, oldest first, as training_status.json
    records them.

    :param keep_checkpoints: checkpoints kept on disk; ``0`` keeps all.  ``keep`` (the
        ``checkpoint.pt`` of ``--resume``) is never deleted.
    :param progress: told of each write of the status file (a save in progress writes it).
    """

    def __init__(
        self,
        folder: Path,
        behavior: str,
        status: TrainingStatus,
        *,
        keep_checkpoints: int,
        keep: Path,
        progress: SaveProgress,
    ) -> None:
        self.folder = folder
        self.behavior = behavior
        self.status = status
        self.keep_checkpoints = keep_checkpoints
        self._keep = keep
        self._progress = progress
        # Paths are rebased onto this folder: the run folder may have moved, or the run been
        # resumed from another working directory, since they were recorded.
        self._checkpoints = [self._rebased(c) for c in status.checkpoints(behavior)]

    def names(self, step: int) -> tuple[Path, Path]:
        """The files of checkpoint ``step``: ``<Behavior>-<step>.pt`` and ``.onnx``."""
        name = f"{self.behavior}-{step}"
        return self.folder / f"{name}.pt", self.folder / f"{name}.onnx"

    @property
    def checkpoints(self) -> tuple[ModelCheckpoint, ...]:
        """The tracked checkpoints, oldest first."""
        return tuple(self._checkpoints)

    def record(self, checkpoint: ModelCheckpoint) -> None:
        """Track ``checkpoint`` (durable by now), then delete the oldest beyond the limit.

        The status is written before deleting, and again after: a kill in between leaves
        entries whose files are gone (harmless), never files nobody tracks.
        """
        # A re-saved step's files were overwritten in place: forget the entry, keep the files.
        self._checkpoints = [c for c in self._checkpoints if c.steps != checkpoint.steps]
        self._checkpoints.append(checkpoint)
        self._progress.writing(self.status.path)
        self.status.update(self.behavior, checkpoints=self._checkpoints)
        self._progress.wrote(self.status.path)
        if not 0 < self.keep_checkpoints < len(self._checkpoints):
            return
        excess = len(self._checkpoints) - self.keep_checkpoints
        dropped, self._checkpoints = self._checkpoints[:excess], self._checkpoints[excess:]
        kept = {p for c in self._checkpoints for p in c.files}
        for old in dropped:
            for file in old.files:
                if file in kept or file == self._keep:
                    continue
                try:
                    file.unlink(missing_ok=True)
                except OSError:  # e.g. open in a subscriber on Windows; rotation goes on
                    logger.warning("Could not delete old checkpoint file %s", file, exc_info=True)
        self.status.update(self.behavior, checkpoints=self._checkpoints)

    def reconcile(self) -> None:
        """Forget checkpoints whose files are all gone, and adopt ``<Behavior>-<step>`` files
        the list lacks (a process killed between writing a checkpoint and recording it)."""
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

    def _rebased(self, checkpoint: ModelCheckpoint) -> ModelCheckpoint:
        return attrs.evolve(
            checkpoint,
            file_path=str(self.folder / Path(checkpoint.file_path).name),
            auxillary_file_paths=tuple(
                str(self.folder / Path(p).name) for p in checkpoint.auxillary_file_paths
            ),
        )
