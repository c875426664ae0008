"""Start a stand-in build as a trainer does, and read its log (for tests and benchmarks)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def launch(
    build: Path, port: int, log: Path, *args: str, graphics: bool = False
) -> subprocess.Popen[Any]:
    """``BUILD [-nographics -batchmode] --mlagents-port PORT -logFile LOG ARGS``, as mlagents-envs
    starts it (``UnityEnvironment._executable_args``)."""
    command = [str(build)]
    if not graphics:
        command += ["-nographics", "-batchmode"]
    command += ["--mlagents-port", str(port), "-logFile", str(log), *args]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def log_lines(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def wait_for_line(log: Path, prefix: str, timeout: float = 30.0) -> str:
    """The first line of ``log`` starting with ``prefix``, waiting up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        for line in log_lines(log):
            if line.startswith(prefix):
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no line {prefix!r} in {log} after {timeout} s: {log_lines(log)}")
        time.sleep(0.02)


def lines_with(log: Path, prefixes: Sequence[str]) -> list[str]:
    return [line for line in log_lines(log) if line.startswith(tuple(prefixes))]
