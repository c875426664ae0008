"""ML-Agents' statistics vocabulary: aggregation methods, summaries, property types.

A :class:`StatsSummary` is everything recorded for one key during one summary period.  Its
``aggregated_value`` is what a scalar writer plots: the sum for ``SUM``, the last value for
``MOST_RECENT``, the mean otherwise.  For the values 0..4 that is 2.0 (AVERAGE), 4
(MOST_RECENT), 10 (SUM) and 2.0 (HISTOGRAM, which also keeps the distribution).
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

CUMULATIVE_REWARD = "Environment/Cumulative Reward"
"""The stat key of an episode's return (ML-Agents' name): trainers add one ``HISTOGRAM`` value
per finished episode; the console line, the progress bar and the runner read its mean."""


class StatsAggregationMethod(enum.Enum):
    """How the values recorded for a key during a summary period are reduced."""

    AVERAGE = 0
    """Averaged before reporting."""
    MOST_RECENT = 1
    """Only the most recent value is reported."""
    SUM = 2
    """Summed up."""
    HISTOGRAM = 3
    """Reported as the mean, and as a histogram of every value."""


class StatsPropertyType(enum.Enum):
    """Kinds of property a behavior reports once (ML-Agents' ``StatsPropertyType``)."""

    HYPERPARAMETERS = "hyperparameters"
    SELF_PLAY = "selfplay"


def _as_floats(values: Any) -> tuple[float, ...]:
    return tuple(map(float, values))


@attrs.frozen(kw_only=True, slots=True)
class StatsSummary:
    """The values one key received during one summary period, and how to aggregate them."""

    full_dist: tuple[float, ...] = attrs.field(converter=_as_floats)
    aggregation_method: StatsAggregationMethod = StatsAggregationMethod.AVERAGE

    @classmethod
    def empty(cls) -> StatsSummary:
        """A summary with no values (mean, std and sum are 0.0)."""
        return cls(full_dist=())

    @property
    def num(self) -> int:
        """How many values were recorded."""
        return len(self.full_dist)

    @property
    def sum(self) -> float:
        """Sum of the values."""
        return math.fsum(self.full_dist)

    @property
    def mean(self) -> float:
        """Arithmetic mean; 0.0 when empty."""
        n = len(self.full_dist)
        return self.sum / n if n else 0.0

    @property
    def std(self) -> float:
        """Population standard deviation (numpy's default ``ddof=0``); 0.0 when empty."""
        n = len(self.full_dist)
        if n == 0:
            return 0.0
        mean = self.mean
        return math.sqrt(math.fsum((x - mean) ** 2 for x in self.full_dist) / n)

    @property
    def aggregated_value(self) -> float:
        """The scalar a writer plots: sum for SUM, last value for MOST_RECENT, else the mean."""
        method = self.aggregation_method
        if method is StatsAggregationMethod.SUM:
            return self.sum
        if method is StatsAggregationMethod.MOST_RECENT:
            return self.full_dist[-1] if self.full_dist else 0.0
        return self.mean
