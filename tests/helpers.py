"""Small builders shared by the tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from evtrain import StatsEvent, StatsSummary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PLUGIN = EXAMPLES / "plugin"


def stats_event(step: int, category: str = "CartPole", **values: float) -> StatsEvent:
    summaries = {k: StatsSummary(full_dist=[v]) for k, v in values.items()}
    return StatsEvent(category=category, step=step, values=summaries, rank=0, time=0.0)


class Gate:
    """A subscriber that blocks on its first event until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.steps: list[int] = []

    def __call__(self, event: StatsEvent) -> None:
        self.entered.set()
        assert self.open.wait(10)
        self.steps.append(event.step)


def python(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run this interpreter with warnings as errors, like the test suite itself."""
    return subprocess.run(
        [sys.executable, "-W", "error", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else clean_env(),
        cwd=cwd,
    )


def clean_env(**extra: str) -> dict[str, str]:
    # A RANK left in the environment (e.g. by torchrun) would make the run rank != 0, where
    # the example's file subscribers are not connected at all.
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "LOCAL_RANK", "WORLD_SIZE"}}
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port nobody listens on right now (for a rendezvous address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
