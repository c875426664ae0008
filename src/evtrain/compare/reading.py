"""One stat's curve read back from a behavior's folder of a run.

A run writes each behavior's summaries into ``<run>/<Behavior>/``: TensorBoard event files
always (the default writer), ``progress.csv`` and ``stats.jsonl`` when the ``csv`` and
``jsonl`` writers are on (docs/run-folder.md).  The curve is read from the first of them that
holds the stat, in that order.  TensorBoard's files are read by TensorBoard's own
``EventAccumulator``, so a resumed run's points are what TensorBoard shows: the points a
killed run wrote past its checkpoint are purged.  CSV and JSONL hold each step once already
(their writers cut such rows); a step found twice keeps its last value anyway.  Values that
are not finite numbers (an empty cell, ``null``, NaN) are skipped.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import NDArray

TENSORBOARD_PREFIX = "events.out.tfevents"
CSV_FILE = "progress.csv"
JSONL_FILE = "stats.jsonl"

Points = dict[int, float]
"""A stat's value at each step."""
_Reader = Callable[[Path, str], tuple[set[str], Points]]
"""A file's (or folder's) keys, and the points of one of them."""


@attrs.frozen(kw_only=True)
class Series:
    """One behavior's curve of one stat in one run."""

    run: str
    """The run's folder name (its run id)."""
    task: str
    """The behavior: the task its scores are stratified by."""
    source: Path
    """What it was read from: the behavior's folder (TensorBoard) or the CSV/JSONL file."""
    steps: NDArray[np.int64]
    """Increasing."""
    values: NDArray[np.float64]


@attrs.frozen(kw_only=True)
class Found:
    """What a behavior's folder holds: the stat's points if any file has it, and every key
    seen (to name them when the stat is missing)."""

    source: Path | None
    points: Points
    keys: frozenset[str]


def has_data(folder: Path) -> bool:
    """Whether ``folder`` holds summaries evtrain's writers write (a behavior's folder)."""
    if not folder.is_dir():
        return False
    return any(
        entry.name.startswith(TENSORBOARD_PREFIX) or entry.name in (CSV_FILE, JSONL_FILE)
        for entry in folder.iterdir()
    )


def read_stat(folder: Path, stat: str) -> Found:
    """The points of ``stat`` in the first of TensorBoard, ``progress.csv``, ``stats.jsonl``
    of ``folder`` that holds it."""
    keys: set[str] = set()
    readers: tuple[tuple[Path, bool, _Reader], ...] = (
        (folder, _has_event_files(folder), _tensorboard),
        (folder / CSV_FILE, (folder / CSV_FILE).is_file(), _csv),
        (folder / JSONL_FILE, (folder / JSONL_FILE).is_file(), _jsonl),
    )
    for source, present, reader in readers:
        if not present:
            continue
        found, points = reader(source, stat)
        keys |= found
        if points:
            return Found(source=source, points=points, keys=frozenset(keys))
    return Found(source=None, points={}, keys=frozenset(keys))


def series(run: str, task: str, found: Found) -> Series:
    """The points of ``found`` as a :class:`Series` in step order."""
    assert found.source is not None and found.points, "series of a stat that was not found"
    steps = sorted(found.points)
    return Series(
        run=run,
        task=task,
        source=found.source,
        steps=np.asarray(steps, dtype=np.int64),
        values=np.asarray([found.points[s] for s in steps], dtype=np.float64),
    )


def _has_event_files(folder: Path) -> bool:
    return any(entry.name.startswith(TENSORBOARD_PREFIX) for entry in folder.iterdir())


def _finite(pairs: Iterable[tuple[int, float | None]]) -> Points:
    """The pairs with a finite value, the last value of a step kept."""
    return {
        int(step): float(value)
        for step, value in pairs
        if value is not None and math.isfinite(value)
    }


def _tensorboard(folder: Path, stat: str) -> tuple[set[str], Points]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # Every scalar kept (0: no sampling); one of the rest, which are not read here.
    guidance = {"scalars": 0, "histograms": 1, "tensors": 1, "images": 1, "audio": 1}
    accumulator = EventAccumulator(str(folder), size_guidance=guidance)
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    if stat not in tags:
        return tags, {}
    return tags, _finite((event.step, event.value) for event in accumulator.Scalars(stat))


def _csv(path: Path, stat: str) -> tuple[set[str], Points]:
    with path.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    keys = {key for row in rows for key in row if key is not None and key != "step"}
    pairs = [(_float(row.get("step")), _float(row.get(stat))) for row in rows]
    return keys, _finite((int(step), value) for step, value in pairs if step is not None)


def _jsonl(path: Path, stat: str) -> tuple[set[str], Points]:
    keys: set[str] = set()
    pairs: list[tuple[int, float | None]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line of a run killed while writing
        stats = record.get("stats") if isinstance(record, dict) else None
        if not isinstance(stats, dict) or not isinstance(record.get("step"), int):
            continue  # a property line (hyperparameters)
        keys.update(stats)
        summary = stats.get(stat)
        if isinstance(summary, dict):
            value = summary.get("value")
            pairs.append((record["step"], float(value) if isinstance(value, int | float) else None))
    return keys, _finite(pairs)


def _float(cell: str | None) -> float | None:
    try:
        return float(cell) if cell else None
    except ValueError:
        return None
