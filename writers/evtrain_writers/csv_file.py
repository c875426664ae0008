"""``CsvWriter``: one ``progress.csv`` per behavior, as Stable-Baselines3 writes it.

``writers: {csv: {}}`` (or ``--writer csv``) writes ``results/<run_id>/<Behavior>/progress.csv``:
a ``step`` column, then one column per stat key (sorted), holding the key's aggregated value
for the period (what TensorBoard plots).  A key that first appears later gets a column of its
own: the file is rewritten, atomically, with the wider header and empty cells in earlier rows.
A resumed run appends to the file its earlier run wrote.  Rows reach the disk at every flush.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from evtrain.atomic import atomic_write
from evtrain.bus.writers import StatsWriter
from evtrain.events.stats import StatsSummary
from evtrain_writers._options import BehaviorFileWriter, file_writers

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions

FILE_NAME = "progress.csv"
STEP = "step"


class _BehaviorFile:
    """One behavior's ``progress.csv``: its columns, and the open file rows are appended to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] = [STEP]
        self.stream: IO[str] | None = None
        if path.exists():  # a resumed run continues the file
            with path.open(newline="", encoding="utf-8") as existing:
                self.columns = next(csv.reader(existing), [STEP]) or [STEP]

    def append(self, row: Mapping[str, Any]) -> None:
        new = sorted(set(row) - set(self.columns))
        if new:
            self._widen(new)
        if self.stream is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            self.stream = self.path.open("a", newline="", encoding="utf-8")
            if fresh:
                csv.writer(self.stream).writerow(self.columns)
        csv.DictWriter(self.stream, self.columns).writerow(row)

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file with ``new`` columns added (SB3 does the same)."""
        self.close()
        rows: list[dict[str, str]] = []
        if self.path.exists():
            with self.path.open(newline="", encoding="utf-8") as existing:
                rows = list(csv.DictReader(existing))
        self.columns = [STEP, *sorted([*self.columns[1:], *new])]
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, self.columns)
        writer.writeheader()
        writer.writerows(rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda f: f.write(text.getvalue().encode("utf-8")))

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


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
        for file in self._files.values():
            file.flush()

    def close(self) -> None:
        for file in self._files.values():
            file.close()


def get_csv_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``csv``: a
    :class:`CsvWriter` when the run's ``writers:`` asks for ``csv``."""
    return file_writers(run_options, "csv", CsvWriter)
