"""The best model of a behavior's evaluations: where its files are, and ``best.json``, the
record of which evaluation it is (read back by ``--resume``, so a resumed run replaces the
best only with a better one).

Layout (beside the latest, as ``evaluation.best_model`` keeps it)::

    results/<run_id>/<Behavior>-best.onnx       the policy of the best evaluation so far
    results/<run_id>/<Behavior>/best.pt         the trainer state of that step
    results/<run_id>/<Behavior>/best.json       {"step", "mean_return", "episodes", ...,
                                                 "best_by", "value"}

The three files are one unit, committed at once, so that they always describe the same step,
even when the process is killed (``kill -9``) between any two writes (:func:`save_best`): the
new unit is first written beside the old one under staged names (``best.json.next`` first,
then ``best.pt.next`` and ``<Behavior>-best.onnx.next``), then committed by renaming
``best.json.next`` over ``best.json``, then each staged file is renamed over its own.
:func:`recover_best`, called before each save and when a run starts, finishes what a killed save
left: a ``best.json.next`` still there means the unit was not committed, and the staged files
are removed (the old unit is untouched); staged files without it are renamed into place.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.atomic import atomic_write, fsync_folder, remove_stale_temps
from evtrain.evaluation.opponents import MEAN_RETURN
from evtrain.events import signals
from evtrain.events.payloads import ExportEvent, SaveEvent
from evtrain.run.checkpoints.checkpoint_file import save_checkpoint
from evtrain.trainers.finite import refuse_nonfinite_weights

if TYPE_CHECKING:
    from torch import nn

    from evtrain.export import Example
    from evtrain.run.checkpoints.checkpoint import CheckpointManager

logger = logging.getLogger("evtrain.run.checkpoints.checkpoint")


@attrs.frozen(kw_only=True)
class BestRecord:
    """Which evaluation the best model is: its step, mean return and episodes, and the stat
    it was chosen by with its value."""

    step: int
    mean_return: float
    episodes: int
    checkpoint: str
    """The ``best.pt`` of that step."""
    model: str | None
    """The ``<Behavior>-best.onnx`` of that step (``None``: its export failed)."""
    best_by: str = MEAN_RETURN
    """The stat the best model follows (``evaluation.best_by``)."""
    value: float = attrs.field(
        default=attrs.Factory(lambda self: self.mean_return, takes_self=True)
    )
    """Its value in that evaluation (the mean return, by default)."""

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
                # a record written before best_by followed the mean return
                best_by=str(data.get("best_by", MEAN_RETURN)),
                value=float(data.get("value", data["mean_return"])),
            )
            if record.best_by == MEAN_RETURN:  # one number, said twice: mean_return is it
                record = attrs.evolve(record, value=record.mean_return)
        except (OSError, ValueError, KeyError, TypeError) as error:
            logger.warning("Ignoring %s (%s): the best model starts afresh", path, error)
            return None
        return record if math.isfinite(record.value) else None


def best_model_path(manager: CheckpointManager) -> Path:
    """``results/<run_id>/<Behavior>-best.onnx``."""
    return manager.run_folder / f"{manager.behavior}-best.onnx"


def best_checkpoint_path(manager: CheckpointManager) -> Path:
    """``results/<run_id>/<Behavior>/best.pt``."""
    return manager.folder / "best.pt"


def best_record_path(manager: CheckpointManager) -> Path:
    """``results/<run_id>/<Behavior>/best.json``."""
    return manager.folder / "best.json"


def staged(path: Path) -> Path:
    """Where the next unit's file for ``path`` is written before it is committed."""
    return path.with_name(f"{path.name}.next")


def recover_best(manager: CheckpointManager) -> None:
    """Finish what a save killed before its end left of the best model's unit: roll it back
    (not committed: its staged files are removed) or forward (committed: its staged files are
    renamed into place).  Call it only while nothing writes the best model."""
    pt, onnx, record = (
        best_checkpoint_path(manager),
        best_model_path(manager),
        best_record_path(manager),
    )
    remove_stale_temps(manager.run_folder, staged(onnx).name)
    if staged(record).exists():  # not committed: the old unit is whole
        for path in (staged(record), staged(pt), staged(onnx)):
            path.unlink(missing_ok=True)
        return
    if staged(pt).exists() or staged(onnx).exists():
        _put_in_place(pt, onnx, record)


def _put_in_place(pt: Path, onnx: Path, record: Path) -> None:
    """Rename the committed unit's staged files over their own; a unit without a model
    removes the older one."""
    if staged(pt).exists():
        os.replace(staged(pt), pt)
    if staged(onnx).exists():
        os.replace(staged(onnx), onnx)
    else:
        best = BestRecord.read(record)
        if best is not None and best.model is None:
            onnx.unlink(missing_ok=True)
    for folder in dict.fromkeys((pt.parent, onnx.parent)):
        fsync_folder(folder)


def save_best(
    manager: CheckpointManager,
    record: BestRecord,
    state: dict[str, Any],
    policy: nn.Module,
    example_obs: Example,
) -> list[SaveEvent | ExportEvent]:
    """Write the best model of ``record``'s evaluation through ``manager`` (on the run's
    background saver, as its checkpoints are), as one unit (the module's docstring):
    ``best.json.next``, ``best.pt.next``, ``<Behavior>-best.onnx.next`` (an export failure is
    logged and the record says ``model: null``), the commit (``best.json``), the renames; then
    emit ``save`` and ``export`` (both ``best=True``).  Each file atomically; a second Ctrl-C
    stops it before its next file (:meth:`CheckpointManager.cancel`), and the next save, or
    run, rolls the unit back."""
    if not manager.is_writer:
        return []
    step, progress = record.step, manager.progress
    progress.begin("best model", step)
    refuse_nonfinite_weights(manager.behavior, step, state, policy)
    recover_best(manager)  # what an earlier save that failed midway left
    pt, onnx, path = (
        best_checkpoint_path(manager),
        best_model_path(manager),
        best_record_path(manager),
    )
    progress.writing(staged(path))
    record.write(staged(path))
    progress.writing(staged(pt))
    save_checkpoint(staged(pt), state)
    exported = manager.export(policy, example_obs, staged(onnx), step)
    if not exported:
        staged(onnx).unlink(missing_ok=True)
        attrs.evolve(record, model=None).write(staged(path))
    progress.writing(path)
    os.replace(staged(path), path)  # the commit
    _put_in_place(pt, onnx, path)
    for written in (pt, onnx) if exported else (pt,):
        progress.wrote(written)
    progress.wrote(path)
    saved = SaveEvent(
        category=manager.behavior, step=step, path=pt, reward=record.mean_return, best=True
    )
    events: list[SaveEvent | ExportEvent] = [manager.emit(signals.save, saved)]
    if exported:
        export = ExportEvent(category=manager.behavior, step=step, path=onnx, best=True)
        events.append(manager.emit(signals.export, export))
    progress.end()
    return events
