"""evtrain: train RL agents from YAML; every training event is a typed signal on a bus."""

from __future__ import annotations

from evtrain import signals
from evtrain.bus import ANY, Bus, CloseReport
from evtrain.errors import (
    BusClosedError,
    BusTimeoutError,
    ConfigError,
    EvtrainError,
    PluginError,
    RunFolderError,
    SpaceMismatchError,
    SubscriberError,
)
from evtrain.filters import RankFilter, get_rank, rank_zero_only
from evtrain.inbox import Overflow
from evtrain.isolation import FailurePolicy
from evtrain.payloads import (
    ExportEvent,
    PropertyEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsEvent,
    SubscriberFailed,
)
from evtrain.reporter import StatsReporter
from evtrain.run.learn import LearnResult, learn
from evtrain.settings import RunOptions
from evtrain.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary, StatsWriter
from evtrain.subscription import SubscriberMetrics, SubscriptionHandle

__version__ = "0.1.0"

__all__ = [
    "ANY",
    "Bus",
    "BusClosedError",
    "BusTimeoutError",
    "CloseReport",
    "ConfigError",
    "EvtrainError",
    "ExportEvent",
    "FailurePolicy",
    "LearnResult",
    "Overflow",
    "PluginError",
    "PropertyEvent",
    "RankFilter",
    "RunFinished",
    "RunFolderError",
    "RunOptions",
    "RunStarted",
    "RunStatus",
    "SaveEvent",
    "SpaceMismatchError",
    "StatsAggregationMethod",
    "StatsEvent",
    "StatsPropertyType",
    "StatsReporter",
    "StatsSummary",
    "StatsWriter",
    "SubscriberError",
    "SubscriberFailed",
    "SubscriberMetrics",
    "SubscriptionHandle",
    "get_rank",
    "learn",
    "rank_zero_only",
    "signals",
]
