"""Writers: :class:`StatsWriter`, ML-Agents' sink interface grown to a run's whole lifecycle, and
the adapter that makes one a single subscriber of every signal it handles.

ML-Agents' writers see statistics and properties only.  A tracker (MLflow, wandb) also needs the
run's start and end (to open the tracker run and set its status) and its saves and exports (to
log the artifacts): :class:`StatsWriter` has a hook for each, a no-op by default, and
``Bus.add_writer`` delivers all of them through one inbox, in emission order."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from evtrain.bus.subscription import SubscriberMetrics
from evtrain.events.payloads import (
    ArtifactEvent,
    EvaluationEvent,
    ExportEvent,
    PropertyEvent,
    RunFinished,
    RunStarted,
    SaveEvent,
    StatsEvent,
)
from evtrain.events.stats import StatsPropertyType, StatsSummary


class BusMetrics(Protocol):
    """What a writer may ask of the bus it is connected to (``Bus`` provides it)."""

    def metrics(self) -> dict[str, SubscriberMetrics]:
        """Per subscriber (by name): delivered, dropped, failed, inbox high-water, latency."""
        ...


class StatsWriter(abc.ABC):
    """A sink for statistics, connected to a bus with :meth:`evtrain.Bus.add_writer`.

    The bus calls one writer from one thread at a time, in emission order, so writers need no
    locks of their own.  An exception escaping any method is isolated by the bus.
    """

    ranks: ClassVar[frozenset[int] | None] = None
    """Ranks this writer runs on by default; ``None`` means every rank.  File writers use
    ``frozenset({0})`` so a distributed run writes each file once."""

    overflow: ClassVar[str | None] = None
    """The writer's default overflow policy on the bus (an
    :class:`~evtrain.bus.inbox.Overflow` value); ``None`` takes the bus's.  Writers to a remote
    tracker use ``"spool"``.  ``bus.subscribers`` in the options still wins."""

    @abc.abstractmethod
    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        """Record one summary period of ``category`` labelled with ``step``."""

    def write_stats_event(self, event: StatsEvent) -> None:
        """Record one summary period: :meth:`write_stats` of its category, values and step.
        A writer that needs the event's own time (``event.time``, when the period was
        summarised, also when it is delivered later from a journal) overrides this."""
        self.write_stats(event.category, event.values, event.step)

    def on_evaluation(self, event: EvaluationEvent) -> None:
        """An evaluation's episodes: by default recorded as the stats of its step
        (``Evaluation/Mean Return``, ``Evaluation/Mean Episode Length``) through
        :meth:`write_stats_event`, so every writer shows them like any stats."""
        stats = StatsEvent(
            category=event.category,
            step=event.step,
            values=event.stats(),
            rank=event.rank,
            time=event.time,
        )
        self.write_stats_event(stats)

    def on_artifact(self, event: ArtifactEvent) -> None:  # noqa: B027 - optional hook, a no-op by default
        """A file made during the run (an evaluation video) is durable at ``event.path``."""

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Record a property (e.g. hyperparameters).  Writers need not support every type."""

    def on_run_started(self, event: RunStarted) -> None:  # noqa: B027 - optional hook, a no-op by default
        """The run begins (before any statistics): trackers open or resume their run here."""

    def on_save(self, event: SaveEvent) -> None:  # noqa: B027 - optional hook, a no-op by default
        """A checkpoint file is durable at ``event.path``."""

    def on_export(self, event: ExportEvent) -> None:  # noqa: B027 - optional hook, a no-op by default
        """An exported model (ONNX) is durable at ``event.path``."""

    def on_run_finished(self, event: RunFinished) -> None:  # noqa: B027 - optional hook, a no-op by default
        """The run ended with ``event.status`` (completed, interrupted, failed); its last
        statistics were delivered before this."""

    def on_connect(self, bus: BusMetrics) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called once by ``Bus.add_writer`` before any event; writers that report bus state
        (the gauge writer records ``bus.metrics()``) keep the reference."""

    def flush(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Push buffered data to its destination.  Called by ``Bus.flush`` and before close.

        What was handed over before it is durable once it returns: the run flushes before
        each checkpoint, and a ``spool`` subscriber's events are acknowledged (dropped from its
        journal) only after the flush that follows them returned."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources.  Called once, after the writer's last event, by ``Bus.close``."""


class WriterAdapter:
    """Calls the writer's method for each payload type; exposes ``flush``/``close``."""

    __slots__ = ("close", "flush", "probe", "writer")

    def __init__(self, writer: StatsWriter) -> None:
        if not isinstance(writer, StatsWriter):
            raise TypeError(
                f"add_writer() needs a StatsWriter, got {type(writer).__name__}; subclass "
                "evtrain.StatsWriter and implement write_stats(category, values, step)"
            )
        self.writer = writer
        self.flush = writer.flush
        self.close = writer.close
        self.probe = getattr(writer, "probe", None)
        """A spool writer's cheap request to learn whether its sink is back (optional)."""

    def __call__(self, payload: Any) -> None:
        kind = type(payload)
        writer = self.writer
        if kind is StatsEvent:
            writer.write_stats_event(payload)
        elif kind is PropertyEvent:
            writer.add_property(payload.category, payload.property_type, payload.value)
        elif kind is EvaluationEvent:
            writer.on_evaluation(payload)
        elif kind is ArtifactEvent:
            writer.on_artifact(payload)
        elif kind is SaveEvent:
            writer.on_save(payload)
        elif kind is ExportEvent:
            writer.on_export(payload)
        elif kind is RunStarted:
            writer.on_run_started(payload)
        elif kind is RunFinished:
            writer.on_run_finished(payload)
