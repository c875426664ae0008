"""``StatsReporter``: what trainers call to record statistics; it emits ``stats`` on a bus.

Unlike ML-Agents' reporter (global class state, writers called under a global lock), each
reporter belongs to one bus and one category (behavior), holds only its own buffer, and
``write_stats`` hands a :class:`StatsEvent` to the bus and returns.  It is safe to call from
several producer threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from evtrain.bus import Bus
from evtrain.events import signals
from evtrain.events.payloads import PropertyEvent, StatsEvent
from evtrain.events.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary


class StatsReporter:
    """Collects values per key for one behavior and emits one ``StatsEvent`` per period."""

    def __init__(self, bus: Bus, category: str) -> None:
        self.bus = bus
        self.category = category
        """The behavior name; the sender of every event this reporter emits."""
        self._lock = threading.Lock()
        self._values: dict[str, list[float]] = {}
        self._methods: dict[str, StatsAggregationMethod] = {}

    def add_stat(
        self,
        key: str,
        value: float,
        aggregation: StatsAggregationMethod = StatsAggregationMethod.AVERAGE,
    ) -> None:
        """Record ``value`` for ``key`` in the current period (MOST_RECENT keeps only it)."""
        with self._lock:
            self._methods[key] = aggregation
            if aggregation is StatsAggregationMethod.MOST_RECENT:
                self._values[key] = [value]
            else:
                self._values.setdefault(key, []).append(value)

    def set_stat(self, key: str, value: float) -> None:
        """Replace ``key``'s values with ``value`` (aggregation MOST_RECENT)."""
        self.add_stat(key, value, StatsAggregationMethod.MOST_RECENT)

    def add_property(self, property_type: StatsPropertyType, value: Any) -> None:
        """Emit a ``PropertyEvent`` on ``hyperparameters`` (skipped when nobody listens)."""
        if self.bus.has_receivers(signals.hyperparameters, self.category):
            self.bus.emit(
                signals.hyperparameters,
                PropertyEvent(category=self.category, property_type=property_type, value=value),
            )

    def get_stats_summaries(self, key: str) -> StatsSummary:
        """The current period's summary of ``key`` (empty if nothing was recorded)."""
        with self._lock:
            values = self._values.get(key)
            if not values:
                return StatsSummary.empty()
            return StatsSummary(full_dist=values, aggregation_method=self._methods[key])

    def write_stats(
        self,
        step: int,
        *,
        merge: Callable[[Mapping[str, StatsSummary]], Mapping[str, StatsSummary]] | None = None,
    ) -> StatsEvent | None:
        """End the period: emit its ``StatsEvent`` labelled ``step`` and start a new one.

        :param merge: replaces the period's summaries before they are emitted; a distributed
            trainer passes :meth:`evtrain.distributed.World.merge_stats`, a collective, which
            therefore runs on every call, listened to or not.

        Returns the event, or ``None`` when nothing was recorded or nobody listens (without
        ``merge``, the payload is then not built at all).
        """
        with self._lock:
            values, self._values = self._values, {}
            methods = dict(self._methods)
        listened = self.bus.has_receivers(signals.stats, self.category)
        if merge is None and not (values and listened):
            return None
        summaries: Mapping[str, StatsSummary] = {
            key: StatsSummary(full_dist=dist, aggregation_method=methods[key])
            for key, dist in values.items()
        }
        if merge is not None:
            summaries = merge(summaries)
            if not (summaries and listened):
                return None
        event = StatsEvent(category=self.category, step=step, values=summaries)
        self.bus.emit(signals.stats, event)
        return event
