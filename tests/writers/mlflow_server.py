"""A real ``mlflow server`` for tests: sqlite store, 127.0.0.1, a free port; it can be hung
(``SIGSTOP``), continued, killed and started again on the same store and port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from tests.helpers import end_with_the_suite, free_port

MLFLOW = Path(sys.executable).parent / "mlflow"
UP_WITHIN_S = 300.0
"""How long a start may take (its imports, its store's tables: seconds of CPU) on 2 cores other
tests keep busy: a bound for a server that never answers, not a wait."""


class MlflowServer:
    """``mlflow server --backend-store-uri sqlite:///<folder>/mlflow.db --host 127.0.0.1``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[str] | None = None

    def start(self) -> None:
        """Start it and wait (bounded) until ``/health`` answers."""
        self._log = log = (self.folder / "server.log").open("a")
        self.process = end_with_the_suite(
            subprocess.Popen(
                [
                    str(MLFLOW),
                    "server",
                    "--backend-store-uri",
                    f"sqlite:///{self.folder / 'mlflow.db'}",
                    "--artifacts-destination",
                    str(self.folder / "artifacts"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                ],
                cwd=self.folder,
                # No job runner: it starts a process and seven huey consumers, each importing
                # mlflow (seconds of CPU apiece), for server-side jobs no test asks for.
                env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its uvicorn workers go with it
            )
        )
        deadline = time.monotonic() + UP_WITHIN_S
        while not self.healthy():
            if self.process.poll() is not None:
                raise RuntimeError((self.folder / "server.log").read_text()[-3000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server not up within {UP_WITHIN_S:.0f} s")
            time.sleep(0.2)

    def ensure_up(self) -> None:
        """Continue it if it was hung, start it again if it was killed: how a test finds the
        session's server (:func:`tests.conftest.mlflow_server`) whatever the one before did."""
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGCONT)
            return
        self._ended()
        self.start()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the server and its workers (``SIGSTOP`` hangs it)."""
        assert self.process is not None
        os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        """``SIGKILL`` the server and its workers; the store stays."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGCONT)
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)
        self._ended()

    def _ended(self) -> None:
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """End it (``SIGTERM``, then ``SIGKILL`` after 15 s)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGCONT)
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            self.kill()
        self._ended()
