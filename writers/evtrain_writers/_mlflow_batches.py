"""What the MLflow writer sends in its ``log_batch`` requests: MLflow's size limits, a period's
metrics, timestamps in milliseconds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from evtrain.events.stats import StatsAggregationMethod, StatsSummary

T = TypeVar("T")

# MLflow's limits (mlflow.utils.validation), for servers of any version.
MAX_PARAM_VALUE = 6000
MAX_KEY = 250
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def ms(unix_time: float) -> int:
    return int(unix_time * 1000)


def metric_values(name: str, summary: StatsSummary) -> Iterator[tuple[str, float]]:
    """The MLflow metrics of one stat key's summary: ``name`` holds the aggregated value; a
    ``HISTOGRAM`` key adds ``name/std``, and ``name/min``, ``name/max`` when it has values."""
    yield name, summary.aggregated_value
    if summary.aggregation_method is StatsAggregationMethod.HISTOGRAM:
        yield f"{name}/std", summary.std
        if summary.full_dist:
            yield f"{name}/min", min(summary.full_dist)
            yield f"{name}/max", max(summary.full_dist)
