"""Payloads carried by the signals: frozen, slotted, keyword-only attrs classes of plain values.

Subscribers run on other threads, later, so payloads never hold live objects (tensors, the
trainer, open files): numbers, strings, paths, mappings of those, and :class:`StatsSummary`.
Fields a producer may omit (rank, wall time) have defaults.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from evtrain.events.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary
from evtrain.ranks import get_rank


class RunStatus(enum.Enum):
    """How a run ended."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    STOPPED = "stopped"
    """A subscriber asked the run to stop (:meth:`evtrain.Bus.request_stop`) before
    ``max_steps``: it ended at an update boundary with its normal final save and export."""


@attrs.frozen(kw_only=True, slots=True)
class RunStarted:
    """A run begins: its id, resolved options (as plain data) and place in a distributed job."""

    run_id: str
    options: Mapping[str, Any] = attrs.field(factory=dict)
    world_size: int = 1
    rank: int = attrs.field(factory=get_rank)
    time: float = attrs.field(factory=time.time)


@attrs.frozen(kw_only=True, slots=True)
class PropertyEvent:
    """A property of a behavior, e.g. its hyperparameters as a nested mapping."""

    category: str
    property_type: StatsPropertyType
    value: Any


@attrs.frozen(kw_only=True, slots=True)
class StatsEvent:
    """One summary period of a behavior: ``values`` maps stat key to its summary."""

    category: str
    step: int
    values: Mapping[str, StatsSummary]
    rank: int = attrs.field(factory=get_rank)
    time: float = attrs.field(factory=time.time)


@attrs.frozen(kw_only=True, slots=True)
class LessonChanged:
    """Environment parameter ``parameter`` moved to lesson ``lesson_number`` (0-based) named
    ``lesson_name``, after a summary of behavior ``category`` (whose completion criteria were
    met) at its step ``step``.  Environments take the new value at their next episode."""

    category: str
    parameter: str
    lesson_number: int
    lesson_name: str
    step: int


@attrs.frozen(kw_only=True, slots=True)
class SaveEvent:
    """A checkpoint file is durable at ``path``."""

    category: str
    step: int
    path: Path
    reward: float | None = None
    best: bool = False
    """The checkpoint of the best evaluation so far (``evaluation.best_model``), kept beside
    the latest."""


@attrs.frozen(kw_only=True, slots=True)
class ExportEvent:
    """An exported model file (e.g. ONNX) is durable at ``path``."""

    category: str
    step: int
    path: Path
    format: str = "onnx"
    best: bool = False
    """The policy of the best evaluation so far (``evaluation.best_model``), kept beside the
    latest."""


EVALUATION_MEAN_RETURN = "Evaluation/Mean Return"
"""The stat key writers record an evaluation's episode returns under (mean, and histogram)."""
EVALUATION_MEAN_LENGTH = "Evaluation/Mean Episode Length"
"""The stat key of an evaluation's episode lengths."""
EVALUATION_PREFIX = "Evaluation/"
"""What an evaluation's stat keys start with (an opponent's: ``Evaluation/<label>/<stat>``)."""


def _floats(values: Iterable[float]) -> tuple[float, ...]:
    # A typed converter: with ``converter=tuple`` mypy sees the parameter as Iterable[_T_co]
    # and refuses every argument.
    return tuple(values)


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


def _stats(values: Mapping[str, float]) -> dict[str, float]:
    return {str(k): float(v) for k, v in values.items()}


@attrs.frozen(kw_only=True, slots=True)
class EvaluationEvent:
    """Behavior ``category``'s policy as of step ``step`` played ``len(returns)`` evaluation
    episodes (deterministic actions, the training run's normaliser of that step) on
    environments of its own: each episode's return and length, in episode order (against
    opponents: every opponent's, seat after seat, opponent after opponent)."""

    category: str
    step: int
    returns: tuple[float, ...] = attrs.field(converter=_floats)
    lengths: tuple[int, ...] = attrs.field(converter=_ints)
    opponent_stats: Mapping[str, float] = attrs.field(factory=dict, converter=_stats)
    """A PettingZoo behavior's results against each opponent, by ``<label>/<stat>``
    (``random/Win Rate``, ``random/Mean Return``, ...): recorded as ``Evaluation/<key>``."""
    deterministic: bool = True
    rank: int = attrs.field(factory=get_rank)
    time: float = attrs.field(factory=time.time)

    @property
    def mean_return(self) -> float:
        """The mean of :attr:`returns` (0.0 with no episode)."""
        return math.fsum(self.returns) / len(self.returns) if self.returns else 0.0

    def stats(self) -> dict[str, StatsSummary]:
        """What writers record of it, by stat key (:data:`EVALUATION_MEAN_RETURN`,
        :data:`EVALUATION_MEAN_LENGTH`, and ``Evaluation/<key>`` of each
        :attr:`opponent_stats`)."""
        stats = {
            EVALUATION_MEAN_RETURN: StatsSummary(
                full_dist=self.returns, aggregation_method=StatsAggregationMethod.HISTOGRAM
            ),
            EVALUATION_MEAN_LENGTH: StatsSummary(full_dist=self.lengths),
        }
        for key, value in self.opponent_stats.items():
            stats[EVALUATION_PREFIX + key] = StatsSummary(full_dist=(value,))
        return stats


@attrs.frozen(kw_only=True, slots=True)
class ArtifactEvent:
    """A file made during the run is durable at ``path``: e.g. the video of an evaluation
    episode (``kind`` ``"video"``, ``media_type`` ``"image/gif"`` or ``"video/mp4"``)."""

    category: str
    step: int
    path: Path
    kind: str
    media_type: str
    description: str = ""


@attrs.frozen(kw_only=True, slots=True)
class RunFinished:
    """A run ended with ``status`` after ``steps`` steps (summed over behaviors); ``reason``
    says why a subscriber stopped it (:attr:`RunStatus.STOPPED`)."""

    run_id: str
    status: RunStatus
    steps: int = 0
    reason: str | None = None
    time: float = attrs.field(factory=time.time)


@attrs.frozen(kw_only=True, slots=True)
class StopRequested:
    """A request that the run stop early (:meth:`evtrain.Bus.request_stop`): why, who asked
    and when.  Not a signal's payload: the runner reads it from the bus."""

    reason: str
    by: str = ""
    time: float = attrs.field(factory=time.time)


@attrs.frozen(slots=True)
class StopRun:
    """What a subscriber may return to stop the run: ``return StopRun("why")`` makes the bus
    call :meth:`evtrain.Bus.request_stop` with ``reason`` and the subscriber's name (sync,
    async and process-isolated subscribers alike).  Any other return value is ignored."""

    reason: str


@attrs.frozen(kw_only=True, slots=True)
class SubscriberFailed:
    """A subscriber raised; the bus isolated it.

    ``count`` is its total number of failures, ``disabled`` whether the bus stopped delivering
    to it because of this one.  A spool subscriber is never disabled: ``retry_in_s`` says when
    the same event is tried again (``None`` for other subscribers).
    """

    subscriber: str
    signal: str
    error: str
    error_type: str
    count: int
    disabled: bool
    retry_in_s: float | None = None


@attrs.frozen(kw_only=True, slots=True)
class SubscriberStalled:
    """A subscriber is hung: one of its calls has run longer than its ``stall_timeout``, or
    (``inbox_full``) ``emit`` waited ``block_timeout`` on its full ``block`` inbox.

    A long call is reported once, while it still runs; ``seconds`` is how long it had run.  For
    a ``spool`` subscriber (``spool``) later events go to its journal only until the call
    returns, then it catches up from disk.  A full inbox is reported once each time a wait runs
    out: that event and later ones are dropped (counted in ``Bus.metrics()``) until the
    subscriber takes from its inbox again; ``seconds`` is how long ``emit`` waited.
    """

    subscriber: str
    signal: str
    """The signal being handled (for ``inbox_full``: being emitted), or ``flush``/``close``
    for those hooks."""
    seconds: float
    stall_timeout: float
    """The timeout that ran out: ``stall_timeout``, or ``block_timeout`` for ``inbox_full``."""
    spool: bool
    inbox_full: bool = False
    """``emit`` gave up waiting on the subscriber's full ``block`` inbox (not a long call)."""
