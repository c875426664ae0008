"""SIGTERM, SIGHUP and SIGINT (Ctrl-C) to a sweep process, from its start to its exit.

A trial's run installs its own handlers for the time it trains and saves
(:mod:`evtrain.run.interrupt`: the first interrupt stops the run after its current update, with
its final save; the second aborts).  Around them, for the whole command, the sweep's
handlers: the first interrupt asks the sweep to stop, so that no new trial starts, and a trial
that is about to start or has just ended its training (outside its run's handlers) is asked
to stop through its bus (:meth:`~evtrain.Bus.request_stop`, the run's stop at its next turn
boundary); the second raises :class:`~evtrain.run.interrupt.Aborted`, as the run's second
does.  The first process of a sweep passes each interrupt it handles on to its workers as a
SIGTERM (:attr:`SweepStop.on_interrupt`).

An interrupt the process ignores when the sweep starts stays ignored (SIGINT in a job that a
non-interactive shell started with ``&``, SIGHUP under ``nohup``).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from evtrain.bus import Bus
from evtrain.run.interrupt import Aborted, handling

logger = logging.getLogger("evtrain")

BY = "evtrain.sweep"
"""Who asks a trial's run to stop, in its log."""


class SweepStop:
    """Set by the first interrupt the sweep's handlers receive; the worker loop polls
    :attr:`requested`.

    :param on_interrupt: called with each interrupt's number first (the first process: the
        interrupt passed on to its workers).
    """

    def __init__(self, on_interrupt: Callable[[int], None] | None = None) -> None:
        self.on_interrupt = on_interrupt
        self.requested: str | None = None
        """Name of the interrupt that asked the sweep to stop, or ``None``."""
        self.aborted = False
        """Whether a second interrupt came."""
        self.bus: Bus | None = None
        """The bus of the trial this process runs, while it runs one."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.on_interrupt is not None:
            self.on_interrupt(signum)
        if self.aborted:
            logger.warning("%s received: already aborting.", name)
            return
        if self.requested is not None:
            self.aborted = True
            logger.warning("%s received again: aborting the sweep.", name)
            raise Aborted(signum)
        self.requested = name
        logger.warning(
            "%s received: stopping the sweep; no new trial starts, the trials under way stop "
            "with their final save. Send it again to abort at once.",
            name,
        )
        bus = self.bus
        if bus is not None:
            # Bus.request_stop takes a lock that this thread may hold where the interrupt came.
            reason = f"{name} received by the sweep"
            threading.Thread(target=bus.request_stop, args=(reason,), kwargs={"by": BY}).start()

    def run_stopped(self) -> None:
        """A trial's run stopped on an interrupt its own handlers took: the sweep stops as if its
        handlers had, and the next interrupt is the second."""
        if self.requested is None:
            self.requested = "a signal to a trial's run"

    def watch(self, bus: Bus) -> None:
        """Ask the trial on ``bus`` to stop when an interrupt came or comes while it runs."""
        self.bus = bus
        if self.requested is not None:
            bus.request_stop(f"{self.requested} received by the sweep", by=BY)


@contextmanager
def stop_on_interrupts(on_interrupt: Callable[[int], None] | None = None) -> Iterator[SweepStop]:
    """The sweep's handlers of :data:`~evtrain.run.interrupt.HANDLED` (each one the process
    does not ignore) for the duration of the block (main thread only)."""
    stop = SweepStop(on_interrupt)
    with handling(stop._handle):
        yield stop
