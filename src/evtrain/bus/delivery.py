"""The one place where a subscriber's exception is caught.

Every delivery — sync subscribers on their worker thread, async ones on the dispatcher loop —
goes through :func:`deliver` or :func:`deliver_async`, whose only ``except`` clause catches
:class:`Exception` and hands it to :func:`record_failure`.  ``BaseException`` (KeyboardInterrupt,
SystemExit, cancellation) is never caught here: it propagates to the dispatcher, which stops
the subscriber and re-raises it on the producer's thread at its next ``emit``/``flush``/``close``.

:func:`record_failure` counts the failure, logs it with its traceback (the first one, then at
most once per :data:`LOG_EVERY_S` per subscriber, with the number suppressed), emits
``subscriber_failed``, and applies the bus's policy (:class:`FailurePolicy`).
"""

from __future__ import annotations

import enum
import logging
import time
from typing import TYPE_CHECKING, Any

from evtrain.bus.inbox import Item
from evtrain.bus.subscription import LATENCY_MASK
from evtrain.events.payloads import SubscriberFailed

if TYPE_CHECKING:
    from evtrain.bus.subscription import Subscription

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


def record_failure(sub: Subscription, payload: Any, error: Exception, phase: str = "") -> None:
    """Count, log, report and apply the policy to one failure of ``sub``."""
    sub.failed += 1
    sub.consecutive_failures += 1
    bus = sub.bus
    disable = (
        bus.on_error is FailurePolicy.DISABLE
        and sub.consecutive_failures >= bus.max_consecutive_failures
        and not sub.disabled
    )
    signal_name = sub.signal_name(payload) if phase == "" else phase
    now = time.monotonic()
    if sub.failed == 1 or now - sub.last_logged >= LOG_EVERY_S or disable:
        suppressed = f" ({sub.suppressed} similar failures not logged)" if sub.suppressed else ""
        logger.error(
            "Subscriber %r raised handling %r; training continues%s.",
            sub.name,
            signal_name,
            suppressed,
            exc_info=error,
        )
        sub.last_logged = now
        sub.suppressed = 0
    else:
        sub.suppressed += 1
    if disable:
        sub.disabled = True
        logger.error(
            "Subscriber %r failed %d times in a row and is disabled; its further events are "
            "dropped. Fix it, or raise bus max_consecutive_failures.",
            sub.name,
            sub.consecutive_failures,
        )
    if bus.on_error is FailurePolicy.RAISE:
        bus.raise_later(sub.name, signal_name, error)
    if signal_name != "subscriber_failed":
        bus.emit_internal(
            SubscriberFailed(
                subscriber=sub.name,
                signal=signal_name,
                error=str(error),
                error_type=type(error).__name__,
                count=sub.failed,
                disabled=disable,
            )
        )


def deliver(sub: Subscription, batch: list[Item]) -> None:
    """Hand ``batch`` to a sync subscriber, in order, on the calling (worker) thread."""
    call = sub.call
    clock = time.perf_counter
    latencies, mask, delivered = sub.latencies, LATENCY_MASK, sub.delivered
    for t, payload in batch:
        if t is None:
            _call_hook(sub, "flush")
            if payload.close:
                _call_hook(sub, "close")
                sub.finished = True
            payload.arrive(sub.inbox)
            continue
        if sub.disabled or sub.finished:
            sub.inbox.dropped += 1
            continue
        try:
            call(payload)
        except Exception as error:
            record_failure(sub, payload, error)
        else:
            if sub.consecutive_failures:
                sub.consecutive_failures = 0
        latencies[delivered & mask] = clock() - t
        delivered += 1
        sub.delivered = delivered  # per event: close() counts what a stuck batch left over


async def deliver_async(sub: Subscription, batch: list[Item]) -> None:
    """Await an async subscriber once per event of ``batch``, in order, on the loop."""
    call = sub.call
    clock = time.perf_counter
    latencies, mask = sub.latencies, LATENCY_MASK
    for t, payload in batch:
        if t is None:
            for name in ("flush", "close") if payload.close else ("flush",):
                await _await_hook(sub, name)
            if payload.close:
                sub.finished = True
            payload.arrive(sub.inbox)
            continue
        if sub.disabled or sub.finished:
            sub.inbox.dropped += 1
            continue
        try:
            await call(payload)
        except Exception as error:
            record_failure(sub, payload, error)
        else:
            if sub.consecutive_failures:
                sub.consecutive_failures = 0
        latencies[sub.delivered & mask] = clock() - t
        sub.delivered += 1


def _call_hook(sub: Subscription, name: str) -> None:
    hook = sub.hooks.get(name)
    if hook is None:
        return
    try:
        hook()
    except Exception as error:
        record_failure(sub, None, error, phase=name)


async def _await_hook(sub: Subscription, name: str) -> None:
    hook = sub.hooks.get(name)
    if hook is None:
        return
    try:
        result = hook()
        if hasattr(result, "__await__"):
            await result
    except Exception as error:
        record_failure(sub, None, error, phase=name)
