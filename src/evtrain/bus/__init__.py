"""Delivery: the bus, its subscribers' inboxes (and spool journals), the dispatcher, isolation,
writers, filters and the stats reporter.  Knows the vocabulary (:mod:`evtrain.events`), nothing
above it.

The names most code wants are re-exported here: ``from evtrain.bus import Bus``.
"""

from __future__ import annotations

from evtrain.bus.bus import Bus
from evtrain.bus.closing import CloseReport
from evtrain.bus.delivery import FailurePolicy
from evtrain.bus.inbox import Isolation, Overflow, SubscriberSettings
from evtrain.bus.journal import journal_backlog, journal_path
from evtrain.bus.routes import ANY
from evtrain.bus.writers import StatsWriter

__all__ = [
    "ANY",
    "Bus",
    "CloseReport",
    "FailurePolicy",
    "Isolation",
    "Overflow",
    "StatsWriter",
    "SubscriberSettings",
    "journal_backlog",
    "journal_path",
]
