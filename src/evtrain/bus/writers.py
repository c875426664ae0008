"""Writers: :class:`StatsWriter`, ML-Agents' sink interface, and the adapter that makes one a
single subscriber of ``stats`` and ``hyperparameters``."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from evtrain.bus.subscription import SubscriberMetrics
from evtrain.events.payloads import PropertyEvent, StatsEvent
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

    @abc.abstractmethod
    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        """Record one summary period of ``category`` labelled with ``step``."""

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Record a property (e.g. hyperparameters).  Writers need not support every type."""

    def on_connect(self, bus: BusMetrics) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called once by ``Bus.add_writer`` before any event; writers that report bus state
        (the gauge writer records ``bus.metrics()``) keep the reference."""

    def flush(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Push buffered data to its destination.  Called by ``Bus.flush`` and before close."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources.  Called once, after the writer's last event, by ``Bus.close``."""


class WriterAdapter:
    """Calls ``write_stats``/``add_property`` by payload type; exposes ``flush``/``close``."""

    __slots__ = ("close", "flush", "writer")

    def __init__(self, writer: StatsWriter) -> None:
        if not isinstance(writer, StatsWriter):
            raise TypeError(
                f"add_writer() needs a StatsWriter, got {type(writer).__name__}; subclass "
                "evtrain.StatsWriter and implement write_stats(category, values, step)"
            )
        self.writer = writer
        self.flush = writer.flush
        self.close = writer.close

    def __call__(self, payload: Any) -> None:
        if type(payload) is StatsEvent:
            self.writer.write_stats(payload.category, payload.values, payload.step)
        elif type(payload) is PropertyEvent:
            self.writer.add_property(payload.category, payload.property_type, payload.value)
