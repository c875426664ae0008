"""Stand-in Unity builds that never connect, for the tests of launching builds: an executable
script that writes its command line and its and its child's process ids, then sleeps (a child
too, so that ending the build's whole process group is what the tests check)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SCRIPT = """#!{python}
import json, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
record = {{"argv": sys.argv[1:], "pids": [__import__("os").getpid(), child.pid]}}
with open({record!r} + ".tmp", "w") as f:
    json.dump(record, f)
__import__("os").replace({record!r} + ".tmp", {record!r})
time.sleep(600)
"""


def never_connecting_build(folder: Path, name: str = "Never") -> Path:
    """An executable ``folder/<name>.x86_64`` that never connects; it writes
    ``folder/<name>.json`` (``argv``, ``pids``) once started."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.x86_64"
    path.write_text(SCRIPT.format(python=sys.executable, record=str(folder / f"{name}.json")))
    path.chmod(0o755)
    return path


def gone(pid: int) -> bool:
    """No process ``pid`` is running (a zombie not reaped by us counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" in status.read_text()
