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
from typing import Any

import attrs

from evtrain.atomic import atomic_write

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
