"""Draining a bus: markers through every inbox, the report of what ``close`` could not do, and
the drain at interpreter exit of a bus nobody closed."""

from __future__ import annotations

import atexit
import logging
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from evtrain.bus.inbox import Marker
from evtrain.bus.spool import SpoolInbox
from evtrain.bus.subscription import Subscription

logger = logging.getLogger("evtrain.bus")


@attrs.frozen(kw_only=True)
class CloseReport:
    """What ``Bus.close`` could not do: per subscriber, events left undelivered."""

    undelivered: dict[str, int] = attrs.field(factory=dict)
    """Events lost: never handled, and gone with the bus."""
    timed_out: tuple[str, ...] = ()
    delivered: dict[str, int] = attrs.field(factory=dict)
    """Per spool subscriber: events it received (successfully) from this bus."""
    journaled: dict[str, int] = attrs.field(factory=dict)
    """Per spool subscriber: events left undelivered in its journal — kept on disk, not lost;
    the next bus that connects it over the same journal delivers them first.  0 when it
    caught up."""

    @property
    def clean(self) -> bool:
        """Everything emitted was handled and every subscriber closed."""
        return not self.undelivered and not self.timed_out and not any(self.journaled.values())


class Deadline:
    """``timeout`` seconds from now (``None``: never), shared by several waits."""

    def __init__(self, timeout: float | None) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float | None:
        """Seconds left, at least 0; ``None`` without a timeout."""
        return None if self._at is None else max(0.0, self._at - time.monotonic())


def pass_marker(
    subs: Sequence[Subscription], timeout: float | None, *, close: bool, journaled: bool = False
) -> bool:
    """Put one marker behind everything queued for ``subs`` and wait until all handled it
    (``close``: and closed; ``journaled``: see :attr:`Marker.journaled`); ``False`` on
    timeout."""
    marker = Marker(len(subs), close=close, journaled=journaled)
    for sub in subs:
        sub.inbox.put_marker(marker)
    return marker.wait(timeout)


def settle(
    subs: Sequence[Subscription],
    wait_ended: Callable[[Subscription, float | None], bool],
    deadline: Deadline,
) -> CloseReport:
    """After the close markers: wait for each subscriber's task to end, give up on the ones
    that did not by ``deadline``, and count what each left undelivered (queued, or in flight on
    a stuck subscriber) or, for a spool subscriber, left in its journal; logs a warning unless
    the report is clean."""
    timed_out = []
    undelivered: dict[str, int] = {}
    delivered: dict[str, int] = {}
    journaled: dict[str, int] = {}
    for sub in subs:
        if not wait_ended(sub, deadline.left()):
            timed_out.append(sub.name)
        lost = sub.abandon()
        if lost:
            undelivered[sub.name] = lost
        if isinstance(sub.inbox, SpoolInbox):
            delivered[sub.name] = sub.delivered
            journaled[sub.name] = sub.inbox.left
            if sub.inbox.left:
                logger.warning(
                    "Subscriber %r did not catch up before the bus closed: %d events are kept "
                    "undelivered in its journal %s; a bus connecting it over that journal "
                    "delivers them first.",
                    sub.name,
                    sub.inbox.left,
                    sub.inbox.journal.folder,
                )
    report = CloseReport(
        undelivered=undelivered,
        timed_out=tuple(timed_out),
        delivered=delivered,
        journaled=journaled,
    )
    if undelivered or timed_out:
        logger.warning(
            "Bus closed with events undelivered %s; subscribers not finished: %s",
            undelivered,
            list(timed_out),
        )
    return report


class Closable(Protocol):
    """What the drain at exit needs of a bus (``Bus`` provides it)."""

    @property
    def closed(self) -> bool: ...

    @property
    def subscriptions(self) -> tuple[Subscription, ...]: ...

    def close(self, timeout: float | None = None) -> CloseReport: ...


_live_buses: weakref.WeakSet[Closable] = weakref.WeakSet()


def drain_at_exit(bus: Closable) -> None:
    """Close ``bus`` at interpreter exit, with a ``ResourceWarning``, if nobody else did."""
    _live_buses.add(bus)


@atexit.register
def _drain_unclosed_buses() -> None:
    for bus in list(_live_buses):
        if not bus.closed and bus.subscriptions:
            warnings.warn(
                "evtrain Bus was never closed; draining it at interpreter exit. Call bus.close() "
                "(or use `with Bus() as bus:`) so nothing depends on exit hooks.",
                ResourceWarning,
                stacklevel=1,
            )
            try:
                bus.close(timeout=30.0)
            except Exception:
                logger.exception("Draining an unclosed bus at exit failed")
