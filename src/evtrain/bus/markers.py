"""What passes through every inbox besides events, and who consumes which inbox.

A :class:`Marker` (a flush or a close) travels in FIFO order with the events, so when it
arrives everything emitted before it has been handled.  :func:`consumes` marks the thread that
delivers an inbox, so a handler emitting into its own full ``block`` inbox does not wait for
itself.
"""

from __future__ import annotations

import threading
from typing import Any

Item = tuple[float | None, Any]
"""``(emit time, payload)``; a ``None`` time marks a control :class:`Marker` instead."""


class Marker:
    """A control item (flush or close) that every inbox passes through in FIFO order."""

    __slots__ = ("_arrived", "_count", "_done", "close", "journaled")

    def __init__(self, count: int, *, close: bool = False, journaled: bool = False) -> None:
        self.close = close
        """After this marker the subscriber is closed and its task ends."""
        self.journaled = journaled
        """A flush that a failing or stalled spool subscriber passes once the events before
        it are in its journal (``Bus.flush(journaled=True)``)."""
        self._count = count
        self._arrived: set[int] = set()
        self._done = threading.Condition()

    def arrive(self, inbox: object) -> None:
        """``inbox`` has handled everything up to and including this marker.  Idempotent per
        inbox, so a consumer that dies mid-batch can release every marker it held."""
        with self._done:
            self._arrived.add(id(inbox))
            if len(self._arrived) >= self._count:
                self._done.notify_all()

    def wait(self, timeout: float | None) -> bool:
        """Block until every inbox arrived; ``False`` on timeout."""
        with self._done:
            return self._done.wait_for(lambda: len(self._arrived) >= self._count, timeout)


class _Consumer(threading.local):
    inbox: object = None
    """The inbox this thread delivers from, or :data:`EVERY_INBOX` on the dispatcher's loop."""


_consumer = _Consumer()

EVERY_INBOX = object()
"""The dispatcher loop's mark: it delivers every async subscriber's events and takes every
inbox, so a wait of its own on any full inbox could wait for itself."""


def consumes(inbox: object) -> None:
    """Mark the calling thread as the one that delivers ``inbox``'s events (a sync subscriber's
    worker; :data:`EVERY_INBOX` for the loop): an ``emit`` from its handler into that full
    ``block`` inbox overfills it instead of waiting for itself."""
    _consumer.inbox = inbox


def consumer() -> object:
    """The inbox the calling thread delivers from (:func:`consumes`); ``None`` if none."""
    return _consumer.inbox
