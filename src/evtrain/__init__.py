"""evtrain: train RL agents from YAML; every training event is a typed signal on a bus."""

from __future__ import annotations

from evtrain._version import __version__ as __version__
from evtrain.bus import ANY, Bus, CloseReport
from evtrain.bus.delivery import FailurePolicy
from evtrain.bus.filters import RankFilter, rank_zero_only
from evtrain.bus.inbox import Overflow
from evtrain.bus.reporter import StatsReporter
from evtrain.bus.subscription import SubscriberMetrics, SubscriptionHandle
from evtrain.bus.writers import StatsWriter
from evtrain.config.options import RunOptions
from evtrain.errors import (
    BusClosedError,
    BusTimeoutError,
    CheckpointError,
    ConfigError,
    EvtrainError,
    JournalFormatError,
    JournalInUseError,
    PermanentDeliveryError,
    PluginError,
    RunFolderError,
    SpaceMismatchError,
    SubscriberError,
)
from evtrain.events import signals
from evtrain.events.payloads import (
    ArtifactEvent,
    EvaluationEvent,
    ExportEvent,
    LessonChanged,
    PropertyEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsEvent,
    StopRequested,
    StopRun,
    SubscriberFailed,
    SubscriberStalled,
)
from evtrain.events.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary
from evtrain.ranks import get_rank
from evtrain.run.learn import LearnResult, learn
from evtrain.stopping import StopOnPlateau, StopOnReward

__all__ = [
    "ANY",
    "ArtifactEvent",
    "Bus",
    "BusClosedError",
    "BusTimeoutError",
    "CheckpointError",
    "CloseReport",
    "ConfigError",
    "EvaluationEvent",
    "EvtrainError",
    "ExportEvent",
    "FailurePolicy",
    "JournalFormatError",
    "JournalInUseError",
    "LearnResult",
    "LessonChanged",
    "Overflow",
    "PermanentDeliveryError",
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
    "StopOnPlateau",
    "StopOnReward",
    "StopRequested",
    "StopRun",
    "SubscriberError",
    "SubscriberFailed",
    "SubscriberMetrics",
    "SubscriberStalled",
    "SubscriptionHandle",
    "get_rank",
    "learn",
    "rank_zero_only",
    "signals",
]
