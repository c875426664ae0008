"""What an event weighs, for ``capacity_bytes``: an estimate cheap enough for ``emit``."""

from __future__ import annotations

from typing import Any

from evtrain.events.payloads import StatsEvent

EVENT_BYTES = 256
"""What :func:`event_size` counts for any event: the object, its fields, the queue slot."""
SUMMARY_BYTES = 160
"""What it counts per stat key of a ``StatsEvent``: the key, its summary, the dict slot."""


def event_size(payload: Any) -> int:
    """A cheap estimate of the bytes ``payload`` holds, for ``capacity_bytes``.

    Not ``sys.getsizeof`` of the whole graph (that walk would cost more than the emit): a
    ``StatsEvent`` counts :data:`SUMMARY_BYTES` per key plus 8 per recorded value; any other
    payload :data:`EVENT_BYTES` plus the ``nbytes`` of its array fields (numpy, torch) and the
    length of its ``bytes``/``str`` fields.
    """
    if type(payload) is StatsEvent:
        values = payload.values
        return EVENT_BYTES + sum(SUMMARY_BYTES + 8 * len(s.full_dist) for s in values.values())
    size = EVENT_BYTES
    fields = getattr(type(payload), "__attrs_attrs__", ())
    for field in fields:
        value = getattr(payload, field.name, None)
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, int):
            size += nbytes
        elif isinstance(value, bytes | str):
            size += len(value)
    return size
