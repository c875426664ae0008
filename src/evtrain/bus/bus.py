"""The bus: blinker is the registry of who listens (:mod:`evtrain.bus.routes`); evtrain owns
delivery.

:class:`Bus` is the face: it connects subscribers (each a
:class:`~evtrain.bus.subscription.Subscription` with its own inbox and dispatcher task; that
half is :class:`~evtrain.bus.wiring.Wiring`, which it inherits), and ``emit`` appends once to the
bus's shared log for the subscribers with default settings (:mod:`evtrain.bus.ledger`) and to
the inbox of each one with a queue of its own.  It holds the bus-wide state — its settings
(:class:`~evtrain.bus.defaults.BusDefaults`), open or closed, the error waiting for the
producer — and hands the isolation wrapper (:mod:`evtrain.bus.delivery`) only a
:class:`~evtrain.bus.delivery.FailureContext`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from evtrain.bus.closing import CloseReport, Deadline, drain, drain_at_exit, pass_marker
from evtrain.bus.defaults import BusDefaults
from evtrain.bus.delivery import FailurePolicy
from evtrain.bus.dispatch import Dispatcher
from evtrain.bus.inbox import Overflow, SubscriberSettings
from evtrain.bus.routes import ANY
from evtrain.bus.subscription import SubscriberMetrics
from evtrain.bus.wiring import Wiring
from evtrain.errors import BusClosedError, BusTimeoutError, SubscriberError
from evtrain.events.payloads import StopRequested, SubscriberStalled
from evtrain.events.signals import EventSignal, subscriber_failed, subscriber_stalled
from evtrain.ranks import get_rank

logger = logging.getLogger("evtrain.bus")

FLUSH_ROUNDS = 3
"""Rounds a flush makes to deliver the ``subscriber_failed``/``subscriber_stalled`` events it
caused itself."""


class Bus(Wiring):
    """Typed, asynchronous, isolated delivery of training events to subscribers.

    :param capacity: default inbox capacity per subscriber.
    :param overflow: default policy when an inbox is full (``block`` loses nothing unless a
        subscriber takes nothing for ``block_timeout``).
    :param on_error: what a subscriber's exception does (see :class:`FailurePolicy`).
    :param max_consecutive_failures: failures in a row after which ``disable`` stops a subscriber.
    :param rank: this process's rank for ``ranks=`` filters; default :func:`get_rank`.
    :param subscribers: inbox overrides by subscriber name; they win over what ``connect`` was
        given, so options can retune plugins that connect themselves.
    :param stall_timeout: seconds a call may run before the watchdog emits
        ``subscriber_stalled`` (per subscriber: ``connect(stall_timeout=)``).
    :param block_timeout: seconds ``emit`` waits on a full ``block`` inbox before it drops the
        event (counted) and emits ``subscriber_stalled`` (``connect(block_timeout=)``).
    :param drain_timeout: seconds ``close()`` without a timeout waits for subscribers.
    :param journal_dir: where ``spool`` subscribers keep their journals; ``None``: a temporary
        folder, removed at close when empty (lossless in-process, not across a crash).
    :param journal_max_bytes: most bytes one journal keeps; beyond, its oldest events drop.
    :param journal_fsync_s: seconds between a journal's fsyncs (and persisted acks).
    :param retry_backoff_s: how often a spool subscriber whose sink is down is probed (its
        ``probe`` hook) or, without one, its event retried: a fixed interval, so a sink that
        comes back is noticed within it (:mod:`evtrain.bus.spool_delivery`).
    :param retry_backoff_max_s: an upper bound on that interval (the smaller of the two is
        used); the interval no longer grows.
    """

    def __init__(
        self,
        *,
        capacity: int = 10_000,
        overflow: Overflow | str = Overflow.BLOCK,
        on_error: FailurePolicy | str = FailurePolicy.DISABLE,
        max_consecutive_failures: int = 100,
        rank: int | None = None,
        subscribers: Mapping[str, SubscriberSettings] | None = None,
        stall_timeout: float = 10.0,
        block_timeout: float = 10.0,
        drain_timeout: float = 30.0,
        journal_dir: str | os.PathLike[str] | None = None,
        journal_max_bytes: int = 1 << 30,
        journal_fsync_s: float = 1.0,
        retry_backoff_s: float = 0.5,
        retry_backoff_max_s: float = 30.0,
    ) -> None:
        settings = BusDefaults(
            capacity=capacity,
            overflow=overflow,
            on_error=on_error,
            max_consecutive_failures=max_consecutive_failures,
            stall_timeout=stall_timeout,
            block_timeout=block_timeout,
            drain_timeout=drain_timeout,
            journal_dir=journal_dir,
            journal_fsync_s=journal_fsync_s,
            retry_backoff_s=retry_backoff_s,
            retry_backoff_max_s=retry_backoff_max_s,
            journal_max_bytes=journal_max_bytes,
        )
        self.capacity, self.overflow = settings.capacity, settings.overflow
        self.on_error = settings.on_error
        self.max_consecutive_failures = settings.max_consecutive_failures
        self.rank = get_rank() if rank is None else rank
        """Rank used by ``ranks=`` filters, fixed when the bus is created."""
        self.stall_timeout, self.block_timeout = settings.stall_timeout, settings.block_timeout
        self.drain_timeout = settings.drain_timeout
        self.journal_dir = settings.journal_dir
        """Where spool subscribers' journals live; ``None``: a temporary folder."""
        self.journal_max_bytes = settings.journal_max_bytes
        self.journal_fsync_s = settings.journal_fsync_s
        self._init_wiring(self.journal_dir, self.journal_fsync_s, subscribers)
        self._route_cache = self._routes.cache
        """The same dict, one attribute lookup nearer for ``emit``."""
        self._internal_emits = 0
        failures = settings.failures(
            report=self.emit_internal, raise_later=self.raise_later, request_stop=self._stop_by
        )
        self._dispatcher = Dispatcher(self._on_fatal, failures)
        self._open = True
        self._closed = False
        self._report: CloseReport | None = None
        self._pending_error: BaseException | None = None
        self._stop_request: StopRequested | None = None
        self._stop_lock = threading.Lock()
        drain_at_exit(self)

    @property
    def closed(self) -> bool:
        """``close()`` has finished."""
        return self._closed

    # -- emitting ----------------------------------------------------------------------------

    def emit(self, signal: EventSignal[Any], payload: Any) -> None:
        """Queue ``payload`` for every subscriber of ``signal`` and return.

        Delivery semantics:

        * **Threading.**  Callable from any thread.  No subscriber code and no I/O runs on the
          caller's thread; the caller pays one lock and one append for all the subscribers
          with default settings (``block``, no ``capacity_bytes``: they read the bus's
          shared log, :mod:`evtrain.bus.ledger`), plus one per subscriber with a queue of its
          own (``spool``, a drop policy, ``latest``, ``capacity_bytes``).
        * **Order.**  Each subscriber receives events in the order they were emitted; with
          several producer threads, each producer's order is kept.  No order across subscribers.
        * **Slow subscribers.**  Each has a bounded inbox.  When it is full, ``block`` (default)
          makes ``emit`` wait until there is room — nothing is lost — but at most
          ``block_timeout``: then the event is dropped (counted), ``subscriber_stalled`` is
          emitted, and later events are dropped at once until the subscriber takes from its
          inbox.  A subscriber's own emits never wait on its inbox (nor an async one's on any
          inbox): they overfill it.  ``drop_oldest``,
          ``drop_newest`` and ``latest`` never wait and count what they discard; ``spool``
          never waits and loses nothing: every event is journaled on disk (by a background
          thread), memory keeps ``capacity`` of them, the rest is replayed from disk in order.
          Other subscribers are not delayed either way.  A call running past ``stall_timeout``
          is reported once as ``subscriber_stalled``.
        * **Raising subscribers.**  An ``Exception`` is caught, logged, counted, and emitted as
          ``subscriber_failed``; the bus policy may disable the subscriber or, with ``raise``,
          re-raise it from the next ``emit``/``flush``/``close``.  A ``spool`` subscriber is
          never disabled: the same event is retried with backoff, later ones wait behind it.
          ``KeyboardInterrupt``/``SystemExit`` from a subscriber (on the bus's threads) are
          its failure too.

        :raises TypeError: ``payload`` is not an instance of ``signal.payload_type``.
        :raises BusClosedError: ``close()`` has begun.
        """
        expected = signal.payload_type
        if type(payload) is not expected and not isinstance(payload, expected):
            raise TypeError(
                f"signal {signal.name!r} carries {signal.payload_type.__name__}, "
                f"got {type(payload).__name__}"
            )
        if self._pending_error is not None:
            self._raise_pending()
        if not self._open:
            raise BusClosedError(f"cannot emit {signal.name!r}: the bus is closing or closed")
        try:
            inboxes = self._route_cache[(signal, getattr(payload, "category", ANY))]
        except KeyError:
            inboxes = self._routes.lookup(signal, getattr(payload, "category", ANY))
        if inboxes:
            t = time.perf_counter()
            for inbox in inboxes:
                inbox.put(t, payload)

    def emit_internal(self, payload: Any) -> None:
        """The bus's own ``subscriber_failed``/``subscriber_stalled`` events: accepted while
        closing, never blocking."""
        signal = subscriber_stalled if type(payload) is SubscriberStalled else subscriber_failed
        inboxes = self._routes.lookup(signal, ANY)
        if inboxes:  # what a flush must go round again for
            self._internal_emits += 1
        t = time.perf_counter()
        for inbox in inboxes:
            inbox.put_nowait(t, payload)

    # -- draining ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None, *, journaled: bool = False) -> None:
        """Return once every event emitted before the call has been handled, and every
        subscriber with a ``flush()`` (writers) has flushed.

        ``journaled=True``: a ``spool`` subscriber that is failing or stalled counts as done
        once those events are in its journal (they are delivered when its sink answers), so
        the flush does not wait on a dead tracker.

        :raises BusTimeoutError: not done within ``timeout`` seconds; names who is behind.
        :raises RuntimeError: called from a subscriber (it would wait for itself).
        """
        self._refuse_from_dispatcher("flush")
        deadline = Deadline(timeout)
        # Failures found while flushing emit subscriber_failed; go round again so those are
        # handled too — a few times, not until quiet: a spool subscriber retrying a dead
        # tracker fails on every try, for as long as the outage lasts.
        for _ in range(FLUSH_ROUNDS):
            internal = self._internal_emits
            subs = [s for s in self.subscriptions if not s.finished]
            done = pass_marker(subs, deadline.left(), close=False, journaled=journaled)
            if self._pending_error is not None:
                self._raise_pending()
            if not done:
                behind = [s.name for s in subs if len(s.inbox)]
                raise BusTimeoutError(
                    f"flush did not finish within {timeout}s; behind: {behind}", behind
                )
            if internal == self._internal_emits:
                return

    def close(self, timeout: float | None = None) -> CloseReport:
        """Stop accepting events, deliver everything queued, close each subscriber (in
        isolation), stop the dispatcher, and report what could not be delivered.  It returns
        after about ``timeout`` (default ``drain_timeout``) whatever a subscriber does, and at
        once on Ctrl-C (re-raised once closed); a spool subscriber's undelivered events stay
        in its journal (``CloseReport.journaled``).

        Idempotent: a second call returns the first report.
        """
        self._refuse_from_dispatcher("close")
        with self._lock:
            if self._report is not None:
                return self._report
            self._open = False
            subs = list(self._subscriptions)
        live = [s for s in subs if not s.finished]
        deadline = Deadline(self.drain_timeout if timeout is None else timeout)
        report, interrupted = drain(live, self._dispatcher.wait_ended, deadline)
        self._dispatcher.stop(timeout=1.0)
        self._journals.tidy()
        with self._lock:
            for sub in subs:
                if sub in self._subscriptions:
                    self._unroute(sub)
            self._routes.ledger.trim()
            self._report = report
            self._closed = True
        if interrupted is not None:
            raise interrupted
        if self._pending_error is not None:
            self._raise_pending()
        return report

    def metrics(self) -> dict[str, SubscriberMetrics]:
        """Per subscriber (by name): delivered, dropped, failed, inbox high-water, latency,
        journal depth, replayed, retries, stalls."""
        return {sub.name: sub.metrics() for sub in list(self._history)}

    def __enter__(self) -> Bus:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- stop requests -----------------------------------------------------------------------

    def request_stop(self, reason: str, *, by: str = "") -> None:
        """Ask the run on this bus to stop: at the end of the update under way (the next turn
        boundary), with its normal final save and export; ``run_finished`` then has status
        ``stopped`` and ``reason``.  Callable from any thread, a subscriber's included; the
        first request wins, later ones are logged.

        :param reason: why, in words (it reaches ``run_finished`` and the trackers' run status).
        :param by: who asks (a subscriber's name), for the log.
        """
        request = StopRequested(reason=reason, by=by, time=time.time())
        with self._stop_lock:
            first = self._stop_request is None
            if first:
                self._stop_request = request
        who = f" by {by}" if by else ""
        if first:
            logger.info("Stop requested%s: %s", who, reason)
        else:
            logger.debug("Stop requested again%s (%s); the first request stands", who, reason)

    def _stop_by(self, reason: str, subscriber: str) -> None:
        """A subscriber returned ``StopRun(reason)``."""
        self.request_stop(reason, by=subscriber)

    @property
    def stop_request(self) -> StopRequested | None:
        """The first :meth:`request_stop` made on this bus and not yet taken, if any."""
        return self._stop_request

    def take_stop_request(self) -> StopRequested | None:
        """:attr:`stop_request`, cleared: the runner takes it as its run ends, so a later run
        on the same bus starts without it."""
        with self._stop_lock:
            request, self._stop_request = self._stop_request, None
        return request

    # -- failures ----------------------------------------------------------------------------

    def raise_later(self, subscriber: str, signal: str, error: BaseException) -> None:
        """Policy ``raise``: surface ``error`` on the producer's thread at its next call."""
        if self._pending_error is None:
            wrapped = SubscriberError(subscriber, signal, error)
            wrapped.__cause__ = error
            self._pending_error = wrapped

    def _on_fatal(self, name: str, error: BaseException) -> None:
        logger.critical("Subscriber %r raised %r; it is stopped.", name, error)
        if self._pending_error is None:
            self._pending_error = error

    def _raise_pending(self) -> None:
        error, self._pending_error = self._pending_error, None
        if error is not None:
            raise error

    def _refuse_from_dispatcher(self, what: str) -> None:
        if self._dispatcher.owns_current_thread():
            raise RuntimeError(f"Bus.{what}() called from a subscriber would wait for itself")
