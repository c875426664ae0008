"""``JsonlWriter``: every summary period and property as one JSON line.

``writers: {jsonl: {}}`` (or ``--writer jsonl``) appends to
``results/<run_id>/<Behavior>/stats.jsonl``, one object a line::

    {"step": 5000, "time": 1733221234.5, "stats": {"Environment/Cumulative Reward":
     {"value": 21.5, "mean": 21.5, "std": 3.2, "num": 12, "sum": 258.0}, ...}}
    {"property": "hyperparameters", "value": {...}}

``value`` is the aggregated value a scalar writer plots; a ``HISTOGRAM`` key also carries
``"values"``, every value of the period.  Numbers that JSON cannot hold (NaN, infinities) are
written as ``null``.  A resumed run appends, first cutting the periods a killed run wrote past
its checkpoint (from the step of the resumed run's first period on) and a torn last line.  Each
line is one write of a whole line (:mod:`evtrain_writers._lines`): whole or absent, also on a
full disk; ``flush()`` makes the lines durable (``fsync``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtrain.bus.writers import StatsWriter
from evtrain.events.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary
from evtrain_writers._lines import LineFile
from evtrain_writers._options import BehaviorFileWriter, file_writers

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions

FILE_NAME = "stats.jsonl"


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def summary_record(summary: StatsSummary) -> dict[str, Any]:
    """A summary as plain JSON data."""
    record: dict[str, Any] = {
        "value": _number(summary.aggregated_value),
        "mean": _number(summary.mean),
        "std": _number(summary.std),
        "num": summary.num,
        "sum": _number(summary.sum),
    }
    if summary.aggregation_method is StatsAggregationMethod.HISTOGRAM:
        record["values"] = [_number(v) for v in summary.full_dist]
    return record


class JsonlWriter(BehaviorFileWriter):
    """Appends each period and property of a behavior to its ``stats.jsonl``."""

    def __init__(self, run_folder: str | Path, hidden_keys: list[str] | None = None) -> None:
        super().__init__(run_folder, hidden_keys)
        self._files: dict[str, LineFile] = {}
        self._cut: set[str] = set()
        """Categories whose file was cut back to this process's first period."""

    def _file(self, category: str) -> LineFile:
        file = self._files.get(category)
        if file is None:
            file = self._files[category] = LineFile(self.run_folder / category / FILE_NAME)
            file.lines()  # a torn last line is cut here, before anything is appended
        return file

    def _write(self, category: str, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, allow_nan=False, default=str) + "\n"
        self._file(category).append(line.encode("utf-8"))

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        if category not in self._cut:
            self._file(category).cut(lambda line: _step(line) < step)
            self._cut.add(category)
        stats = {key: summary_record(summary) for key, summary in self.visible(values)}
        self._write(category, {"step": step, "time": time.time(), "stats": stats})

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
        self._write(category, {"property": property_type.value, "value": value})

    def flush(self) -> None:
        """Make every line written so far durable (one ``fsync`` per file written to)."""
        for file in self._files.values():
            file.sync()

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        self._files.clear()


def _step(line: bytes) -> float:
    """A period's step; other lines (properties) sort first, so they stay."""
    try:
        step = json.loads(line).get("step")
    except ValueError:
        return -math.inf
    return float(step) if isinstance(step, int | float) else -math.inf


def get_jsonl_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``jsonl``: a
    :class:`JsonlWriter` when the run's ``writers:`` asks for ``jsonl``."""
    return file_writers(run_options, "jsonl", JsonlWriter)
