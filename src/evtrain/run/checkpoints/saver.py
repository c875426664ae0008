"""Checkpoints off the training thread: a snapshot now, the files and the export in the background.

The first ONNX export of a process costs seconds (the exporter's imports and its trace), and
even a reused graph is checked in onnxruntime: on the training thread that froze the run at
every checkpoint.  The runner instead takes a :func:`snapshot` of what a save needs — a copy
of the trainer's state and of its policy module — and hands it to a :class:`BackgroundSaver`,
whose one thread runs the saves in order (a
:class:`~evtrain.run.checkpoints.checkpoint.CheckpointManager` writes each file atomically and emits
``save``/``export`` once it is in place).

Nothing is lost or torn: the end of a run, an exception and Ctrl-C all wait for the saves
(:meth:`BackgroundSaver.wait`, :meth:`~BackgroundSaver.close`); a second Ctrl-C cancels what
has not started and stops the running save at its next file (:meth:`~BackgroundSaver.abort`),
so the file being written is completed.  A save that fails to write raises on the training
thread, at the next :meth:`~BackgroundSaver.submit` or :meth:`~BackgroundSaver.wait`.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from evtrain.run.checkpoints.checkpoint import SaveCancelled

__all__ = ["BackgroundSaver", "snapshot"]

logger = logging.getLogger("evtrain.run.checkpoints.saver")

T = TypeVar("T")

_JOIN_S = 10.0
"""How long :meth:`BackgroundSaver.close` waits for its idle thread to end."""
_POLL_S = 0.05
"""How often a waiting thread looks again (it stays interruptible by Ctrl-C)."""


def snapshot(value: T) -> T:
    """A copy of a trainer's state or policy that training can no longer change.

    Tensors are cloned (views of one buffer stay views of one cloned buffer, as
    ``copy.deepcopy`` keeps shared storage shared), numpy arrays copied, modules deep-copied.
    """
    with torch.no_grad():
        return copy.deepcopy(value)


class BackgroundSaver:
    """Runs saves, in the order given, on one thread of its own (started at the first save).

    :param max_pending: saves queued or running at most; :meth:`submit` waits for room
        beyond it, so a disk slower than the checkpoint interval holds training back instead
        of piling up snapshots in memory.
    """

    def __init__(self, max_pending: int = 2) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.max_pending = max_pending
        self._jobs: deque[tuple[str, Callable[[], Any]]] = deque()
        self._running: str | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._aborted = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.completed = 0
        """Saves that ran to the end."""

    @property
    def pending(self) -> int:
        """Saves queued or running."""
        with self._cond:
            return len(self._jobs) + (self._running is not None)

    def submit(self, name: str, job: Callable[[], Any]) -> None:
        """Queue ``job`` (a save of snapshots; ``name`` says which, in logs).

        :raises BaseException: what an earlier save raised (once).
        :raises RuntimeError: the saver was closed or aborted.
        """
        with self._cond:
            self._raise_error()
            if self._closed:
                raise RuntimeError("the background saver is closed")
            self._wait_for(lambda: len(self._jobs) + (self._running is not None) < self.max_pending)
            self._raise_error()
            self._jobs.append((name, job))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="evtrain-saver", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def wait(self) -> None:
        """Until every save submitted so far has run.

        :raises BaseException: what a save raised (once).
        """
        with self._cond:
            self._wait_for(lambda: not self._jobs and self._running is None)
            self._raise_error()

    def close(self) -> None:
        """Wait for the saves still queued, then stop the thread; an error a save raised is
        logged, not raised (the run is ending already; :meth:`wait` raises it)."""
        with self._cond:
            if not self._aborted:
                self._wait_for(lambda: not self._jobs and self._running is None)
            self._closed = True
            self._cond.notify_all()
            if self._error is not None:
                logger.error("A checkpoint save failed: %s", self._error)
                self._error = None
            thread, aborted = self._thread, self._aborted
        # The thread ends as soon as it sees the close: joined, it runs no Python (nor torch)
        # code of ours while the interpreter finalizes.
        if thread is not None and not aborted and thread is not threading.current_thread():
            thread.join(timeout=_JOIN_S)

    def abort(self, cancel: Callable[[], None], timeout: float = 60.0) -> list[str]:
        """Drop the saves not started, stop the running one at its next file, and wait for it.

        :param cancel: asks the running save to stop before its next file (every
            :meth:`CheckpointManager.cancel
            <evtrain.run.checkpoints.checkpoint.CheckpointManager.cancel>`).
        :param timeout: how long to wait for the file being written (an export being traced
            finishes first); after it, the thread is left to finish alone.
        :returns: the names of the saves dropped.
        """
        with self._cond:
            dropped = [name for name, _ in self._jobs]
            self._jobs.clear()
            self._closed = self._aborted = True
            cancel()
            self._cond.notify_all()
            end = time.monotonic() + timeout
            while self._running is not None and time.monotonic() < end:
                self._cond.wait(min(_POLL_S, max(0.0, end - time.monotonic())))
            if self._running is not None:
                logger.warning("The save %s did not stop within %.0f s", self._running, timeout)
        return dropped

    # -- internals -------------------------------------------------------------------------------

    def _wait_for(self, ready: Callable[[], bool]) -> None:
        # Short waits: a lock wait with no timeout would still end on Ctrl-C, but this also
        # notices a thread that died.
        while not ready():
            if self._thread is not None and not self._thread.is_alive():
                raise RuntimeError("the background saver's thread has died")
            self._cond.wait(_POLL_S)

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                name, job = self._jobs.popleft()
                self._running = name
            try:
                job()
            except SaveCancelled:
                logger.debug("The save %s was cancelled", name)
            except BaseException as error:  # raised on the training thread instead
                with self._cond:
                    self._error = error
                    self._jobs.clear()  # later saves would build on a failed one
            else:
                self.completed += 1
            finally:
                # The job's snapshots (a policy module, the exporter's graphs) are released
                # here, before anyone is told the save is done: released later, on this daemon
                # thread while the interpreter finalizes, torch code that gives up the GIL
                # would end the process ("terminate called without an active exception").
                del job
                with self._cond:
                    self._running = None
                    self._cond.notify_all()
