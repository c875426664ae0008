"""A run's side of the bus: the flushes a save waits for, and the drain when the run ends.

Every wait here is bounded by ``bus.drain_timeout``, whatever a subscriber does; who was still
behind is logged (and, for the run's own bus, in its close report).
"""

from __future__ import annotations

import logging

from evtrain.bus import Bus
from evtrain.bus.closing import Deadline
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.errors import BusClosedError, BusTimeoutError
from evtrain.events import signals
from evtrain.events.payloads import RunFinished

logger = logging.getLogger("evtrain")


class RunBus:
    """The bus a run reports on, as the run uses it.

    :param own: the run made ``bus`` and closes it; otherwise it only detaches from it what it
        connected (:attr:`handles`).
    :param drain_timeout: ``bus.drain_timeout``: the longest any wait here lasts.
    """

    def __init__(self, bus: Bus, *, own: bool, drain_timeout: float) -> None:
        self.bus = bus
        self.own = own
        self.drain_timeout = drain_timeout
        self.handles: list[SubscriptionHandle] = []
        """What the run connected to the bus."""
        self.journaled: dict[str, int] = {}
        """Per tracker writer that did not take everything by the end: the events kept in
        its journal (the CLI's last line says ``evtrain sync RUN_ID``)."""

    def deadline(self) -> Deadline:
        """``bus.drain_timeout`` from now."""
        return Deadline(self.drain_timeout)

    def flush(self, deadline: Deadline, when: str, journaled: bool = False) -> None:
        """Flush within ``deadline``; ``journaled``: a tracker that is down counts as done
        once what it missed is in its journal."""
        if self.bus.closed:
            return
        try:
            self.bus.flush(timeout=deadline.left(), journaled=journaled)
        except BusTimeoutError as error:
            logger.warning(
                "Subscribers still behind %s after bus.drain_timeout (%.0f s): %s. The run "
                "goes on without waiting for them.",
                when,
                self.drain_timeout,
                ", ".join(error.pending) or "none",
            )

    def finish(self, finished: RunFinished) -> None:
        """Emit ``run_finished``, then drain the bus."""
        deadline = self.deadline()
        try:
            self.bus.emit(signals.run_finished, finished)
        except BusClosedError:
            # Only a caller's bus can be closed under a run: its owner has what was delivered.
            logger.warning("The bus was closed before the run ended: run_finished not emitted")
        finally:
            self.drain(deadline)

    def drain(self, deadline: Deadline) -> None:
        """Deliver what was emitted, waiting at most ``bus.drain_timeout`` whatever a
        subscriber does; who was still behind is logged (and in the close report)."""
        if self.own:
            report = self.bus.close(timeout=deadline.left())
            behind = [*report.undelivered, *report.timed_out]
            if behind:
                logger.warning(
                    "Subscribers still behind when the run ended (bus.drain_timeout %.0f s): %s",
                    self.drain_timeout,
                    report.describe(),
                )
            self.journaled = {name: n for name, n in report.journaled.items() if n}
            return
        # The caller's bus outlives this run: detach (drain, then close) what the run
        # connected, so a second run on the same bus does not write into this run's files.
        try:
            for handle in self.handles:
                handle.disconnect(timeout=deadline.left())
        except BusTimeoutError as error:
            logger.warning("A writer of this run did not close in time: %s", error)
        self.flush(deadline, "when the run ended")

    def close_now(self) -> None:
        """After an abort of the drain: close the run's bus, giving the subscribers a second
        at most (else the interpreter's exit would wait for it); what was not delivered is
        reported."""
        if self.own:
            try:
                self.bus.close(timeout=1.0)
            except Exception:  # the run is aborting: report, do not mask the abort
                logger.warning("Closing the bus after the abort failed", exc_info=True)
