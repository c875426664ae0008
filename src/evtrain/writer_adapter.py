"""Turns a :class:`StatsWriter` into one subscriber of ``stats`` and ``hyperparameters``."""

from __future__ import annotations

from typing import Any

from evtrain.payloads import PropertyEvent, StatsEvent
from evtrain.stats import StatsWriter


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
