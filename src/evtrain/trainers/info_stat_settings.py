"""``info_stats``: keys of the environment's ``info`` that become statistics of a behavior
(like Stable-Baselines3's ``Monitor(info_keywords=...)``, or what ML-Agents'
``StatsSideChannel`` carries from Unity).  Declared and checked here; read from every vector
step by :mod:`evtrain.trainers.info_stats`.

In YAML each key maps to an aggregation, or to the full form::

    info_stats:
      is_success: {aggregation: average, at: episode_end, stat: "Environment/Success Rate"}
      x_position: most_recent
"""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import validators as v

from evtrain.events.stats import StatsAggregationMethod

Aggregation = Literal["average", "most_recent", "sum", "histogram"]
"""How a summary period's values of an info key are reduced (ML-Agents' names, lower case)."""

AGGREGATIONS: dict[str, StatsAggregationMethod] = {
    "average": StatsAggregationMethod.AVERAGE,
    "most_recent": StatsAggregationMethod.MOST_RECENT,
    "sum": StatsAggregationMethod.SUM,
    "histogram": StatsAggregationMethod.HISTOGRAM,
}

STAT_PREFIX = "Environment/"
"""An info key's stat is ``Environment/<key>`` unless ``stat`` names another: beside the
environment's other statistics (``Environment/Cumulative Reward``)."""


@attrs.define(kw_only=True)
class InfoStat:
    """One info key's statistic."""

    aggregation: Aggregation = attrs.field(default="average", validator=v.in_(tuple(AGGREGATIONS)))
    """How the period's values are reduced: ``average``, ``most_recent``, ``sum``, or
    ``histogram`` (the mean, and the distribution for writers that draw one)."""
    stat: str | None = attrs.field(default=None, validator=v.optional(v.instance_of(str)))
    """The stat key; ``None``: ``Environment/<info key>``."""
    at: Literal["step", "episode_end"] = attrs.field(
        default="step", validator=v.in_(("step", "episode_end"))
    )
    """Which steps' infos are read: ``step``, every step's (of a real transition); or
    ``episode_end``, only the last step's of each episode (a success flag that an environment
    reports on every step, read as a success rate per episode)."""

    def stat_key(self, key: str) -> str:
        """The stat that info key ``key`` is recorded under."""
        return self.stat if self.stat is not None else STAT_PREFIX + key

    @property
    def method(self) -> StatsAggregationMethod:
        """:attr:`aggregation` as the reporter's enum."""
        return AGGREGATIONS[self.aggregation]
