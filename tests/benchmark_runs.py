"""Running the scripts of benchmarks/ for their smoke tests: in a clean environment, with the
report each writes read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import ROOT

BENCHMARKS = ROOT / "benchmarks"


def _env(out: Path) -> dict[str, str]:
    """This checkout's evtrain first on the path, reports to ``out``."""
    path = [str(ROOT / "src"), str(ROOT / "writers"), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "LOCAL_RANK", "WORLD_SIZE"}}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, path)), EVTRAIN_BENCH_OUT=str(out))
    return env


def _run(script: str, *args: str, out: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(out),
        cwd=out,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _report(out: Path, pattern: str) -> dict[str, Any]:
    (path,) = out.glob(pattern)
    report: dict[str, Any] = json.loads(path.read_text())
    return report
