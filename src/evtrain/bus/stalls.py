"""A ``block`` subscriber that does not make room: what ``emit`` does after ``block_timeout``.

``emit`` on a full ``block`` inbox waits for the subscriber to take its events, but never
longer than its ``block_timeout`` (see :meth:`evtrain.bus.inbox.Inbox.put`).  When that runs
out the event is dropped and counted, and so is every later one until the subscriber takes
from its inbox again; the bus logs a warning and emits ``subscriber_stalled`` with
``inbox_full=True``.  Training goes on.  (A call that runs past ``stall_timeout`` is the other
kind of stall; the dispatcher's watchdog reports those.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from evtrain.bus.inbox import Inbox
from evtrain.bus.log_inbox import LogInbox
from evtrain.bus.subscription import Subscription
from evtrain.events.payloads import SubscriberStalled

logger = logging.getLogger("evtrain.bus")


def watch_full_inbox(sub: Subscription, report: Callable[[SubscriberStalled], None]) -> None:
    """Have ``sub``'s ``block`` inbox log and ``report`` (never blocking) its timed-out waits."""
    inbox = sub.inbox
    if not isinstance(inbox, Inbox | LogInbox):
        return  # spool: never waits

    def timed_out(payload: Any, waited: float) -> None:
        signal = sub.signal_name(payload)
        logger.warning(
            "Subscriber %r took nothing from its full inbox (capacity %d) for %.1f s "
            "(block_timeout %g s): this %r event and later ones are dropped until it does; "
            "training goes on.",
            sub.name,
            inbox.capacity,
            waited,
            inbox.block_timeout,
            signal,
        )
        report(
            SubscriberStalled(
                subscriber=sub.name,
                signal=signal,
                seconds=waited,
                stall_timeout=inbox.block_timeout,
                spool=False,
                inbox_full=True,
            )
        )

    inbox.on_block_timeout = timed_out
