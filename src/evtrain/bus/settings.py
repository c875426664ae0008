"""What a subscriber may be configured with: its overflow policy, where it runs, and the
per-subscriber overrides of a run's options (``bus.subscribers``).
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs


# Validators raise (message, attribute), as attrs' own do: the attribute is the key in the path.
def _count(_: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"expected an integer of at least 1, got {value}", attribute)


def _seconds(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"expected a finite number of seconds above 0, got {value}", attribute)


class Overflow(enum.Enum):
    """What ``emit`` does when a subscriber's inbox is full."""

    BLOCK = "block"
    """Wait until the subscriber catches up, at most ``block_timeout``: nothing is lost unless
    it stalls that long (the default)."""
    DROP_OLDEST = "drop_oldest"
    """Discard the oldest queued event to make room; counted as dropped."""
    DROP_NEWEST = "drop_newest"
    """Discard the event being emitted; counted as dropped."""
    LATEST = "latest"
    """Keep only the newest event per key (behavior); a newer ``StatsEvent`` inherits the stat
    keys the replaced one had and it lacks.  Replaced events are counted as dropped."""
    SPOOL = "spool"
    """Never wait, never drop: every event is journaled on disk, the newest ``capacity`` are
    also kept in memory, and a failing subscriber is retried, not disabled (see
    :mod:`evtrain.bus.spool`).  The default of writers to remote trackers."""


class Isolation(enum.Enum):
    """Where a subscriber runs."""

    THREAD = "thread"
    """In the trainer's process: its worker thread, or the dispatcher's loop (the default)."""
    PROCESS = "process"
    """In a child process fed through a bounded window (:mod:`evtrain.bus.process`)."""


@attrs.define(kw_only=True)
class SubscriberSettings:
    """Inbox overrides for one subscriber, keyed by its name on the bus (``bus.subscribers``
    in a run's options)."""

    capacity: int | None = attrs.field(default=None, validator=_count)
    capacity_bytes: int | None = attrs.field(default=None, validator=_count)
    """Most bytes of queued events (by :func:`~evtrain.bus.sizes.event_size`); a fuller inbox
    applies ``overflow`` as a full one does.  ``None``: bounded by ``capacity`` only."""
    overflow: Overflow | None = None
    stall_timeout: float | None = attrs.field(default=None, validator=_seconds)
    """Seconds one call may run before it is a stall (``subscriber_stalled``)."""
    block_timeout: float | None = attrs.field(default=None, validator=_seconds)
    """``block``: seconds ``emit`` waits on the full inbox before it drops the event, counts
    it, and emits ``subscriber_stalled``."""
    journal_max_bytes: int | None = attrs.field(default=None, validator=_count)
    """Spool: the most bytes its journal keeps; beyond, the oldest events are dropped."""
    isolation: Isolation | None = None
    """``process``: the subscriber runs in a child process (:mod:`evtrain.bus.process`)."""
    hang_timeout: float | None = attrs.field(default=None, validator=_seconds)
    """``process``: seconds without progress, while events wait, before its child restarts."""
    max_rss_bytes: int | None = attrs.field(default=None, validator=_count)
    """``process``: resident bytes past which its child restarts."""
