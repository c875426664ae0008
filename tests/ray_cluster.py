"""A real Ray cluster of two nodes on 127.0.0.1 for the tests: a head and a second node joining
it, each a ``ray start ... --block`` process this module started and alone stops (by
terminating those processes: ``ray stop`` would stop every Ray process of the machine, other
tests' too).

The commands are those of docs/distributed.md's walk-through (:func:`walkthrough`), with what
that page says the tests change: a free port for the head's, ``--block``, a ``--temp-dir``, and
(both nodes run on this machine) free ports for what a second node would share with the head.
The nodes inherit this process's environment: ``PYTHONPATH`` makes the actors import evtrain
from where the tests do; ``RAY_AUTH_TOKEN`` is the cluster's token.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers import ROOT, end_with_the_suite, free_port

RAY = Path(sys.executable).parent / "ray"

STARTUP_S = 600.0
"""How long the nodes may take to be up (Ray starts slowly on 2 busy cores)."""


DOC = ROOT / "docs" / "distributed.md"
DOC_PORT = "6379"
"""The head's port in the walk-through; the tests take a free one instead."""


def walkthrough() -> list[list[str]]:
    """The commands of docs/distributed.md's "Two nodes, step by step", split as a shell
    would: the head, the second node, ``evtrain learn``, ``torchrun ... evtrain learn``."""
    text = DOC.read_text()
    section = text[text.index("### Two nodes, step by step") :]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None, "docs/distributed.md: the walk-through has no sh block"
    return [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]


def _with_port(command: list[str], port: int) -> list[str]:
    return [arg.replace(DOC_PORT, str(port)) for arg in command]


def head_command(port: int, temp_dir: Path) -> list[str]:
    """The walk-through's head, on ``port``: blocking, in ``temp_dir``, on ports of its own."""
    command = _with_port(walkthrough()[0], port)
    assert command[:3] == ["ray", "start", "--head"], command
    extra = ["--temp-dir", str(temp_dir), "--ray-client-server-port", str(free_port())]
    return [str(RAY), *command[1:], *_blocking(), *extra]


def node_command(port: int) -> list[str]:
    """The walk-through's second node, joining the head on ``port``."""
    command = _with_port(walkthrough()[1], port)
    assert command[:3] == ["ray", "start", "--address"], command
    return [str(RAY), *command[1:], *_blocking()]


def _blocking() -> list[str]:
    return ["--block", "--disable-usage-stats", *_own_ports()]


def _own_ports() -> list[str]:
    return [
        "--dashboard-agent-listen-port", str(free_port()),
        "--metrics-export-port", str(free_port()),
        "--runtime-env-agent-port", str(free_port()),
    ]  # fmt: skip


TOKEN = secrets.token_hex(16)
"""The cluster's authentication token (Ray's token authentication): the nodes and every driver
of the tests get it as ``RAY_AUTH_TOKEN``."""


def ray_env() -> dict[str, str]:
    """The environment of the nodes and of the runs that use them: this one's, the repository
    first on ``PYTHONPATH``, the cluster's token."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **AUTH}


AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN, "RAY_USAGE_STATS_ENABLED": "0"}


class Cluster:
    """The two nodes; :meth:`close` stops them."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Short: Ray's unix sockets live under it (a socket path has at most 107 bytes).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="evray-"))
        self.logs = self.temp_dir / "out"
        self.logs.mkdir()
        self.processes: list[subprocess.Popen[bytes]] = []
        self._start(head_command(self.port, self.temp_dir), "head")
        self._wait_for_started("head")
        self._start(node_command(self.port), "node")
        self._wait_for_started("node")
        self._wait_for_nodes(2)

    def _wait_for_started(self, name: str) -> None:
        """Wait (bounded) until node ``name``'s ``ray start`` says "Ray runtime started." in
        its log: it says so once its raylet has registered with the head.  Cheap to watch,
        where each ``ray status`` is a Python importing Ray (seconds of CPU on 2 busy cores);
        :meth:`_wait_for_nodes` then asks that once or twice."""
        log = self.logs / f"{name}.log"
        deadline = time.monotonic() + STARTUP_S
        while "Ray runtime started." not in log.read_text(errors="replace"):
            self._check_running()
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray {name} not started in {STARTUP_S} s: {self.log_tail()}")
            time.sleep(0.1)

    def _check_running(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a Ray node exited: {self.log_tail()}")

    def _start(self, command: list[str], name: str) -> None:
        with open(self.logs / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=ray_env(), cwd=ROOT
            )
        self.processes.append(end_with_the_suite(process))

    def _wait_for_nodes(self, count: int) -> None:
        """Wait until ``ray status`` counts ``count`` nodes alive (bounded)."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            self._check_running()
            try:
                status = subprocess.run(
                    [str(RAY), "status", "--address", self.address],
                    capture_output=True,
                    text=True,
                    env=ray_env(),
                    timeout=max(1.0, deadline - time.monotonic()),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                break  # the deadline passed while ray status ran
            if status.returncode == 0 and status.stdout.count(" node_") >= count:
                return
        raise TimeoutError(f"{count} Ray node(s) not up in {STARTUP_S} s: {self.log_tail()}")

    def log_tail(self) -> str:
        return "\n".join(
            f"{path.name}: {path.read_text(errors='replace')[-2000:]}"
            for path in sorted(self.logs.glob("*.log"))
        )

    def close(self) -> None:
        """Terminate the nodes (the second first), each ending the Ray processes it started:
        both asked at once, then each waited for (each takes seconds to end its processes)."""
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
