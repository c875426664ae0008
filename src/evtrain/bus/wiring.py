"""How subscribers get onto a bus and off it: ``connect`` (and its forms ``on`` and
``add_writer``) resolves a subscriber's settings — the options' override first, then what
``connect`` was given, then the bus's defaults — makes its inbox (a spool subscriber's opens its
journal, :mod:`evtrain.bus.journals`), starts its task and routes it; ``disconnect`` unroutes it,
delivers what was queued for it, and closes it.

:class:`Wiring` is that half of :class:`~evtrain.bus.bus.Bus`, which inherits it: the other
half, ``emit``, ``flush`` and ``close``, reads the routes this one keeps.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from evtrain.bus.closing import Deadline, pass_close_marker, pass_marker
from evtrain.bus.dispatch import Dispatcher
from evtrain.bus.filters import RankFilter
from evtrain.bus.inbox import Inbox, Isolation, Overflow, SubscriberSettings, default_key
from evtrain.bus.journals import JournalPlaces
from evtrain.bus.log_inbox import LogInbox
from evtrain.bus.process import isolate, limits
from evtrain.bus.routes import ANY, Routes
from evtrain.bus.spool import AnyInbox, SpoolInbox
from evtrain.bus.stalls import watch_full_inbox
from evtrain.bus.subscription import (
    SubscriberMetrics,
    Subscription,
    SubscriptionHandle,
    check_signature,
    is_async_callable,
    subscriber_name,
)
from evtrain.bus.writers import StatsWriter, WriterAdapter
from evtrain.errors import BusClosedError, BusTimeoutError
from evtrain.events.signals import WRITER_SIGNALS, EventSignal

F = TypeVar("F", bound=Callable[..., Any])


class Wiring:
    """The subscriptions of a bus: who is connected, under which unique name, with which inbox,
    routed how.  Mixed into :class:`~evtrain.bus.bus.Bus`, whose ``__init__`` calls
    :meth:`_init_wiring`; it reads these of the bus:"""

    rank: int
    capacity: int
    overflow: Overflow
    stall_timeout: float
    block_timeout: float
    drain_timeout: float
    journal_max_bytes: int
    _dispatcher: Dispatcher
    _open: bool
    emit_internal: Callable[[Any], None]
    metrics: Callable[[], dict[str, SubscriberMetrics]]

    def _init_wiring(
        self,
        journal_dir: Path | None,
        journal_fsync_s: float,
        subscribers: Mapping[str, SubscriberSettings] | None,
    ) -> None:
        self._journals = JournalPlaces(journal_dir, journal_fsync_s, self.rank)
        self._overrides = dict(subscribers or {})
        self._routes = Routes()
        self._lock = threading.RLock()
        self._subscriptions: list[Subscription] = []
        self._history: list[Subscription] = []
        """Every subscription this bus ever had, for ``metrics()`` after disconnect or close."""
        self._names: set[str] = set()

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """Current subscriptions (internal records; use ``metrics()`` for numbers)."""
        return tuple(self._subscriptions)

    def connect(
        self,
        signal: EventSignal[Any] | Iterable[EventSignal[Any]],
        subscriber: Callable[[Any], Any],
        *,
        sender: Any = ANY,
        ranks: Iterable[int] | None = None,
        capacity: int | None = None,
        overflow: Overflow | str | None = None,
        name: str | None = None,
        key: Callable[[Any], Hashable] = default_key,
        stall_timeout: float | None = None,
        journal_dir: str | os.PathLike[str] | None = None,
        block_timeout: float | None = None,
        capacity_bytes: int | None = None,
        isolation: Isolation | str | None = None,
    ) -> SubscriptionHandle:
        """Deliver events of ``signal`` (one or several) to ``subscriber``.

        ``subscriber`` is called with one payload: a sync callable runs on its own worker thread,
        an ``async def`` (or an object with an async ``__call__``) is awaited on the dispatcher
        loop.  It is held strongly, so a lambda keeps working.  ``sender`` restricts delivery to
        one behavior; ``ranks`` connects it only on those ranks (elsewhere the handle is inert
        and emit pays nothing); ``capacity``/``overflow``/``stall_timeout``/``block_timeout``
        override the bus defaults; ``capacity_bytes`` bounds the inbox in bytes too;
        ``isolation="process"`` runs it in a child process (:mod:`evtrain.bus.process`);
        ``key`` groups events for ``overflow="latest"``.  A ``spool``
        subscriber opens its journal here (under ``journal_dir``, default the bus's) and, if an
        earlier bus left events in it undelivered, receives those first.

        :raises TypeError: ``subscriber`` cannot be called with a single payload.
        :raises BusClosedError: the bus is closing or closed.
        :raises JournalInUseError: a spool subscriber's journal is open in another bus.
        """
        signals = (signal,) if isinstance(signal, EventSignal) else tuple(signal)
        if isinstance(subscriber, RankFilter):
            ranks = subscriber.ranks if ranks is None else ranks
            subscriber = subscriber.subscriber
        label = name or subscriber_name(subscriber)
        if not isinstance(subscriber, WriterAdapter):
            check_signature(subscriber, label)
        hooks = {
            hook: fn
            for hook in ("flush", "close", "probe")
            if callable(fn := getattr(subscriber, hook, None))
        }
        settings = _settings(
            capacity=capacity,
            overflow=None if overflow is None else Overflow(overflow),
            stall_timeout=stall_timeout,
            block_timeout=block_timeout,
            capacity_bytes=capacity_bytes,
            isolation=None if isolation is None else Isolation(isolation),
        )
        return self._subscribe(
            signals, subscriber, sender, ranks, settings, label, key, hooks, journal_dir
        )

    def on(
        self, signal: EventSignal[Any] | Iterable[EventSignal[Any]], **options: Any
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`connect`; returns the function unchanged."""

        def decorate(fn: F) -> F:
            self.connect(signal, fn, **options)
            return fn

        return decorate

    def add_writer(self, writer: StatsWriter, **options: Any) -> SubscriptionHandle:
        """Connect a :class:`StatsWriter` to the run's lifecycle: ``run_started``,
        ``hyperparameters``, ``stats``, ``save``, ``export`` and ``run_finished``.

        They share one inbox, so the writer sees them in emission order on one thread.
        ``bus.flush()`` calls its ``flush()``, ``bus.close()`` its ``close()``.  Unless given,
        ``ranks=`` and ``overflow=`` are the writer's own attributes.
        """
        adapter = WriterAdapter(writer)
        options.setdefault("ranks", writer.ranks)
        options.setdefault("name", subscriber_name(writer))
        if writer.overflow is not None:
            options.setdefault("overflow", writer.overflow)
        stall_timeout = getattr(writer, "stall_timeout", None)
        if stall_timeout is not None:  # below its request timeout: a hang shows as a stall
            options.setdefault("stall_timeout", min(stall_timeout, self.stall_timeout))
        handle = self.connect(WRITER_SIGNALS, adapter, **options)
        if handle.active:
            writer.on_connect(self)
        return handle

    def _subscribe(
        self,
        signals: tuple[EventSignal[Any], ...],
        subscriber: Callable[[Any], Any],
        sender: Any,
        ranks: Iterable[int] | None,
        given: SubscriberSettings,
        label: str,
        key: Callable[[Any], Hashable],
        hooks: dict[str, Callable[[], Any]],
        journal_dir: str | os.PathLike[str] | None = None,
    ) -> SubscriptionHandle:
        if not signals or not all(isinstance(s, EventSignal) for s in signals):
            raise TypeError(f"connect() needs evtrain signals, got {signals!r}")
        if ranks is not None and self.rank not in frozenset(ranks):
            return SubscriptionHandle(self, None)
        override = self._overrides.get(label) or SubscriberSettings()
        capacity = override.capacity or given.capacity or self.capacity
        overflow = override.overflow or given.overflow or self.overflow
        stall_timeout = override.stall_timeout or given.stall_timeout or self.stall_timeout
        block_timeout = override.block_timeout or given.block_timeout or self.block_timeout
        max_bytes = override.journal_max_bytes or self.journal_max_bytes
        capacity_bytes = override.capacity_bytes or given.capacity_bytes
        if (override.isolation or given.isolation) is Isolation.PROCESS:
            spool = overflow is Overflow.SPOOL
            subscriber, hooks = isolate(subscriber, label, limits(override), ack_each=spool)
        with self._lock:
            if not self._open:
                raise BusClosedError("cannot connect: the bus is closing or closed")
            unique = label
            n = 1
            while unique in self._names:
                n += 1
                unique = f"{label}#{n}"
            inbox: AnyInbox
            if overflow is Overflow.SPOOL:
                journal = self._journals.open(unique, max_bytes, journal_dir)
                inbox = SpoolInbox(capacity, journal, capacity_bytes)
            elif overflow is Overflow.BLOCK and capacity_bytes is None:  # the shared log
                inbox = LogInbox(self._routes.ledger, capacity, block_timeout)
            else:
                inbox = Inbox(capacity, overflow, key, block_timeout, capacity_bytes)
            self._names.add(unique)
            sub = Subscription(
                name=unique,
                signals=signals,
                sender=sender,
                call=subscriber,
                is_async=is_async_callable(subscriber),
                inbox=inbox,
                hooks=hooks,
                stall_timeout=stall_timeout,
            )
            watch_full_inbox(sub, self.emit_internal)
            self._dispatcher.start()
            self._dispatcher.spawn(sub)
            self._routes.add(sub)
            self._subscriptions.append(sub)
            self._history.append(sub)
        return SubscriptionHandle(self, sub)

    def has_receivers(self, signal: EventSignal[Any], sender: Any = ANY) -> bool:
        """Whether ``emit`` on ``signal`` from ``sender`` would reach anyone (so producers can
        skip building payloads)."""
        return bool(self._routes.lookup(signal, sender))

    def disconnect_subscription(self, sub: Subscription, timeout: float | None = None) -> None:
        """Used by :meth:`SubscriptionHandle.disconnect`."""
        with self._lock:
            if sub not in self._subscriptions:
                return
            self._unroute(sub)
        # From inside the dispatcher, waiting would wait for itself: the marker does the rest.
        inside = self._dispatcher.owns_current_thread()
        timeout = self.drain_timeout if timeout is None else timeout
        if inside:
            pass_marker([sub], 0.0, close=True)
            return
        if pass_close_marker([sub], Deadline(timeout)):
            # A spool sink plainly down: its events stay in its journal, for a later bus.
            sub.abandon()
            left = sub.inbox.left if isinstance(sub.inbox, SpoolInbox) else 0
            raise BusTimeoutError(
                f"subscriber {sub.name!r} gave up: its sink is down; {left} events are kept "
                "in its journal",
                [sub.name],
            )
        if not sub.finished:
            raise BusTimeoutError(
                f"subscriber {sub.name!r} did not finish within {timeout}s", [sub.name]
            )

    def _unroute(self, sub: Subscription) -> None:
        self._routes.remove(sub)
        self._subscriptions.remove(sub)


def _settings(**given: Any) -> SubscriberSettings:
    """``connect()``'s options as :class:`SubscriberSettings`.

    :raises ValueError: one is out of range, named as the config's problem lines name it.
    """
    try:
        return SubscriberSettings(**given)
    except ValueError as bad:
        if len(bad.args) != 2 or not isinstance(bad.args[1], attrs.Attribute):
            raise
        raise ValueError(f"{bad.args[1].name}: {bad.args[0]}") from None
