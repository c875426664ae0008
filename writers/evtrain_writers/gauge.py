"""``GaugeWriter``: ML-Agents' timer tree and gauges, plus the bus's metrics, in ``timers.json``.

For every key of every ``write_stats`` call two gauges are updated, ``<category>.<key>.mean``
and ``<category>.<key>.sum`` (names sanitised: ``/`` becomes ``.``, spaces are removed), each
``{"value", "min", "max", "count"}`` like ML-Agents' ``GaugeNode``.  The run's hierarchical
timers (:mod:`evtrain.timers`) are the top level of the file, as in ML-Agents.  ``flush()`` and
``close()`` write the file atomically::

    {"name": "root", "total": s, "count": 1, "self": s, "children": {"train": {...}, ...},
     "gauges": {...}, "bus": {subscriber: Bus.metrics() entry}, "metadata": {...}}
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from evtrain.atomic import atomic_write
from evtrain.bus.writers import StatsWriter
from evtrain.events.stats import StatsSummary
from evtrain.timers import TimerStack, get_timer_stack

if TYPE_CHECKING:
    from evtrain.bus.writers import BusMetrics

TIMERS_FILE = "timers.json"


def sanitize_string(name: str) -> str:
    """A gauge name part: ``"Policy/Learning Rate"`` becomes ``"Policy.LearningRate"``."""
    return name.replace("/", ".").replace(" ", "")


class GaugeWriter(StatsWriter):
    """Keeps a gauge per stat (mean and sum) and writes them, with bus metrics, to timers.json.

    :param run_logs_dir: folder of ``timers.json`` (created when first written).
    :param timers: the timer tree to write; by default the current run's (``evtrain learn``
        starts a new one before it creates the writers).
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})

    def __init__(
        self, run_logs_dir: str | os.PathLike[str], timers: TimerStack | None = None
    ) -> None:
        self.timers = get_timer_stack() if timers is None else timers
        """The run's timers, written as the top of the file."""
        self.path = Path(run_logs_dir) / TIMERS_FILE
        """Where ``timers.json`` is written."""
        self.gauges: dict[str, dict[str, float]] = {}
        """By gauge name: ``{"value", "min", "max", "count"}``."""
        self._bus: BusMetrics | None = None
        self._start_time = time.time()
        self._closed = False

    def on_connect(self, bus: BusMetrics) -> None:
        """Keep ``bus`` to record its metrics in the file."""
        self._bus = bus

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        """Update the ``.mean`` and ``.sum`` gauges of every key."""
        for key, summary in values.items():
            base = f"{category}.{sanitize_string(key)}"
            self._set_gauge(f"{base}.mean", summary.mean)
            self._set_gauge(f"{base}.sum", summary.sum)

    def _set_gauge(self, name: str, value: float) -> None:
        gauge = self.gauges.get(name)
        if gauge is None:
            self.gauges[name] = {"value": value, "min": value, "max": value, "count": 1}
        else:
            gauge["value"] = value
            gauge["min"] = min(gauge["min"], value)
            gauge["max"] = max(gauge["max"], value)
            gauge["count"] += 1

    def as_dict(self) -> dict[str, Any]:
        """What ``timers.json`` holds now."""
        bus = self._bus
        return {
            **self.timers.tree(),
            "gauges": {name: dict(gauge) for name, gauge in sorted(self.gauges.items())},
            "bus": {} if bus is None else {n: m.as_dict() for n, m in bus.metrics().items()},
            "metadata": self._metadata(),
        }

    def _metadata(self) -> dict[str, str]:
        metadata = {
            "timer_format_version": "0.1.0",
            "start_time_seconds": str(int(self._start_time)),
            "end_time_seconds": str(int(time.time())),
            "python_version": platform.python_version(),
            "command_line_arguments": " ".join(sys.argv),
        }
        # Versions of what this process runs, without importing anything just to ask.
        for label, module_name in (("evtrain_version", "evtrain"), ("torch_version", "torch")):
            version = getattr(sys.modules.get(module_name), "__version__", None)
            if version is not None:
                metadata[label] = str(version)
        return metadata

    def flush(self) -> None:
        """Write ``timers.json`` with :func:`evtrain.atomic.atomic_write` (its mode follows the
        umask, like every file evtrain writes)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.as_dict(), indent=4)
        atomic_write(self.path, lambda out: out.write(text.encode("utf-8")))

    def close(self) -> None:
        """Write ``timers.json`` a last time.  Idempotent."""
        if not self._closed:
            self._closed = True
            self.flush()
