"""One stat's curve read back from a behavior's folder of a run.

A run writes each behavior's summaries into ``<run>/<Behavior>/``: TensorBoard event files
always (the default writer), ``progress.csv`` and ``stats.jsonl`` when the ``csv`` and
``jsonl`` writers are on (docs/run-folder.md).  The curve is read from the first of them that
holds the stat, in that order.  TensorBoard's files are read by TensorBoard's own
``EventAccumulator``, so a resumed run's points are what TensorBoard shows: the points a
killed run wrote past its checkpoint are purged.  CSV and JSONL hold each step once already
(their writers cut such rows); a step found twice keeps its last value anyway.  Values that
are not finite numbers (an empty cell, ``null``, NaN) are skipped.

Damage is said, never read past in silence: an event file whose records fail their checksums
or stop mid-record (TensorBoard would show only the points before) gets a warning naming it,
and the stat is read from ``progress.csv`` or ``stats.jsonl`` instead when one holds it.  A
row of ``progress.csv`` or line of ``stats.jsonl`` that cannot be read (bytes that are not
UTF-8, a step that is not a whole number from 0 to :data:`MAX_STEP`, a cell over the csv
module's limit, JSON nested too deep) is skipped with one warning per file naming its first
such row; a torn last line of ``stats.jsonl`` (a run killed while writing) is skipped
without one.
"""

from __future__ import annotations

import csv
import json
import math
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import NDArray

from evtrain.checksums import masked_crc32c

TENSORBOARD_PREFIX = "events.out.tfevents"
CSV_FILE = "progress.csv"
JSONL_FILE = "stats.jsonl"

MAX_STEP = 2**53
"""The largest step read: steps are whole numbers, and a float holds every one up to here."""

Points = dict[int, float]
"""A stat's value at each step."""
_Reader = Callable[[Path, str], tuple[set[str], Points, str | None]]
"""A file's (or folder's) keys, the points of one of them, and what could not be read of it
(one line, naming the file), if anything."""


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
    warnings: tuple[str, ...] = ()
    """One line per damaged file: what could not be read, and what was read instead."""


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
    of ``folder`` that holds it, passing over damaged event files when another source holds
    it (see the module's docstring)."""
    keys: set[str] = set()
    warnings: list[str] = []
    event_files = _event_files(folder)
    damage = [
        (path, problem) for path in event_files if (problem := event_file_damage(path)) is not None
    ]
    readers: tuple[tuple[Path, bool, _Reader], ...] = (
        (folder, bool(event_files), _tensorboard),
        (folder / CSV_FILE, (folder / CSV_FILE).is_file(), _csv),
        (folder / JSONL_FILE, (folder / JSONL_FILE).is_file(), _jsonl),
    )
    fallback: Found | None = None
    for source, present, reader in readers:
        if not present:
            continue
        found, points, problem = reader(source, stat)
        keys |= found
        if problem is not None:
            warnings.append(problem)
        if not points:
            continue
        if source == folder and damage:
            fallback = Found(source=source, points=points, keys=frozenset())
            continue  # a source that is whole is preferred
        for path, why in damage:
            warnings.append(
                f"{path}: damaged TensorBoard event file ({why}); {stat!r} read from "
                f"{source} instead"
            )
        return Found(source=source, points=points, keys=frozenset(keys), warnings=tuple(warnings))
    if fallback is not None:
        for path, why in damage:
            warnings.append(
                f"{path}: damaged TensorBoard event file ({why}); no other file of "
                f"{folder} holds {stat!r}: the points TensorBoard reads before the damage "
                f"({len(fallback.points)}) are used"
            )
        return attrs.evolve(fallback, keys=frozenset(keys), warnings=tuple(warnings))
    for path, why in damage:
        warnings.append(f"{path}: damaged TensorBoard event file ({why})")
    return Found(source=None, points={}, keys=frozenset(keys), warnings=tuple(warnings))


def event_file_damage(path: Path) -> str | None:
    """What is wrong with the TFRecord framing of the event file ``path`` (a record whose
    length or data fails its masked CRC-32C, or the file ending inside a record), or
    ``None`` when every record is whole."""
    data = path.read_bytes()
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            return f"cut short inside a record header at byte {offset:,} of {len(data):,}"
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        if masked_crc32c(header) != crc:
            return f"a record's length fails its checksum at byte {offset:,} of {len(data):,}"
        end = offset + 12 + length + 4
        if end > len(data):
            return f"cut short inside a record at byte {offset:,} of {len(data):,}"
        (crc,) = struct.unpack("<I", data[end - 4 : end])
        if masked_crc32c(data[offset + 12 : end - 4]) != crc:
            return f"a record's data fails its checksum at byte {offset:,} of {len(data):,}"
        offset = end
    return None


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


def _event_files(folder: Path) -> list[Path]:
    return sorted(
        entry
        for entry in folder.iterdir()
        if entry.name.startswith(TENSORBOARD_PREFIX) and entry.is_file()
    )


def _finite(pairs: Iterable[tuple[int, float | None]]) -> Points:
    """The pairs with a finite value, the last value of a step kept."""
    return {
        int(step): float(value)
        for step, value in pairs
        if value is not None and math.isfinite(value)
    }


def _tensorboard(folder: Path, stat: str) -> tuple[set[str], Points, str | None]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # Every scalar kept (0: no sampling); one of the rest, which are not read here.
    guidance = {"scalars": 0, "histograms": 1, "tensors": 1, "images": 1, "audio": 1}
    accumulator = EventAccumulator(str(folder), size_guidance=guidance)
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    if stat not in tags:
        return tags, {}, None
    scalars = accumulator.Scalars(stat)
    return tags, _finite((event.step, event.value) for event in scalars), None


class _Skipped:
    """The rows of one file that could not be read: the first named, the others counted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[tuple[int, str]] = []

    def add(self, row: int, why: str) -> None:
        self.rows.append((row, why))

    def line(self) -> str | None:
        if not self.rows:
            return None
        row, why = min(self.rows)
        more = (
            f", and {len(self.rows) - 1} more rows that cannot be read"
            if len(self.rows) > 1
            else ""
        )
        return f"{self.path}: row {row}: {why}; skipped{more}"


def _lines(path: Path, skipped: _Skipped) -> Iterator[tuple[int, str]]:
    """Each line of ``path`` (numbered from 1) decoded as UTF-8; those that are not, skipped."""
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                skipped.add(number, f"not UTF-8 text ({error.reason} at byte {error.start})")


def _step(value: object) -> int | None:
    """``value`` as a step: a whole number from 0 to :data:`MAX_STEP`, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    if not (math.isfinite(number) and number.is_integer() and 0 <= number <= MAX_STEP):
        return None
    return int(number)


def _bad_step(value: object) -> str:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return f"step {shown} is not a whole number from 0 to {MAX_STEP:,}"


def _csv(path: Path, stat: str) -> tuple[set[str], Points, str | None]:
    skipped = _Skipped(path)
    header: list[str] | None = None
    keys: set[str] = set()
    pairs: list[tuple[int, float | None]] = []
    for number, line in _lines(path, skipped):
        if not line.strip():
            continue
        try:
            cells = next(csv.reader([line]))
        except csv.Error as error:  # a cell over csv.field_size_limit(), a stray quote
            skipped.add(number, f"not a CSV row ({error})")
            continue
        if header is None:
            header = cells
            keys = {key for key in header if key != "step"}
            continue
        row = dict(zip(header, cells, strict=False))
        step = _step(row.get("step"))
        if step is None:
            skipped.add(number, _bad_step(row.get("step")))
            continue
        pairs.append((step, _float(row.get(stat))))
    return keys, _finite(pairs), skipped.line()


def _jsonl(path: Path, stat: str) -> tuple[set[str], Points, str | None]:
    skipped = _Skipped(path)
    keys: set[str] = set()
    pairs: list[tuple[int, float | None]] = []
    lines = list(_lines(path, skipped))
    for index, (number, line) in enumerate(lines):
        try:
            record = json.loads(line)
        except RecursionError:
            skipped.add(number, "JSON nested too deep to be a summary")
            continue
        except ValueError as error:
            if index < len(lines) - 1:
                skipped.add(number, f"not JSON ({error})")
            continue  # the last line: torn by a run killed while writing
        stats = record.get("stats") if isinstance(record, dict) else None
        if not isinstance(stats, dict):
            continue  # a property line (hyperparameters)
        step = _step(record.get("step")) if isinstance(record.get("step"), int) else None
        if step is None:
            skipped.add(number, _bad_step(record.get("step")))
            continue
        keys.update(stats)
        summary = stats.get(stat)
        if isinstance(summary, dict):
            value = summary.get("value")
            pairs.append((step, float(value) if isinstance(value, int | float) else None))
    return keys, _finite(pairs), skipped.line()


def _float(cell: str | None) -> float | None:
    try:
        return float(cell) if cell else None
    except ValueError:
        return None
