"""A stand-in for a Unity build: ML-Agents' protocol spoken by a small program (tests only).

:func:`make_build` writes an executable like a Linux player (``NAME.x86_64``, what ML-Agents'
``env_path`` finds from ``folder/NAME``) that runs :mod:`tests.standin.player` with this
interpreter; the scenes are in :mod:`tests.standin.scenarios`.
"""

from __future__ import annotations

import shlex
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.standin.scenarios import NAMES

__all__ = ["NAMES", "REPO", "make_build"]

REPO = Path(__file__).resolve().parents[2]
"""The repository root, put on the player's ``PYTHONPATH``."""


def make_build(
    folder: Path, scenario: str, name: str | None = None, *, args: Sequence[str] = ()
) -> Path:
    """Write the build ``folder/NAME.x86_64`` (NAME defaults to ``scenario``) and return its path.

    ``args`` are the build's own arguments (``("--areas", "4")``), given before whatever the
    trainer adds; the scenario is checked here, so a typo fails the test that makes the build.
    """
    if scenario not in NAMES:
        raise ValueError(f"unknown stand-in scenario {scenario!r}; expected one of {NAMES}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or scenario}.x86_64"
    command = [sys.executable, "-m", "tests.standin.player", "--scenario", scenario, *args]
    path.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH={shlex.quote(str(REPO))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "GRPC_VERBOSITY=${GRPC_VERBOSITY:-NONE}\n"
        "export PYTHONPATH GRPC_VERBOSITY\n"
        f'exec {shlex.join(command)} "$@"\n',
        encoding="utf-8",
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
