"""The one place where a subscriber's exception is caught.

Every delivery — sync subscribers on their worker thread, async ones on the dispatcher loop —
goes through :func:`deliver_async` (:func:`deliver` runs the same coroutine on a worker thread,
where it never suspends).  Its two ``except`` clauses — one round each event, one round a
``flush``/``close`` hook (:func:`_isolated`; an event's is inline, as a coroutine per event would
double delivery's own cost) — catch :class:`Exception` and hand it to :func:`record_failure`.
``BaseException`` (KeyboardInterrupt, SystemExit, cancellation) is never caught here: it
propagates to the dispatcher, which stops the subscriber and re-raises it on the producer's
thread at its next ``emit``/``flush``/``close``.

:func:`record_failure` counts the failure, logs it with its traceback (the first one, then at
most once per :data:`LOG_EVERY_S` per subscriber, with the number suppressed), emits
``subscriber_failed``, and applies the bus's policy (:class:`FailurePolicy`).  It knows the bus
only as a :class:`FailureContext`: the policy and two callables.  The counters it changes belong
to the :class:`~evtrain.bus.subscription.Subscription` and change through its methods.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Any

import attrs

from evtrain.bus.inbox import Item, Marker
from evtrain.bus.subscription import Subscription
from evtrain.events.payloads import SubscriberFailed

logger = logging.getLogger("evtrain.bus")

LOG_EVERY_S = 10.0
"""A subscriber's tracebacks are logged at most once per this many seconds."""


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
    raise_later: Callable[[str, str, Exception], None]
    """Policy ``raise``: ``(subscriber, signal, error)`` surfaces on the producer's thread."""


def record_failure(
    sub: Subscription, failures: FailureContext, signal: str, error: Exception
) -> None:
    """Count, log, report and apply the policy to one failure of ``sub`` handling ``signal``
    (or its ``flush``/``close`` hook)."""
    in_a_row = sub.count_failure()
    disable = (
        failures.policy is FailurePolicy.DISABLE
        and in_a_row >= failures.max_consecutive_failures
        and not sub.disabled
    )
    suppressed = sub.log_due(LOG_EVERY_S, force=disable)
    if suppressed is not None:
        logger.error(
            "Subscriber %r raised handling %r; training continues%s.",
            sub.name,
            signal,
            f" ({suppressed} similar failures not logged)" if suppressed else "",
            exc_info=error,
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
        failures.report(
            SubscriberFailed(
                subscriber=sub.name,
                signal=signal,
                error=str(error),
                error_type=type(error).__name__,
                count=sub.failed,
                disabled=disable,
            )
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
        try:
            if awaited:
                await call(payload)
            else:
                call(payload)
        except Exception as error:
            record_failure(sub, failures, sub.signal_name(payload), error)
            sub.handled(t, ok=False)
        else:
            sub.handled(t, ok=True)


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
) -> None:
    """Run a ``flush``/``close`` hook, awaiting its result for an async subscriber."""
    try:
        result = fn()
        if sub.is_async and hasattr(result, "__await__"):
            await result
    except Exception as error:
        record_failure(sub, failures, hook, error)


def deliver(sub: Subscription, batch: list[Item], failures: FailureContext) -> None:
    """Hand ``batch`` to a sync subscriber on the calling (worker) thread.

    It runs :func:`deliver_async` to its end at once: for a sync subscriber nothing in it awaits
    anything that suspends, so it needs no event loop.
    """
    steps = deliver_async(sub, batch, failures)
    try:
        steps.send(None)
    except StopIteration:
        return
    steps.close()
    raise RuntimeError(f"delivery to sync subscriber {sub.name!r} suspended")
