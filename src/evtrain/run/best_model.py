"""The best model of a behavior's evaluations: where its files are, and ``best.json``, the
record of which evaluation it is (read back by ``--resume``, so a resumed run replaces the
best only with a better one).

Layout (beside the latest, as ``evaluation.best_model`` keeps it)::

    results/<run_id>/<Behavior>-best.onnx       the policy of the best evaluation so far
    results/<run_id>/<Behavior>/best.pt         the trainer state of that step
    results/<run_id>/<Behavior>/best.json       {"step", "mean_return", "episodes", ...}

Each file is written atomically, ``best.json`` last: a process killed in between leaves files
of a better model than the record says, never a torn one.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.atomic import atomic_write
from evtrain.events import signals
from evtrain.events.payloads import ExportEvent, SaveEvent
from evtrain.run.checkpoint_file import save_checkpoint
from evtrain.trainers.finite import refuse_nonfinite_weights

if TYPE_CHECKING:
    from torch import nn

    from evtrain.export import Example
    from evtrain.run.checkpoint import CheckpointManager

logger = logging.getLogger("evtrain.run.checkpoint")


@attrs.frozen(kw_only=True)
class BestRecord:
    """Which evaluation the best model is: its step, mean return and episodes."""

    step: int
    mean_return: float
    episodes: int
    checkpoint: str
    """The ``best.pt`` of that step."""
    model: str | None
    """The ``<Behavior>-best.onnx`` of that step (``None``: its export failed)."""

    def write(self, path: Path) -> None:
        """Write the record to ``path`` atomically."""
        text = json.dumps(attrs.asdict(self), indent=2) + "\n"
        atomic_write(path, lambda f: f.write(text.encode("utf-8")))

    @classmethod
    def read(cls, path: Path) -> BestRecord | None:
        """The record at ``path``; ``None`` when there is none, or (logged) when it cannot be
        read, so a resumed run starts a new best instead of failing."""
        if not path.exists():
            return None
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            record = cls(
                step=int(data["step"]),
                mean_return=float(data["mean_return"]),
                episodes=int(data["episodes"]),
                checkpoint=str(data["checkpoint"]),
                model=None if data.get("model") is None else str(data["model"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            logger.warning("Ignoring %s (%s): the best model starts afresh", path, error)
            return None
        return record if math.isfinite(record.mean_return) else None


def best_model_path(manager: CheckpointManager) -> Path:
    """``results/<run_id>/<Behavior>-best.onnx``."""
    return manager.run_folder / f"{manager.behavior}-best.onnx"


def best_checkpoint_path(manager: CheckpointManager) -> Path:
    """``results/<run_id>/<Behavior>/best.pt``."""
    return manager.folder / "best.pt"


def best_record_path(manager: CheckpointManager) -> Path:
    """``results/<run_id>/<Behavior>/best.json``."""
    return manager.folder / "best.json"


def save_best(
    manager: CheckpointManager,
    record: BestRecord,
    state: dict[str, Any],
    policy: nn.Module,
    example_obs: Example,
) -> list[SaveEvent | ExportEvent]:
    """Write the best model of ``record``'s evaluation through ``manager`` (on the run's
    background saver, as its checkpoints are): ``best.pt`` → emit ``save``,
    ``<Behavior>-best.onnx`` → emit ``export`` (both ``best=True``; an export failure is logged
    and the record says ``model: null``), then ``best.json``.  Each file atomically; a second
    Ctrl-C stops it before its next file (:meth:`CheckpointManager.cancel`)."""
    if not manager.is_writer:
        return []
    step, progress = record.step, manager.progress
    progress.begin("best model", step)
    refuse_nonfinite_weights(manager.behavior, step, state, policy)
    pt, onnx = best_checkpoint_path(manager), best_model_path(manager)
    progress.writing(pt)
    save_checkpoint(pt, state)
    progress.wrote(pt)
    saved = SaveEvent(
        category=manager.behavior, step=step, path=pt, reward=record.mean_return, best=True
    )
    events: list[SaveEvent | ExportEvent] = [manager.emit(signals.save, saved)]
    exported = manager.export(policy, example_obs, onnx, step)
    if exported:
        progress.wrote(onnx)
        export = ExportEvent(category=manager.behavior, step=step, path=onnx, best=True)
        events.append(manager.emit(signals.export, export))
    path = best_record_path(manager)
    progress.writing(path)
    attrs.evolve(record, model=str(onnx) if exported else None).write(path)
    progress.wrote(path)
    progress.end()
    return events
