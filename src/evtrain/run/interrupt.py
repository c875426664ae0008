"""Ctrl-C and SIGTERM during a run: the first asks the run to stop cleanly, the second aborts.

A clean stop finishes the current update, saves and exports, drains the bus and exits 0.  The
second signal raises ``KeyboardInterrupt`` at once; checkpoints are written atomically, so
whatever is on disk is complete.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

logger = logging.getLogger("evtrain")


class StopRequest:
    """Set by the first SIGINT/SIGTERM; the run loop polls :attr:`requested`."""

    def __init__(self) -> None:
        self.requested: str | None = None
        """Name of the signal that asked to stop, or ``None``."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise KeyboardInterrupt(f"second {name}: aborting without the final save")
        self.requested = name
        logger.warning(
            "%s received: finishing the current update, then saving and exporting. "
            "Send it again to abort at once.",
            name,
        )


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Install the handlers for the duration of a run (main thread only; elsewhere the
    request simply never fires)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT.value, signal.SIGTERM.value):
        previous[sig] = signal.signal(sig, request._handle)
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
