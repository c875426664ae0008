"""One subscriber's state on a bus: its inbox, counters, hooks, and the handle users hold.

:class:`Subscription` owns its consumer-side counters (delivered, failed, failures in a row,
disabled, finished, latencies, log throttling): they change only through its methods, here.  The
producer-side ones (offered, dropped, high-water) belong to its :class:`~evtrain.bus.inbox.Inbox`
(a :class:`~evtrain.bus.spool.SpoolInbox` also counts journaled and replayed events).
It knows neither the bus nor the dispatcher; a :class:`SubscriptionHandle` reaches the bus
through the small :class:`Connections` protocol.
"""

from __future__ import annotations

import inspect
import time
from array import array
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

import attrs

from evtrain.bus.spool import AnyInbox, SpoolInbox
from evtrain.events.signals import EventSignal

LATENCY_SAMPLES = 2048
"""Handling latencies kept per subscriber (a ring) for the p50/p99 in ``Bus.metrics``."""
LATENCY_MASK = LATENCY_SAMPLES - 1


def subscriber_name(subscriber: object) -> str:
    """A readable default name: ``module.qualname`` of the function or class."""
    target = subscriber
    if not (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isclass(target)):
        target = type(subscriber)
    module = getattr(target, "__module__", None) or "?"
    qualname = getattr(target, "__qualname__", None) or repr(target)
    return f"{module}.{qualname}"


def is_async_callable(subscriber: object) -> bool:
    """``async def`` functions, and objects whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(subscriber):
        return True
    call = getattr(subscriber, "__call__", None)  # noqa: B004 - we need the method itself
    return call is not None and inspect.iscoroutinefunction(call)


def check_signature(subscriber: object, name: str) -> None:
    """Refuse a subscriber that cannot be called with exactly one positional payload."""
    if not callable(subscriber):
        raise TypeError(f"subscriber {name!r} is not callable: {subscriber!r}")
    try:
        signature = inspect.signature(subscriber)
    except (TypeError, ValueError):
        return  # builtins without a signature: trust them
    try:
        signature.bind(object())
    except TypeError as error:
        raise TypeError(
            f"subscriber {name!r} cannot take one payload argument (signature {signature}): "
            f"{error}. Subscribers are called as subscriber(payload)."
        ) from None


@attrs.frozen(kw_only=True)
class SubscriberMetrics:
    """What ``Bus.metrics()`` reports for one subscriber."""

    name: str
    signals: tuple[str, ...]
    delivered: int
    """Events handed to the subscriber (whether or not it raised; a spool subscriber's count
    each event once, when it succeeded)."""
    dropped: int
    """Events discarded: overflow policy, disabled subscriber, or undeliverable at close."""
    failed: int
    """Calls that raised an ``Exception``."""
    disabled: bool
    queued: int
    high_water: int
    """Largest inbox length seen."""
    latency_p50_s: float
    """Median seconds from ``emit`` to the end of handling, over recent events."""
    latency_p99_s: float
    journaled: int = 0
    """Spool: events in the journal not yet acknowledged (delivered), this run's and an earlier
    process's; the journal's depth."""
    replayed: int = 0
    """Spool: events delivered from the journal on disk rather than from memory."""
    retries: int = 0
    """Spool: deliveries of an event that had raised, tried again."""
    stalls: int = 0
    """Calls that outlived the subscriber's ``stall_timeout``."""
    stalled_s: float = 0.0
    """Seconds spent in those calls, the one running now included."""
    dead_lettered: int = 0
    """Spool: events (or parts of events) its sink refused for good, written to its
    dead-letter file (``run_logs/dead_letter/<subscriber>.jsonl`` in a run)."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data, e.g. for ``timers.json``."""
        return attrs.asdict(self)


class Subscription:
    """Internal record of one connected subscriber; ``Bus.connect`` returns its handle."""

    def __init__(
        self,
        *,
        name: str,
        signals: tuple[EventSignal[Any], ...],
        sender: Any,
        call: Callable[[Any], Any],
        is_async: bool,
        inbox: AnyInbox,
        hooks: dict[str, Callable[[], Any]],
        stall_timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.signals = signals
        self.sender = sender
        self.call = call
        self.is_async = is_async
        self.inbox = inbox
        self.hooks = hooks
        """Optional ``flush``/``close`` callables run at flush and close markers."""
        self.delivered = 0
        """Events handed to the subscriber (whether or not it raised)."""
        self.failed = 0
        self.consecutive_failures = 0
        self.disabled = False
        self.finished = False
        """Its close marker was handled, or its task ended: nothing more is delivered."""
        self.last_logged = float("-inf")
        self.suppressed = 0
        self.latencies = array("d", bytes(8 * LATENCY_SAMPLES))
        """Ring of recent emit-to-handled seconds, indexed by ``delivered & LATENCY_MASK``."""
        self._by_payload = {s.payload_type: s.name for s in signals}
        self.stall_timeout = stall_timeout
        """A call running longer than this many seconds is a stall."""
        self.busy_since = 0.0
        """``perf_counter`` when the running call began; 0.0 between calls."""
        self.busy_with: Any = None
        """The payload (or hook name) of the running call."""
        self.stall_noticed = 0.0
        """``busy_since`` of the call the watchdog last reported."""
        self.stalls = 0
        self.stalled_s = 0.0
        self.retries = 0

    def __call__(self, sender: Any, payload: Any = None, **_: Any) -> None:
        """Blinker receiver protocol: ``bus_signal.send(sender, payload=p)`` queues ``p`` here
        like ``Bus.emit`` does (minus the type check), so the registry stays a real blinker
        registry."""
        self.inbox.put(time.perf_counter(), payload)

    def signal_name(self, payload: Any) -> str:
        return self._by_payload.get(type(payload), "?")

    # -- the consumer's bookkeeping (called by evtrain.bus.delivery and dispatch) -------------

    def begin(self, what: Any) -> None:
        """A call (with payload or hook name ``what``) starts; the watchdog times it."""
        self.busy_with = what
        self.busy_since = time.perf_counter()

    def end(self) -> float:
        """The running call returned or raised; returns the time."""
        now = time.perf_counter()
        started, self.busy_since = self.busy_since, 0.0
        # Cleared before this test, the watchdog's own re-test after noting a stall cannot
        # leave the stall standing either (see Dispatcher._notice).
        if started and self.stall_noticed == started:
            self.stalled_s += now - started
            self.unstall()
        return now

    def notice_stall(self, started: float) -> bool:
        """The watchdog found the call begun at ``started`` stalled: ``True`` the first time."""
        if self.stall_noticed == started:
            return False
        self.stall_noticed = started
        self.stalls += 1
        if isinstance(self.inbox, SpoolInbox):
            self.inbox.hold(stalled=True)
        if self.busy_since != started:  # it returned meanwhile
            self.unstall()
        return True

    def unstall(self) -> None:
        if isinstance(self.inbox, SpoolInbox):
            self.inbox.hold(stalled=False)

    def count_retry(self) -> None:
        """A spool subscriber's event that raised is tried again."""
        self.retries += 1

    def handled(self, t: float, ok: bool) -> None:
        """One event emitted at ``t`` was handed over; ``ok``: it did not raise."""
        self.latencies[self.delivered & LATENCY_MASK] = self.end() - t
        # Per event, not per batch: close() counts what a stuck batch left over.
        self.delivered += 1
        if ok and self.consecutive_failures:
            self.consecutive_failures = 0

    def count_failure(self) -> int:
        """One call raised; returns the failures in a row (``failed`` is the total)."""
        self.failed += 1
        self.consecutive_failures += 1
        return self.consecutive_failures

    def log_due(self, every_s: float, *, force: bool) -> int | None:
        """Whether to log this failure: the number of failures not logged since the last one
        logged, or ``None`` (counted as not logged) within ``every_s`` of it unless ``force``."""
        now = time.monotonic()
        if force or now - self.last_logged >= every_s:
            suppressed, self.suppressed, self.last_logged = self.suppressed, 0, now
            return suppressed
        self.suppressed += 1
        return None

    def disable(self) -> None:
        """Stop handing events over; later ones are dropped."""
        self.disabled = True

    def discard(self) -> None:
        """An event taken from the inbox is not handed over: disabled, or finished."""
        self.inbox.discard()

    def finish(self) -> None:
        """Its close marker was handled, or its task ended."""
        self.finished = True

    def abandon(self) -> int:
        """Nobody consumes the inbox any more: returns the events now lost (queued, or in flight
        on a stuck subscriber), counted as dropped; 0 on a second call."""
        if not self.busy_since:
            self.busy_with = None  # the last call's payload: no call needs it any more
        return self.inbox.abandon(self.delivered)

    def metrics(self) -> SubscriberMetrics:
        kept = sorted(self.latencies[: min(self.delivered, LATENCY_SAMPLES)])

        def quantile(q: float) -> float:
            return kept[min(len(kept) - 1, int(q * len(kept)))] if kept else 0.0

        inbox = self.inbox
        stalled_s, started = self.stalled_s, self.busy_since
        if started and self.stall_noticed == started:
            stalled_s += time.perf_counter() - started
        return SubscriberMetrics(
            name=self.name,
            signals=tuple(s.name for s in self.signals),
            delivered=self.delivered,
            dropped=self.inbox.dropped,
            failed=self.failed,
            disabled=self.disabled,
            queued=len(self.inbox),
            high_water=self.inbox.high_water,
            latency_p50_s=quantile(0.50),
            latency_p99_s=quantile(0.99),
            journaled=inbox.journaled if isinstance(inbox, SpoolInbox) else 0,
            replayed=inbox.replayed if isinstance(inbox, SpoolInbox) else 0,
            retries=self.retries,
            stalls=self.stalls,
            stalled_s=stalled_s,
            dead_lettered=inbox.dead_lettered if isinstance(inbox, SpoolInbox) else 0,
        )


class Connections(Protocol):
    """What a handle needs of the bus that made it (``Bus`` provides it)."""

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """Subscriptions routed now."""
        ...

    def disconnect_subscription(self, sub: Subscription, timeout: float | None = None) -> None:
        """Unroute ``sub``, deliver what is queued for it, close it, wait up to ``timeout``."""
        ...


class SubscriptionHandle:
    """Returned by ``Bus.connect``/``Bus.add_writer``; ``with`` disconnects on exit.

    A handle for a subscription skipped by its ``ranks`` filter is inert: ``active`` is False.
    """

    def __init__(self, bus: Connections, subscription: Subscription | None) -> None:
        self._bus = bus
        self._subscription = subscription

    @property
    def active(self) -> bool:
        """Whether events are routed to this subscriber now."""
        sub = self._subscription
        return sub is not None and not sub.finished and sub in self._bus.subscriptions

    @property
    def name(self) -> str | None:
        """The subscriber's name on the bus (``None`` when skipped by a rank filter)."""
        return None if self._subscription is None else self._subscription.name

    def disconnect(self, timeout: float | None = None) -> None:
        """Stop routing events here, deliver what is queued, close the subscriber, and wait
        (up to ``timeout``, default the bus's ``drain_timeout``) for that to finish.

        :raises BusTimeoutError: it did not finish in time (it is unrouted all the same)."""
        if self._subscription is not None:
            self._bus.disconnect_subscription(self._subscription, timeout)

    def __enter__(self) -> SubscriptionHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disconnect()

    def __repr__(self) -> str:
        return f"<SubscriptionHandle {self.name!r} active={self.active}>"
