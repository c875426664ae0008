"""evtrain: train RL agents from YAML; every training event is a typed signal on a bus.

``import evtrain`` loads no torch: the bus, its signals and payloads, the stats reporter and the
writers' base work in a process that never trains.  :func:`learn` and :class:`LearnResult` are
imported on first use (PEP 562), with the trainers and torch behind them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from evtrain.stopping import StopOnPlateau, StopOnReward

if TYPE_CHECKING:
    from evtrain.run.learn import LearnResult, learn

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

_LAZY = {"LearnResult": "evtrain.run.learn", "learn": "evtrain.run.learn"}
"""Names whose modules import torch, by module: imported when first asked for."""


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
