"""``run_logs/training_status.json``: each behavior's checkpoints and final checkpoint."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import torch

from evtrain.atomic import StrPath, atomic_write

logger = logging.getLogger("evtrain.run.checkpoints.checkpoint")


# -- training_status.json ------------------------------------------------------------------------


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, or ``None`` for no value, NaN or an infinity (JSON has neither)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _paths(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(p) for p in paths)


@attrs.frozen(kw_only=True)
class ModelCheckpoint:
    """One checkpoint as training_status.json lists it (ML-Agents' fields and spelling).

    ``file_path`` is the model (``<Behavior>-<step>.onnx``, or the ``.pt`` when the export
    failed); ``auxillary_file_paths`` are the checkpoint's other files (the ``.pt``).
    """

    steps: int
    file_path: str
    reward: float | None = attrs.field(default=None, converter=finite_or_none)
    creation_time: float = attrs.field(factory=time.time)
    auxillary_file_paths: tuple[str, ...] = attrs.field(default=(), converter=_paths)

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file of the checkpoint."""
        return tuple(Path(p) for p in (self.file_path, *self.auxillary_file_paths))

    def as_json(self) -> dict[str, Any]:
        """The checkpoint as training_status.json holds it."""
        return {**attrs.asdict(self), "auxillary_file_paths": list(self.auxillary_file_paths)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelCheckpoint:
        """Read :meth:`as_json`'s output (ML-Agents' too: only ``steps`` and ``file_path``
        are required)."""
        return cls(
            steps=int(data["steps"]),
            file_path=str(data["file_path"]),
            reward=data.get("reward"),
            creation_time=float(data.get("creation_time", 0.0)),
            auxillary_file_paths=tuple(str(p) for p in data.get("auxillary_file_paths", ())),
        )


def current_metadata() -> dict[str, str]:
    """The versions training_status.json records."""
    from evtrain._version import __version__

    return {"evtrain_version": __version__, "torch_version": torch.__version__}


class TrainingStatus:
    """``run_logs/training_status.json``: per behavior its ``checkpoints`` and
    ``final_checkpoint``, plus ``metadata`` (evtrain and torch versions).

    One object per run, shared by the behaviors' managers; thread-safe.  Keys it does not
    manage (ML-Agents' ``elo``, ``lesson_num``) are kept as they were read.
    """

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        self.metadata: dict[str, str] = current_metadata()
        """What the next write records: the running versions, whatever was read."""
        self._behaviors: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()

    @classmethod
    def load(cls, path: StrPath) -> TrainingStatus:
        """Read the file (``--resume``).  A missing file gives an empty status, with a warning;
        versions that differ from the running ones are logged as warnings.

        :raises ValueError: the file is not JSON, or has no ``metadata`` (not evtrain's).
        """
        status = cls(path)
        if not status.path.exists():
            logger.warning(
                "Training status file %s not found; checkpoints written before are not tracked "
                "and will not be rotated.",
                status.path,
            )
            return status
        try:
            data = json.loads(status.path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{status.path} is not valid JSON ({error}); remove it") from error
        metadata = data.pop("metadata", None) if isinstance(data, dict) else None
        if not isinstance(metadata, dict):
            raise ValueError(
                f"{status.path} has no metadata: it was not written by evtrain; resume a run "
                "evtrain wrote, or start a new one"
            )
        for key, running in status.metadata.items():
            if metadata.get(key) != running:
                logger.warning(
                    "%s was written with %s %s, this is %s; resuming anyway.",
                    status.path,
                    key,
                    metadata.get(key),
                    running,
                )
        status._behaviors = {name: dict(entry) for name, entry in data.items()}
        return status

    def checkpoints(self, behavior: str) -> list[ModelCheckpoint]:
        """The behavior's checkpoints, oldest first."""
        with self._lock:
            entries = self._behaviors.get(behavior, {}).get("checkpoints", [])
            return [ModelCheckpoint.from_json(e) for e in entries]

    def final_checkpoint(self, behavior: str) -> ModelCheckpoint | None:
        """The behavior's last final save, if any."""
        with self._lock:
            entry = self._behaviors.get(behavior, {}).get("final_checkpoint")
            return None if entry is None else ModelCheckpoint.from_json(entry)

    def update(
        self,
        behavior: str,
        *,
        checkpoints: list[ModelCheckpoint] | None = None,
        final: ModelCheckpoint | None = None,
    ) -> None:
        """Replace the behavior's checkpoint list and/or final checkpoint, and write the file."""
        if behavior == "metadata":
            raise ValueError("a behavior cannot be named 'metadata' (training_status.json key)")
        with self._lock:
            entry = self._behaviors.setdefault(behavior, {})
            if checkpoints is not None:
                entry["checkpoints"] = [c.as_json() for c in checkpoints]
            if final is not None:
                entry["final_checkpoint"] = final.as_json()
            self.write()

    def lesson_number(self, parameter: str) -> int | None:
        """The lesson environment parameter ``parameter`` was in at the last write (ML-Agents'
        ``{"<parameter>": {"lesson_num": N}}``), if recorded."""
        with self._lock:
            number = self._behaviors.get(parameter, {}).get("lesson_num")
            return number if isinstance(number, int) and not isinstance(number, bool) else None

    def set_lesson_number(self, parameter: str, number: int) -> None:
        """Record ``parameter``'s lesson for the next write: the file keeps, with each
        checkpoint, the lesson the run was in when it was taken (as ML-Agents saves it with
        its models)."""
        with self._lock:
            self._behaviors.setdefault(parameter, {})["lesson_num"] = number

    def as_dict(self) -> dict[str, Any]:
        """The JSON document."""
        with self._lock:
            return {**json.loads(json.dumps(self._behaviors)), "metadata": dict(self.metadata)}

    def write(self) -> None:
        """Write the file atomically (creating ``run_logs/``)."""
        with self._lock:
            text = json.dumps(self.as_dict(), indent=4, allow_nan=False) + "\n"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, lambda file: file.write(text.encode("utf-8")))


# -- the manager ---------------------------------------------------------------------------------
