"""The one place where a subscriber's exception is caught.

Every delivery — sync subscribers on their worker thread, async ones on the dispatcher loop —
goes through :func:`deliver_async` (:func:`deliver` runs the same coroutine on a worker thread,
where it never suspends).  Its two ``except`` clauses — one round each event, one round a
``flush``/``close`` hook (:func:`_isolated`; an event's is inline, as a coroutine per event would
double delivery's own cost) — catch what :func:`isolable` names and hand it to
:func:`record_failure`: :class:`Exception`, and on evtrain's own threads ``KeyboardInterrupt``
and ``SystemExit`` too (a subscriber's, never the user's: see there).  Anything else (anyio's
cancellation) propagates to the dispatcher, which stops the subscriber and re-raises it on the
producer's thread at its next ``emit``/``flush``/``close``.

:func:`record_failure` counts the failure, logs it with its traceback (the first one, then at
most once per :data:`LOG_EVERY_S` per subscriber, with the number suppressed), emits
``subscriber_failed``, and applies the bus's policy (:class:`FailurePolicy`).  It knows the bus
only as a :class:`FailureContext`: the policy and a few callables.  The counters it changes
belong to the :class:`~evtrain.bus.subscription.Subscription` and change through its methods.

A subscriber that returns :class:`~evtrain.events.payloads.StopRun` asks the run to stop: the
delivery hands its reason to ``Bus.request_stop`` (:attr:`FailureContext.request_stop`), by
the subscriber's name.

A ``spool`` subscriber is never disabled: its delivery (:mod:`evtrain.bus.spool_delivery`)
retries a failing event on a short fixed interval, dead-letters a permanently refused one,
and logs each outage once instead of through :func:`record_failure`.

A full disk (``ENOSPC``, ``EDQUOT``: :func:`disk_full`) is transient: it never counts towards
``disable``, is logged as one line naming the path (no traceback), and the event that met it is
retried every :data:`DISK_RETRY_S` (:func:`_until_space`), later events waiting behind it in
order, until it is written or the bus gives up on the subscriber at close (then it counts as
dropped, never as delivered).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import attrs

from evtrain.atomic import disk_full
from evtrain.bus.inbox import Item, Marker
from evtrain.bus.subscription import Subscription
from evtrain.events.payloads import StopRun, SubscriberFailed, SubscriberStalled

logger = logging.getLogger("evtrain.bus")

LOG_EVERY_S = 10.0
"""A subscriber's tracebacks are logged at most once per this many seconds."""
DISK_RETRY_S = 0.5
"""How often an event that met a full disk is tried again."""


class FailurePolicy(enum.Enum):
    """What the bus does when a subscriber raises an ``Exception``."""

    LOG = "log"
    """Log, count, emit ``subscriber_failed``, keep delivering."""
    DISABLE = "disable"
    """As ``log``, and stop delivering after ``max_consecutive_failures`` failures in a row
    (the default)."""
    RAISE = "raise"
    """As ``log``, and re-raise as :class:`~evtrain.errors.SubscriberError` from the next
    ``emit``/``flush``/``close`` on the producer's thread.  Meant for tests."""


@attrs.frozen(kw_only=True)
class FailureContext:
    """What the isolation wrapper needs of the bus."""

    policy: FailurePolicy
    max_consecutive_failures: int
    """Failures in a row after which ``disable`` stops a subscriber."""
    report: Callable[[SubscriberFailed], None]
    """Queues ``subscriber_failed`` without ever blocking (``Bus.emit_internal``)."""
    raise_later: Callable[[str, str, BaseException], None]
    """Policy ``raise``: ``(subscriber, signal, error)`` surfaces on the producer's thread."""
    report_stall: Callable[[SubscriberStalled], None]
    """Queues ``subscriber_stalled`` without ever blocking (``Bus.emit_internal``)."""
    retry_backoff_s: float = 0.5
    """How often a spool subscriber whose sink is down is probed (or its event retried)."""
    request_stop: Callable[[str, str], None] = lambda reason, by: None
    """``(reason, subscriber)``: a subscriber returned :class:`~evtrain.events.payloads.StopRun`
    (``Bus.request_stop``)."""


_ON_MAIN: tuple[type[BaseException], ...] = (Exception,)
_OFF_MAIN: tuple[type[BaseException], ...] = (Exception, KeyboardInterrupt, SystemExit)


def isolable() -> tuple[type[BaseException], ...]:
    """What the isolation wrapper catches on the calling thread (evaluated only when a
    subscriber raised).

    Python raises the user's Ctrl-C (``KeyboardInterrupt``) and ``sys.exit`` only in the main
    thread, so on the dispatcher loop and the workers these two can only come from the
    subscriber itself: they are its failure, and must not end the run without its checkpoint.
    On the main thread they stay the user's.  Cancellation (a ``BaseException`` too) always
    passes: anyio needs it to stop the tasks.
    """
    return _ON_MAIN if threading.get_ident() == threading.main_thread().ident else _OFF_MAIN


def record_failure(
    sub: Subscription,
    failures: FailureContext,
    signal: str,
    error: BaseException,
    retry_in: float | None = None,
) -> None:
    """Count, log, report and apply the policy to one failure of ``sub`` handling ``signal``
    (or its ``flush``/``close`` hook); ``retry_in``: a spool subscriber's event, tried again
    in that many seconds (never disabled)."""
    in_a_row = sub.count_failure()
    transient = disk_full(error)
    disable = (
        retry_in is None
        and not transient
        and failures.policy is FailurePolicy.DISABLE
        and in_a_row >= failures.max_consecutive_failures
        and not sub.disabled
    )
    suppressed = sub.log_due(LOG_EVERY_S, force=disable)
    if suppressed is not None:
        logger.error(
            "Subscriber %r raised handling %r%s; training continues%s%s.",
            sub.name,
            signal,
            f": {error}" if transient else "",
            "" if retry_in is None else f", the event is retried in {retry_in:g} s",
            f" ({suppressed} similar failures not logged)" if suppressed else "",
            exc_info=None if transient else error,
        )
    if disable:
        sub.disable()
        logger.error(
            "Subscriber %r failed %d times in a row and is disabled; its further events are "
            "dropped. Fix it, or raise bus max_consecutive_failures.",
            sub.name,
            in_a_row,
        )
    if failures.policy is FailurePolicy.RAISE:
        failures.raise_later(sub.name, signal, error)
    if signal != "subscriber_failed":
        failures.report(failure_event(sub, signal, error, disabled=disable, retry_in=retry_in))


def failure_event(
    sub: Subscription, signal: str, error: BaseException, *, disabled: bool, retry_in: float | None
) -> SubscriberFailed:
    """The ``subscriber_failed`` payload of ``sub``'s failure handling ``signal``."""
    return SubscriberFailed(
        subscriber=sub.name,
        signal=signal,
        error=str(error),
        error_type=type(error).__name__,
        count=sub.failed,
        disabled=disabled,
        retry_in_s=retry_in,
    )


async def deliver_async(sub: Subscription, batch: list[Item], failures: FailureContext) -> None:
    """Hand ``batch`` to ``sub`` in order; awaited on the loop for an async subscriber."""
    call, awaited = sub.call, sub.is_async
    for t, payload in batch:
        if t is None:
            await _pass_marker(sub, failures, payload)
            continue
        if sub.disabled or sub.finished:
            sub.discard()
            continue
        sub.begin(payload)
        try:
            result = (await call(payload)) if awaited else call(payload)
        except isolable() as error:
            if disk_full(error):
                left = await _until_space(sub, failures, payload, error)
                if left is None:
                    sub.handled(t, ok=True)
                    continue
                if disk_full(left):  # the bus gave up on it: not written, so not delivered
                    sub.end()
                    sub.discard()
                    continue
                error = left
            record_failure(sub, failures, sub.signal_name(payload), error)
            sub.handled(t, ok=False)
        else:
            sub.handled(t, ok=True)
            if type(result) is StopRun:
                failures.request_stop(result.reason, sub.name)


async def _until_space(
    sub: Subscription, failures: FailureContext, payload: Any, error: BaseException
) -> BaseException | None:
    """Try ``payload`` again every :data:`DISK_RETRY_S` while its disk is full: ``None`` once
    it went through; the full disk's error once the bus gave up on ``sub``; another error
    that ended the retries."""
    if sub.inbox.abandoned:  # the bus gave up already: said once, for the event before
        return error
    signal = sub.signal_name(payload)
    sub.count_failure()
    logger.warning(
        "Subscriber %r: %s; its events wait, in order, and are retried every %g s until space "
        "is freed.",
        sub.name,
        error,
        DISK_RETRY_S,
    )
    failures.report(failure_event(sub, signal, error, disabled=False, retry_in=DISK_RETRY_S))
    while not sub.inbox.abandoned:
        sub.end()
        if sub.is_async:
            await anyio.sleep(DISK_RETRY_S)
        else:
            time.sleep(DISK_RETRY_S)  # a sync subscriber's own worker thread
        if sub.inbox.abandoned:
            break
        sub.begin(payload)
        sub.count_retry()
        try:
            if sub.is_async:
                await sub.call(payload)
            else:
                sub.call(payload)
        except isolable() as again:
            if disk_full(again):
                continue
            return again
        logger.warning("Subscriber %r writes again: space was freed.", sub.name)
        return None
    sub.begin(payload)  # balanced by the caller's end()
    return error


async def _pass_marker(sub: Subscription, failures: FailureContext, marker: Marker) -> None:
    for hook in ("flush", "close") if marker.close else ("flush",):
        fn = sub.hooks.get(hook)
        if fn is not None:
            await _isolated(sub, failures, hook, fn)
    if marker.close:
        sub.finish()
    marker.arrive(sub.inbox)


async def _isolated(
    sub: Subscription, failures: FailureContext, hook: str, fn: Callable[[], Any]
) -> bool:
    """Run a ``flush``/``close`` hook, awaiting its result for an async subscriber;
    ``False`` if it raised."""
    sub.begin(hook)
    try:
        result = fn()
        if sub.is_async and hasattr(result, "__await__"):
            result = await result
    except isolable() as error:
        sub.end()
        record_failure(sub, failures, hook, error)
        return False
    sub.end()
    if type(result) is StopRun:  # a process-isolated subscriber's, read while flushing
        failures.request_stop(result.reason, sub.name)
    return True


def deliver(sub: Subscription, batch: list[Item], failures: FailureContext) -> None:
    """Hand ``batch`` to a sync subscriber on the calling (worker) thread."""
    run_to_end(sub, deliver_async(sub, batch, failures))


def run_to_end(sub: Subscription, steps: Coroutine[Any, Any, None]) -> None:
    """Run a delivery coroutine of sync subscriber ``sub`` to its end at once, on the calling
    (worker) thread: for a sync subscriber nothing in it awaits anything that suspends (its
    backoff waits on a thread event), so it needs no event loop.
    """
    try:
        steps.send(None)
    except StopIteration:
        return
    steps.close()
    raise RuntimeError(f"delivery to sync subscriber {sub.name!r} suspended")
