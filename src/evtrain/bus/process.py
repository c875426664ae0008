"""Process isolation: a subscriber that runs in a child process, restarted when it fails.

``isolation="process"`` (``connect``, or ``bus.subscribers.<name>.isolation`` in the options)
wraps the subscriber in a :class:`ProcessSubscriber`: a sync callable the bus delivers to like
any other, on the subscriber's own worker thread, which hands each event to a child process and
keeps it in a bounded *window* until the child acknowledges it.  A tracker client that holds the
GIL, leaks, or crashes in a C extension then costs the trainer nothing but that window.

- **Bounded**: at most ``window`` events are unacknowledged; the delivery thread waits for the
  child beyond that, and the subscriber's inbox (with its ``overflow`` policy) takes the rest.
- **Restarted**: a child that exits (a crash, ``kill -9``), makes no progress for
  ``hang_timeout`` seconds while events wait, or grows past ``max_rss_bytes`` (it checks its own
  resident memory after each event, and exits once the event is acknowledged) is killed and a
  new one started from the same pickled subscriber; the window is sent again, in order.
- **At least once, not exactly once**: an event the old child handled but whose acknowledgement
  it did not send before it died is handled again by the new one.  A ``spool`` subscriber's
  window is one event: its journal acknowledges an event only once the child has, so after a
  crash of the whole trainer its journal replays what no child acknowledged.
- **Importable**: the child is started with the ``spawn`` method (never ``fork``: the trainer
  has threads and torch), so it rebuilds the subscriber from a pickle.  A module-level function
  or class instance, or a writer an entry point made, qualifies; a lambda, a nested function, an
  ``async`` subscriber, or an object holding a lock or an open file does not, and ``connect``
  refuses it with a ``TypeError`` saying so.  The child starts from the subscriber as it was at
  ``connect``: state it gains later (``StatsWriter.on_connect``) lives in the parent's copy only.

An exception the subscriber raises in the child is raised in the parent as a
:class:`~evtrain.errors.SubscriberProcessError`, by the call (or flush) that finds its report:
the bus's failure policy applies to it as to any subscriber's.  A
:class:`~evtrain.events.payloads.StopRun` it returns comes back with the event's
acknowledgement and is returned by the parent's call that reads it (that event's call, the
next one's when the window let it run ahead, or a flush's): the bus then asks the run to stop.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from typing import Any

import attrs

from evtrain.bus.inbox import SubscriberSettings
from evtrain.errors import SubscriberProcessError
from evtrain.events.payloads import StopRun

logger = logging.getLogger("evtrain.bus")

EVENT, FLUSH, CLOSE, READY = "event", "flush", "close", "ready"
LEAK_EXIT = 86
"""The child's exit code when it left because it grew past ``max_rss_bytes``."""
POLL_S = 0.05
"""How often a waiting parent looks at its child's health."""
PARENT_CHECK_S = 1.0
"""How often an idle child looks whether its parent still lives."""


@attrs.frozen(kw_only=True)
class ProcessLimits:
    """When a child is restarted, and how far it may fall behind."""

    window: int = 256
    """Most events sent to the child and not yet acknowledged."""
    hang_timeout: float = 60.0
    """Seconds without an acknowledgement, while events wait, after which the child is hung."""
    max_rss_bytes: int | None = None
    """Resident memory past which the child restarts; ``None``: no limit."""
    start_timeout: float = 120.0
    """Seconds a new child may take to import the subscriber's modules and report ready."""


def pickled(subscriber: object, name: str) -> bytes:
    """The subscriber as the child will rebuild it.

    :raises TypeError: it cannot run in a child process (see the module's docstring)."""
    call = getattr(subscriber, "__call__", None)  # noqa: B004 - we need the method itself
    if inspect.iscoroutinefunction(subscriber) or inspect.iscoroutinefunction(call):
        raise TypeError(
            f"subscriber {name!r} is async; isolation='process' runs sync subscribers only. "
            "Use a sync function or class, or isolation='thread'."
        )
    qualname = getattr(subscriber, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"subscriber {name!r} ({qualname}) cannot run in a child process: the child imports "
            "it by name, and a lambda or nested function has none. Define it at module level."
        )
    try:
        return pickle.dumps(subscriber)
    except Exception as error:
        raise TypeError(
            f"subscriber {name!r} cannot run in a child process: it cannot be pickled "
            f"({type(error).__name__}: {error}). Use a module-level function or class whose "
            "instances hold plain values (open files and clients in its first call)."
        ) from None


def limits(settings: SubscriberSettings) -> ProcessLimits:
    """The limits a subscriber's settings ask for; the defaults for those they leave unset."""
    default = ProcessLimits()
    return ProcessLimits(
        window=default.window,
        hang_timeout=settings.hang_timeout or default.hang_timeout,
        max_rss_bytes=settings.max_rss_bytes,
    )


def _rss() -> int:
    """This process's resident memory in bytes (Linux; 0 where unknown)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _hook(subscriber: Any, kind: str) -> None:
    fn = getattr(subscriber, kind, None)
    if callable(fn):
        fn()


def child_main(data: bytes, events: Queue[Any], acks: Connection, max_rss: int | None) -> None:
    """The child: rebuild the subscriber, then handle and acknowledge messages in order.

    Ctrl-C reaches the whole process group: the trainer decides when its child ends, so the
    child ignores it.  A trainer killed outright cannot tell it: it ends when its parent has."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    # ``data`` is what this child's parent pickled from its own live subscriber
    # (:func:`pickled`), handed over in memory at spawn: never read from a file.
    subscriber = pickle.loads(data)
    acks.send((READY, os.getpid(), None))
    while True:
        try:
            kind, seq, payload = events.get(timeout=PARENT_CHECK_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        error = stop = None
        try:
            if kind == EVENT:
                result = subscriber(payload)
                stop = result.reason if type(result) is StopRun else None
            else:
                _hook(subscriber, kind)
        except Exception as exc:  # reported to the parent, whose failure policy applies
            error = f"{type(exc).__name__}: {exc}"
        acks.send((seq, error, stop))
        if kind == CLOSE:
            return
        if max_rss is not None and _rss() > max_rss:
            os._exit(LEAK_EXIT)


class ProcessSubscriber:
    """The parent's side: a sync subscriber (with ``flush``/``close`` hooks) that delivers to a
    child process.  Used by one thread at a time, the subscriber's worker."""

    def __init__(self, data: bytes, name: str, limits: ProcessLimits, *, ack_each: bool) -> None:
        self.name = name
        self.limits = limits
        self._data = data
        self._most = 0 if ack_each else limits.window - 1
        """Unacknowledged events a call may leave behind: 0 for a spool subscriber."""
        self._context = multiprocessing.get_context("spawn")
        self._window: dict[int, tuple[str, Any]] = {}
        """Sent, not acknowledged, by seq (insertion order is seq order)."""
        self._seq = 0
        self._error: str | None = None
        self._stop: str | None = None
        """The reason of a ``StopRun`` the child's subscriber returned, not yet passed on."""
        self.restarts = 0
        """Children started after the first one."""
        self.pid = 0
        """The running child's pid, once it reported ready."""
        self._started = False
        """A child is started with the first event: none for a subscriber never called, nor
        for one whose ``connect`` failed after this was made."""

    def _start(self) -> None:
        self._started = True
        context = self._context
        self._events: Queue[Any] = context.Queue()
        self._acks, writer = context.Pipe(duplex=False)
        self._child = context.Process(
            target=child_main,
            args=(self._data, self._events, writer, self.limits.max_rss_bytes),
            name=f"evtrain-subscriber[{self.name}]",
            daemon=True,
        )
        self._child.start()
        writer.close()
        self._ready = False
        self._progress = time.monotonic()
        for seq, (kind, payload) in self._window.items():
            self._events.put((kind, seq, payload))

    def _send(self, kind: str, payload: Any = None) -> None:
        if not self._started:
            self._start()
        if not self._window:  # an idle child's silence was no hang: time it from now
            self._progress = time.monotonic()
        self._seq += 1
        self._window[self._seq] = (kind, payload)
        self._events.put((kind, self._seq, payload))

    def __call__(self, payload: Any) -> StopRun | None:
        """Send ``payload``; the ``StopRun`` the child's subscriber returned for an event, if
        any came back since the last call (the acknowledgements of a window of events
        arrive later: with the next event at the latest)."""
        self._send(EVENT, payload)
        self._wait(self._most)
        return self._stop_run()

    def _stop_run(self) -> StopRun | None:
        if self._stop is None:
            return None
        stop, self._stop = self._stop, None
        return StopRun(stop)

    def flush(self) -> StopRun | None:
        """The child flushed everything sent before (restarts included); a ``StopRun`` it
        returned for one of those events and no call passed on yet."""
        if not self._started:
            return None
        self._send(FLUSH)
        self._wait(0)
        return self._stop_run()

    def close(self) -> None:
        """Flush, close the subscriber in the child, and let the child end."""
        if not self._started:
            return
        self._send(CLOSE)
        try:
            self._wait(0)
        finally:
            self._child.join(self.limits.start_timeout)
            if self._child.is_alive():
                self._child.kill()
            self._events.close()
            self._acks.close()

    def _wait(self, most: int) -> None:
        """Until at most ``most`` are unacknowledged, restarting the child when it fails.

        :raises SubscriberProcessError: the subscriber raised in the child."""
        self._read(0.0)
        while len(self._window) > most:
            self._read(POLL_S)
            if len(self._window) > most:
                self._check()
        if self._error is not None:
            error, self._error = self._error, None
            raise SubscriberProcessError(self.name, error)

    def _read(self, timeout: float) -> None:
        """Take every acknowledgement there is, waiting up to ``timeout`` for the first."""
        acks = self._acks
        try:
            while acks.poll(timeout):
                timeout = 0.0
                seq, error, stop = acks.recv()
                self._progress = time.monotonic()
                if seq == READY:
                    self._ready, self.pid = True, error
                    logger.info("Subscriber %r runs in process %d.", self.name, error)
                    continue
                self._window.pop(seq, None)
                if stop is not None and self._stop is None:
                    self._stop = stop
                if error is not None and self._error is None:
                    self._error = error
        except (EOFError, OSError):  # the child is gone; _check restarts it
            return

    def _check(self) -> None:
        """Restart a child that exited, hung or grew too big."""
        child = self._child
        if child.is_alive():
            limit = self.limits.hang_timeout if self._ready else self.limits.start_timeout
            if time.monotonic() - self._progress < limit:
                return
            reason = f"made no progress in {limit:g} s"
            child.kill()
            child.join()
        else:
            child.join()
            self._read(0.0)  # what it acknowledged before it went
            code = child.exitcode
            reason = (
                f"grew past max_rss_bytes ({self.limits.max_rss_bytes})"
                if code == LEAK_EXIT
                else f"exited with code {code}"
            )
        self._events.cancel_join_thread()
        self._events.close()
        self._acks.close()
        self.restarts += 1
        logger.warning(
            "Subscriber %r's process %s %s; restarting it and sending its %d unacknowledged "
            "events again.",
            self.name,
            child.pid,
            reason,
            sum(1 for kind, _ in self._window.values() if kind == EVENT),
        )
        self._start()


def isolate(
    subscriber: Callable[[Any], Any], name: str, limits: ProcessLimits, *, ack_each: bool
) -> tuple[ProcessSubscriber, dict[str, Callable[[], Any]]]:
    """``subscriber`` running in a child process, and the hooks the bus calls on it.

    :raises TypeError: it cannot run in a child process."""
    wrapper = ProcessSubscriber(pickled(subscriber, name), name, limits, ack_each=ack_each)
    return wrapper, {"flush": wrapper.flush, "close": wrapper.close}
