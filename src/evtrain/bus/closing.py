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
    dead_lettered: dict[str, int] = attrs.field(factory=dict)
    """Per spool subscriber that had any: events (or parts) its sink refused for good,
    written to its dead-letter file."""

    def describe(self) -> str:
        """One line naming each subscriber the close left behind and what it left: events
        lost, whether it was still running (abandoned), events kept in its journal."""
        parts = []
        for name in sorted({*self.undelivered, *self.timed_out, *self.journaled}):
            lost, kept = self.undelivered.get(name, 0), self.journaled.get(name, 0)
            what = [f"{lost} event{'' if lost == 1 else 's'} undelivered"] if lost else []
            if name in self.timed_out:
                what.append("still running, abandoned")
            if kept:
                what.append(f"{kept} kept in its journal")
            if what:
                parts.append(f"{name!r} ({', '.join(what)})")
        return "; ".join(parts) or "nothing left"

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


NOTICE_AFTER_S = 1.0
"""A close still waiting after this long says on whom, and until when."""


def drain(
    subs: Sequence[Subscription],
    wait_ended: Callable[[Subscription, float | None], bool],
    deadline: Deadline,
) -> tuple[CloseReport, BaseException | None]:
    """Close ``subs``: a close marker through each inbox, then wait (until ``deadline``) for
    each subscriber's task to end; give up on the ones that did not, and report what each
    left undelivered (queued, or in flight on a stuck subscriber) or, for a spool subscriber,
    left in its journal.  Logs a warning unless the report is clean.

    Ctrl-C (or any exception) during the waits stops them at once: every subscriber not done
    is given up now, and the exception is returned with the report, for the caller to re-raise
    once the bus is closed — so nothing (an exit hook) waits on a hung subscriber again.
    """
    interrupted: BaseException | None = None
    given_up: set[int] = set()
    try:
        if subs:
            given_up = pass_close_marker(subs, deadline)
        for sub in subs:
            wait_ended(sub, 0.0 if id(sub) in given_up else deadline.left())
    except BaseException as error:  # re-raised by the caller, after the bus is closed
        interrupted = error
    # A sink given up as down is reported once, below, with what its journal keeps.
    timed_out = tuple(
        sub.name for sub in subs if id(sub) not in given_up and not wait_ended(sub, 0.0)
    )
    undelivered: dict[str, int] = {}
    delivered: dict[str, int] = {}
    journaled: dict[str, int] = {}
    dead: dict[str, int] = {}
    for sub in subs:
        lost = sub.abandon()
        if lost:
            undelivered[sub.name] = lost
        if isinstance(sub.inbox, SpoolInbox):
            delivered[sub.name] = sub.delivered
            journaled[sub.name] = sub.inbox.left
            if sub.inbox.dead_lettered:
                dead[sub.name] = sub.inbox.dead_lettered
            if sub.inbox.left:
                _warn_journaled(sub, sub.inbox, down=id(sub) in given_up)
    report = CloseReport(
        undelivered=undelivered,
        timed_out=timed_out,
        delivered=delivered,
        journaled=journaled,
        dead_lettered=dead,
    )
    if undelivered or timed_out:
        why = "" if interrupted is None else f" ({type(interrupted).__name__})"
        logger.warning("Bus closed before its subscribers finished%s: %s", why, report.describe())
    return report, interrupted


def _warn_journaled(sub: Subscription, inbox: SpoolInbox, *, down: bool) -> None:
    logger.warning(
        "Subscriber %r did not catch up before the bus closed%s: %d events are kept "
        "undelivered in its journal %s; a bus connecting it over that journal delivers them "
        "first.",
        sub.name,
        " (its sink is down)" if down else "",
        inbox.left,
        inbox.journal.folder,
    )


GIVE_UP_S = 2.0
"""A spool subscriber whose sink is down (failing, its probes too; a call that is merely slow
is not) and that acknowledged nothing for this long during a close is given up: its events
stay in its journal."""
POLL_S = 0.1


def pass_close_marker(subs: Sequence[Subscription], deadline: Deadline) -> set[int]:
    """Pass the close marker and wait for it until ``deadline`` — or, once every subscriber
    still behind is a spool one whose sink is plainly down (:data:`GIVE_UP_S` without
    progress), no longer.  Returns the ``id`` of those given up early."""
    marker = Marker(len(subs), close=True)
    for sub in subs:
        sub.inbox.put_marker(marker)
    start = time.monotonic()
    progress = {id(s): (s.inbox.acked, start) for s in subs if isinstance(s.inbox, SpoolInbox)}
    noticed = False
    while True:
        left = deadline.left()
        if marker.wait(POLL_S if left is None else min(POLL_S, left)):
            return set()
        if left is not None and left <= POLL_S:
            return set()
        now = time.monotonic()
        behind = [s for s in subs if not s.finished]
        down: set[int] = set()
        for sub in behind:
            inbox = sub.inbox
            if not isinstance(inbox, SpoolInbox):
                continue
            acked, since = progress[id(sub)]
            if inbox.acked != acked:
                progress[id(sub)] = (inbox.acked, now)
            elif inbox.failing and now - since >= GIVE_UP_S:
                down.add(id(sub))
        if behind and len(down) == len(behind):
            return down
        if not noticed and now - start >= NOTICE_AFTER_S:
            noticed = True
            waiting = [
                s for s in behind if not (isinstance(s.inbox, SpoolInbox) and s.inbox.failing)
            ]
            if waiting:
                left = deadline.left()
                logger.warning(
                    "Closing the bus: waiting %s for %s (Ctrl-C stops waiting).",
                    "until they finish" if left is None else f"up to {left:.0f} s more",
                    ", ".join(repr(sub.name) for sub in waiting),
                )


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
