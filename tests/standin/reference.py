"""The reference client: mlagents-envs 0.28.0 (the last on PyPI for Python 3.11+) in its own venv.

It cannot live in evtrain's venv (it pins protobuf and numpy below what evtrain uses), so
:func:`reference_python` makes a venv once per machine under ``~/.cache/evtrain-tests`` (a file
lock keeps two pytest-xdist workers from racing) with the set that imports on Python 3.11:
``mlagents-envs==0.28.0 protobuf<=4.24 numpy<1.24``; its generated code needs protobuf's pure
Python implementation (``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``, see :data:`ENV`).
:func:`drive` runs ``mlagents_driver.py`` in it (:func:`drive_all`: one process, many plans).
mlagents-envs binds its gRPC server on every interface (``[::]:port``): that is the reference
client's doing, kept as it is.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REQUIREMENTS = ("mlagents-envs==0.28.0", "protobuf<=4.24", "numpy<1.24")
CACHE = Path(os.environ.get("EVTRAIN_TEST_CACHE", Path.home() / ".cache" / "evtrain-tests"))
VENV = CACHE / "mlagents-envs-0.28"
ENV = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python", "GRPC_VERBOSITY": "NONE"}
DRIVER = Path(__file__).with_name("mlagents_driver.py")


class ReferenceUnavailable(RuntimeError):
    """The reference client's venv could not be made."""


def reference_python() -> Path:
    """The venv's interpreter, making the venv first if no finished one is there."""
    python = VENV / "bin" / "python"
    ready = VENV / "ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "mlagents-envs-0.28.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            _make(python)
            ready.write_text(" ".join(REQUIREMENTS), encoding="utf-8")
    return python


def _make(python: Path) -> None:
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", "--clear", str(VENV)],
        [str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        [str(python), "-c", "import mlagents_envs.environment"],
    ]
    for step in steps:
        done = subprocess.run(
            step, capture_output=True, text=True, env={**os.environ, **ENV}, timeout=600
        )
        if done.returncode:
            raise ReferenceUnavailable(
                f"could not make the mlagents-envs 0.28 venv at {VENV}: `{' '.join(step)}` "
                f"exited {done.returncode}: {done.stderr.strip()[-800:]} (it needs network "
                f"access to PyPI the first time; delete {VENV} to retry)"
            )


def drive(python: Path, plan: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """Run the driver with ``plan``; its JSON report."""
    report: dict[str, Any] = _driven(python, plan, cwd, timeout=120)
    return report


def drive_all(python: Path, plans: list[dict[str, Any]], cwd: Path) -> list[dict[str, Any]]:
    """Run one driver with ``plans``, one after another (the client's import, a second or two
    of CPU, paid once); their JSON reports, in order."""
    reports: list[dict[str, Any]] = _driven(python, plans, cwd, timeout=120 * len(plans))
    assert len(reports) == len(plans)
    return reports


def _driven(python: Path, plans: Any, cwd: Path, timeout: float) -> Any:
    done = subprocess.run(
        [str(python), str(DRIVER), json.dumps(plans)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **ENV},
        timeout=timeout,
    )
    if done.returncode:
        raise AssertionError(f"the driver exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
