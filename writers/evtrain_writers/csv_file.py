"""``CsvWriter``: one ``progress.csv`` per behavior, as Stable-Baselines3 writes it.

``writers: {csv: {}}`` (or ``--writer csv``) writes ``results/<run_id>/<Behavior>/progress.csv``:
a ``step`` column, then one column per stat key (sorted), holding the key's aggregated value
for the period (what TensorBoard plots).  A key that first appears later gets a column of its
own: the file is rewritten, atomically, with the wider header and empty cells in earlier rows.
A resumed run appends to the file its earlier run wrote, first cutting the rows a killed run
wrote past its checkpoint (from the step of the resumed run's first row on) and a torn last row.
Each row is one write of a whole line (:mod:`evtrain_writers._lines`): a row is whole or absent,
also on a full disk; ``flush()`` makes the rows durable (``fsync``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtrain.atomic import atomic_write
from evtrain.bus.writers import StatsWriter
from evtrain.events.stats import StatsSummary
from evtrain_writers._lines import LineFile
from evtrain_writers._options import BehaviorFileWriter, file_writers

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions

FILE_NAME = "progress.csv"
STEP = "step"


class _BehaviorFile:
    """One behavior's ``progress.csv``: its columns, and the line file rows are appended to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = LineFile(path)
        self.columns: list[str] = [STEP]
        self.cut_from: int | None = None
        """The first step this process writes: rows of a crashed run from there on go."""
        lines = self.file.lines()  # a torn last row is cut here, before anything is appended
        if lines:  # a resumed run continues the file
            self.columns = next(csv.reader([lines[0].decode("utf-8")]), [STEP]) or [STEP]
        self.file.header = _line(self.columns)

    def append(self, row: Mapping[str, Any]) -> None:
        if self.cut_from is None:
            first = self.cut_from = int(row[STEP])
            self.file.cut(lambda line: _step(line) < first)
        new = sorted(set(row) - set(self.columns))
        if new:
            self._widen(new)
        text = io.StringIO(newline="")
        csv.DictWriter(text, self.columns).writerow(row)
        self.file.append(text.getvalue().encode("utf-8"))

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file with ``new`` columns added (SB3 does the same)."""
        lines = self.file.lines()
        self.file.close()
        rows = list(csv.DictReader(line.decode("utf-8") for line in lines))
        columns = [STEP, *sorted([*self.columns[1:], *new])]
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, columns)
        writer.writeheader()
        writer.writerows(rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda f: f.write(text.getvalue().encode("utf-8")))
        # Only once the wider file is in place: a write that failed (a full disk) is retried.
        self.columns = columns
        self.file.header = _line(columns)

    def sync(self) -> None:
        self.file.sync()

    def close(self) -> None:
        self.file.close()


def _line(cells: list[str]) -> bytes:
    text = io.StringIO(newline="")
    csv.writer(text).writerow(cells)
    return text.getvalue().encode("utf-8")


def _step(line: bytes) -> float:
    """The step of a row; the header (and anything unreadable) sorts first, so it stays."""
    try:
        return float(line.split(b",", 1)[0])
    except ValueError:
        return -math.inf


class CsvWriter(BehaviorFileWriter):
    """Appends one row per summary period to the behavior's ``progress.csv``."""

    def __init__(self, run_folder: str | Path, hidden_keys: list[str] | None = None) -> None:
        super().__init__(run_folder, hidden_keys)
        self._files: dict[str, _BehaviorFile] = {}

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        row: dict[str, Any] = {STEP: step}
        row.update((key, summary.aggregated_value) for key, summary in self.visible(values))
        if category not in self._files:
            self._files[category] = _BehaviorFile(self.run_folder / category / FILE_NAME)
        self._files[category].append(row)

    def flush(self) -> None:
        """Make every row written so far durable (one ``fsync`` per file written to)."""
        for file in self._files.values():
            file.sync()

    def close(self) -> None:
        for file in self._files.values():
            file.close()


def get_csv_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``csv``: a
    :class:`CsvWriter` when the run's ``writers:`` asks for ``csv``."""
    return file_writers(run_options, "csv", CsvWriter)
