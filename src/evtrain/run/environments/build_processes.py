"""The Unity build processes this interpreter started, and the promise that none outlives it:
each runs in a process group of its own (a Ctrl-C in the terminal reaches evtrain alone, which
then closes the builds, as ML-Agents does), and every group still running is killed at the
interpreter's exit, whatever ended the run (:func:`end_every_build`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Sequence

__all__ = ["BUILDS", "QUIT_GRACE_S", "end_every_build"]

QUIT_GRACE_S = 5.0
"""Seconds a build has to quit after it was told to, before its process group is killed."""


class _Builds:
    """Every build process this interpreter started and has not ended yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[subprocess.Popen[bytes]] = []

    def start(self, command: Sequence[str]) -> subprocess.Popen[bytes]:
        with self._lock:
            process = subprocess.Popen(
                list(command),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._running.append(process)
        return process

    def end(self, process: subprocess.Popen[bytes], grace_s: float = QUIT_GRACE_S) -> None:
        """Wait ``grace_s`` for ``process`` to quit, then kill its whole group."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # its children too, even once it has quit
        process.wait()
        with self._lock:
            if process in self._running:
                self._running.remove(process)

    def end_all(self) -> None:
        with self._lock:
            running = list(self._running)
        for process in running:
            self.end(process, grace_s=0.0)


BUILDS = _Builds()


def end_every_build() -> None:
    """Kill every build this process started and has not ended (registered with ``atexit``:
    whatever ends the run, no build is left behind)."""
    BUILDS.end_all()


atexit.register(end_every_build)
