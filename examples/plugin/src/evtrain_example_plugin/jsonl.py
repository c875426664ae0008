"""A :class:`~evtrain.StatsWriter` that writes one JSON object per summary period.

Each ``write_stats`` call becomes one line of ``<run folder>/stats.jsonl``::

    {"category": "CartPole", "step": 1000, "values": {"Environment/Cumulative Reward":
     {"mean": 1.5, "std": 0.5, "num": 2, "sum": 3.0, "aggregated": 1.5}}}

and the hyperparameters a trainer reports at start become ``{"category", "hyperparameters"}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, ClassVar

from evtrain import RunOptions, StatsPropertyType, StatsSummary, StatsWriter


class JsonLinesWriter(StatsWriter):
    """Writes summaries to a JSON-lines file, one object per line.

    :param path: the file; its folder is created on the first write.
    :param append: keep what the file already holds (a resumed run) instead of replacing it.
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})
    """Rank 0 only: in a distributed run rank 0 reports the global figures, and one process
    must own the file."""

    def __init__(self, path: Path, *, append: bool = False) -> None:
        self.path = path
        self.append = append
        self._file: IO[str] | None = None
        self._closed = False

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        """Write one line for this summary period."""
        self._write(
            {
                "category": category,
                "step": step,
                "values": {
                    key: {
                        "mean": summary.mean,
                        "std": summary.std,
                        "num": summary.num,
                        "sum": summary.sum,
                        "aggregated": summary.aggregated_value,
                    }
                    for key, summary in values.items()
                },
            }
        )

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
        """Write the hyperparameters as one line; other property types are not recorded."""
        if property_type is StatsPropertyType.HYPERPARAMETERS:
            self._write({"category": category, "hyperparameters": value})

    def flush(self) -> None:
        """Push written lines to the OS; the bus calls this on ``Bus.flush`` and before close."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush and close the file (idempotent); later events are an error."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, record: Mapping[str, Any]) -> None:
        if self._closed:
            raise ValueError(f"{self.path} is closed; the writer received an event after close()")
        if self._file is None:
            # Opened on the first event rather than in __init__: the registration function
            # runs on every rank and in `evtrain plugins`-style inspection, and neither should
            # leave an empty file behind.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a" if self.append else "w", encoding="utf-8")
        # default=str: hyperparameters come from YAML and may hold paths or enums; a lossy
        # string beats losing the line.  The file object's own buffer batches the writes;
        # flush() (every Bus.flush) makes them visible.
        self._file.write(json.dumps(record, default=str) + "\n")


def get_jsonl_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``jsonl``.

    evtrain calls it once per run with the run's options and connects what it returns with
    ``Bus.add_writer``.
    """
    settings = run_options.checkpoint_settings
    return [JsonLinesWriter(settings.write_path / "stats.jsonl", append=settings.resume)]
