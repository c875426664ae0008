"""SIGINT (Ctrl-C), SIGTERM and SIGHUP during a run: the first asks the run to stop cleanly,
the second aborts.

The handlers are in place from before the first step to the last byte the run writes (the
final save and export, the drain of the bus).  A first interrupt during training finishes the
current update, then saves, exports and drains; during the final save it lets the save finish,
and it ends the wait for subscribers that precedes the save (:meth:`StopRequest.skippable`),
which only serves the reward recorded with the checkpoint.  The second interrupt raises
:class:`Aborted` at once; checkpoints are written atomically, so whatever is on disk is
complete, and the runner says which files the interrupted save wrote.  Later interrupts, while the
abort waits for the file being written, are only logged: cutting that wait short would leave a
temporary file behind.

Exit codes of ``evtrain learn`` (docs/run-folder.md, "Exit codes and interrupts"): 0 when the run
ended with its final save complete, stopped by an interrupt or not; 1 when it failed; 2 for a usage
or configuration error; ``128 + signum`` after an abort (130 SIGINT, 143 SIGTERM, 129
SIGHUP).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

logger = logging.getLogger("evtrain")

HANDLED: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The interrupts a run handles (no SIGHUP on Windows)."""


class Aborted(KeyboardInterrupt):
    """The second interrupt of a run: it stops at once, without the rest of its final save.

    A ``KeyboardInterrupt``, so that code catching a Ctrl-C catches it too.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        """The interrupt that aborted."""
        name = signal.Signals(signum).name
        super().__init__(f"second {name}: aborting without the rest of the final save")

    @property
    def exit_code(self) -> int:
        """``128 + signum``, the shell's convention for a process ended by a signal."""
        return 128 + self.signum


class _WaitSkipped(BaseException):
    """Raised by the first interrupt inside :meth:`StopRequest.skippable` (a ``BaseException``,
    so that no ``except Exception`` on the way out of the wait swallows it)."""


class StopRequest:
    """Set by the first interrupt; the run loop polls :attr:`requested`."""

    def __init__(self) -> None:
        self.requested: str | None = None
        """Name of the interrupt that asked to stop, or ``None``."""
        self.phase = "training"
        """What the run is doing, for the message of the first interrupt: ``training``,
        ``saving`` (the final save) or ``closing`` (the drain)."""
        self.aborted = False
        """Whether a second interrupt came."""
        self._skippable = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.aborted:
            logger.warning(
                "%s received: already aborting, as soon as the file being written is complete.",
                name,
            )
            return
        if self.requested is not None:
            self.aborted = True
            logger.warning(
                "%s received again: aborting as soon as the file being written is complete.", name
            )
            raise Aborted(signum)
        self.requested = name
        logger.warning(_FIRST[self.phase], name)
        if self._skippable:
            self._skippable = False
            raise _WaitSkipped

    @contextmanager
    def skippable(self, what: str) -> Iterator[None]:
        """A wait that the first interrupt ends: the block is left at once, and the run goes on
        after it.  Nothing is skipped when the stop was requested before the block."""
        self._skippable = self.requested is None
        try:
            yield
        except _WaitSkipped:
            logger.info("Not waiting %s: a stop was requested.", what)
        finally:
            self._skippable = False


_FIRST = {
    "training": "%s received: finishing the current update, then saving and exporting. "
    "Send it again to abort at once.",
    "saving": "%s received during the final save: finishing it. Send it again to abort at once.",
    "closing": "%s received while the run closes: finishing the saves under way and the drain "
    "of the writers (at most bus.drain_timeout). Send it again to abort at once.",
}


@contextmanager
def stop_on_interrupts() -> Iterator[StopRequest]:
    """Install the handlers of :data:`HANDLED` for the duration of a run (main thread only;
    elsewhere the request simply never fires).

    An interrupt ignored when the run starts (``SIG_IGN``, inherited: ``nohup`` ignores SIGHUP, a
    shell script's ``&`` SIGINT) stays ignored: whoever started the process asked for that."""
    request = StopRequest()
    with handling(request._handle):
        yield request


@contextmanager
def handling(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for each of :data:`HANDLED` that the process does not ignore, for the
    duration of the block, the handlers of before put back after it (main thread only;
    elsewhere nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    for sig in HANDLED:
        if signal.getsignal(sig.value) is signal.SIG_IGN:  # nohup, or `&` in a script
            continue
        previous[sig.value] = signal.signal(sig.value, handler)
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)
