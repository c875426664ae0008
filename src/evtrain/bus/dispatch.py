"""The dispatcher: one anyio event loop on a daemon thread, one task per subscriber.

A subscriber's task takes its whole inbox at once and delivers the batch: async subscribers are
awaited on the loop, sync ones run on the subscriber's own daemon :class:`Worker` thread, so a
slow or blocking subscriber delays nobody else.  Own daemon threads (not anyio's worker pool,
whose threads are non-daemon) let the interpreter reach ``atexit``, where unclosed buses drain.

Waking the loop from another thread costs ~13 µs (``call_soon_threadsafe``) against ~0.05 µs
for the append itself, so producers do not wake it per event.  An idle task first polls its
inbox with a growing interval (:data:`POLL_MIN_S` doubling to :data:`POLL_MAX_S`); only after
:data:`DEEP_SLEEP_AFTER_S` without events does it sleep until woken, and only then does the next
``emit`` pay for a wake-up.  Flush and close markers always wake it.

A ``spool`` subscriber's task takes from its :class:`~evtrain.bus.spool.SpoolInbox` the same
way; replays from its journal are read by the delivery itself, on the worker thread (on the
loop for an async subscriber).  One watchdog task polls every :data:`WATCH_EVERY_S` for a call
that has run longer than its subscriber's ``stall_timeout``, and reports it once
(``subscriber_stalled``) — no thread per subscriber.

The dispatcher keeps what belongs to a task — its worker thread, whether it has ended — and
changes a subscription only through its methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable

import anyio

from evtrain.bus.delivery import FailureContext, deliver, deliver_async
from evtrain.bus.inbox import EVERY_INBOX, Item, Marker, consumes
from evtrain.bus.spool import AnyInbox, SpoolInbox, SpoolItem
from evtrain.bus.spool_delivery import deliver_spool, deliver_spool_sync
from evtrain.bus.subscription import Subscription
from evtrain.events.payloads import SubscriberStalled

logger = logging.getLogger("evtrain.bus")

POLL_MIN_S = 0.0005
POLL_MAX_S = 0.02
DEEP_SLEEP_AFTER_S = 0.25
WATCH_EVERY_S = 0.1
"""How often the watchdog looks for stalled calls."""


class Worker(threading.Thread):
    """A daemon thread that runs one sync subscriber's batches, one at a time."""

    def __init__(self, name: str, inbox: AnyInbox) -> None:
        super().__init__(name=f"evtrain-subscriber[{name}]", daemon=True)
        self._inbox = inbox
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], Callable[..., None]] | None]
        self._jobs = queue.SimpleQueue()

    def submit(self, job: Callable[[], None], done: Callable[..., None]) -> None:
        """Run ``job`` (the delivery of one batch), then ``done(error or None)``."""
        self._jobs.put((job, done))

    def stop(self) -> None:
        self._jobs.put(None)

    def run(self) -> None:
        consumes(self._inbox)
        while (job := self._jobs.get()) is not None:
            deliver_batch, done = job
            del job
            error = _attempt(deliver_batch)
            # The batch goes before done() lets the dispatcher on: a closed bus keeps no event.
            del deliver_batch
            done(error)


def _attempt(job: Callable[[], None]) -> BaseException | None:
    """Run ``job``; what escaped it, for the dispatcher to re-raise."""
    try:
        job()
    except BaseException as error:
        return error
    return None


class _Task:
    """What the dispatcher keeps per subscriber task."""

    __slots__ = ("ended", "worker")

    def __init__(self, worker: Worker | None) -> None:
        self.worker = worker
        """The sync subscriber's thread; ``None`` for an async one."""
        self.ended = threading.Event()


class Dispatcher:
    """Owns the loop thread; ``start`` it, ``spawn`` subscriber tasks, ``stop`` it.

    :param on_fatal: called with a subscriber's name and the ``BaseException`` that ended its
        task (the subscription is already finished).
    :param failures: handed to every delivery, for the isolation wrapper.
    """

    def __init__(
        self, on_fatal: Callable[[str, BaseException], None], failures: FailureContext
    ) -> None:
        self._on_fatal = on_fatal
        self._failures = failures
        self._tasks: dict[Subscription, _Task] = {}
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: anyio.Event | None = None
        self._spawn: Callable[[Subscription], None] | None = None
        self._context: contextvars.Context | None = None
        """The loop's own context: callbacks from other threads run in it, where anyio knows
        its backend (with sniffio installed, anyio asks it, and sniffio reads a context
        variable that only the loop's context has)."""

    def owns_current_thread(self) -> bool:
        """Whether the caller runs on the loop or on a live subscriber's worker thread (where
        waiting for subscribers would wait for itself)."""
        ident = threading.get_ident()
        if self._thread is not None and ident == self._thread.ident:
            return True
        tasks = tuple(self._tasks.values())
        return any(t.worker is not None and t.worker.ident == ident for t in tasks)

    def wait_ended(self, sub: Subscription, timeout: float | None) -> bool:
        """Block until ``sub``'s task has ended; ``False`` on timeout."""
        return self._tasks[sub].ended.wait(timeout)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=anyio.run, args=(self._main,), name="evtrain-dispatcher", daemon=True
        )
        self._thread.start()
        self._ready.wait()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        consumes(EVERY_INBOX)
        self._context = contextvars.copy_context()
        self._stop_event = anyio.Event()
        async with anyio.create_task_group() as tg:

            def spawn(sub: Subscription) -> None:
                tg.start_soon(self._run, sub, name=f"evtrain-subscriber[{sub.name}]")

            self._spawn = spawn
            tg.start_soon(self._watch, name="evtrain-watchdog")
            self._ready.set()
            await self._stop_event.wait()
            tg.cancel_scope.cancel()

    def spawn(self, sub: Subscription) -> None:
        """Start delivering to ``sub`` (from any thread but the loop's)."""
        assert self._loop is not None and self._spawn is not None
        task = self._tasks[sub] = _Task(None if sub.is_async else Worker(sub.name, sub.inbox))
        if task.worker is not None:
            task.worker.start()
        self._loop.call_soon_threadsafe(self._spawn, sub, context=self._context)

    def stop(self, timeout: float | None = None) -> None:
        """Cancel every remaining task and end the loop thread."""
        if self._thread is None or self._loop is None or self._stop_event is None:
            return
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(timeout)

    async def _run(self, sub: Subscription) -> None:
        task = self._tasks[sub]
        inbox = sub.inbox
        idle = _Idle(inbox)
        batch: list[Item] | list[SpoolItem] = []
        try:
            while not sub.finished:
                if isinstance(inbox, SpoolInbox):
                    if inbox.abandoned:
                        break
                    batch = spooled = inbox.take()
                    if spooled:
                        idle.reset()
                        if task.worker is None:
                            await deliver_spool(sub, inbox, spooled, self._failures)
                        else:
                            job = functools.partial(
                                deliver_spool_sync, sub, inbox, spooled, self._failures
                            )
                            await _on_worker(task.worker, job)
                        continue
                else:
                    batch = queued = inbox.take()
                    if queued:
                        idle.reset()
                        if task.worker is None:
                            await deliver_async(sub, queued, self._failures)
                        else:
                            job = functools.partial(deliver, sub, queued, self._failures)
                            await _on_worker(task.worker, job)
                        continue
                await idle.wait()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:  # not swallowed: re-raised on the producer's thread
            sub.finish()
            self._on_fatal(sub.name, error)
            for item in batch:  # markers of the interrupted batch must not be waited for
                if isinstance(item, Marker):
                    item.arrive(inbox)
                elif isinstance(item, tuple) and isinstance(item[1], Marker):
                    item[1].arrive(inbox)
        finally:
            sub.finish()
            sub.abandon()
            if task.worker is not None:
                task.worker.stop()
                task.worker = None  # its ident may be reused by a later thread
            task.ended.set()

    async def _watch(self) -> None:
        """The stall watchdog: report each call that outlived its ``stall_timeout``, once."""
        while True:
            await anyio.sleep(WATCH_EVERY_S)
            now = time.perf_counter()
            for sub in list(self._tasks):
                started = sub.busy_since
                if started and now - started >= sub.stall_timeout and sub.notice_stall(started):
                    self._stalled(sub, now - started)

    def _stalled(self, sub: Subscription, seconds: float) -> None:
        what = sub.busy_with
        signal = what if isinstance(what, str) else sub.signal_name(what)
        spool = isinstance(sub.inbox, SpoolInbox)
        logger.warning(
            "Subscriber %r has been handling %r for %.1f s (stall_timeout %g s)%s.",
            sub.name,
            signal,
            seconds,
            sub.stall_timeout,
            "; its later events wait in its journal" if spool else "",
        )
        if not isinstance(what, SubscriberStalled):
            self._failures.report_stall(
                SubscriberStalled(
                    subscriber=sub.name,
                    signal=signal,
                    seconds=seconds,
                    stall_timeout=sub.stall_timeout,
                    spool=spool,
                )
            )


class _Idle:
    """How a subscriber's task waits for its inbox: polls with a growing interval, then sleeps
    until a producer wakes it (see the module docstring)."""

    def __init__(self, inbox: AnyInbox) -> None:
        loop = asyncio.get_running_loop()
        self._inbox = inbox
        self._wake = anyio.Event()
        self.reset()

        def set_wake() -> None:
            self._wake.set()

        def waker() -> None:
            loop.call_soon_threadsafe(set_wake)

        inbox.waker = waker

    def reset(self) -> None:
        """Events came: poll fast again."""
        self._interval, self._idle = POLL_MIN_S, 0.0

    async def wait(self) -> None:
        inbox = self._inbox
        self._wake = anyio.Event()
        if self._idle < DEEP_SLEEP_AFTER_S:
            with anyio.move_on_after(self._interval):
                await self._wake.wait()
            self._idle += self._interval
            self._interval = min(self._interval * 2, POLL_MAX_S)
            return
        inbox.sleeping = True
        if len(inbox):  # an event slipped in between take() and sleeping = True
            inbox.sleeping = False
            return
        await self._wake.wait()
        self.reset()


async def _on_worker(worker: Worker, job: Callable[[], None]) -> None:
    """Run ``job`` on the sync subscriber's ``worker`` thread; re-raise what escaped it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    def done(error: BaseException | None) -> None:
        # RuntimeError: the loop closed while the subscriber ran; nobody waits any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, error)

    worker.submit(job, done)
    await future
