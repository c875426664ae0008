"""Stand-in Unity builds that never connect, for the tests of launching builds: an executable
shell script (it starts in milliseconds, however busy the machine) that writes its command line
and its and its child's process ids, then sleeps (a child too, so that ending the build's whole
process group is what the tests check)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

SCRIPT = """#!/bin/sh
sleep 600 &
child=$!
args=""
for a in "$@"; do
    e=$(printf '%s' "$a" | sed 's/\\\\/\\\\\\\\/g; s/"/\\\\"/g')
    args="$args${{args:+, }}\\"$e\\""
done
printf '{{"argv": [%s], "pids": [%d, %d]}}' "$args" $$ "$child" > {record}.tmp
mv {record}.tmp {record}
exec sleep 600
"""


def never_connecting_build(folder: Path, name: str = "Never") -> Path:
    """An executable ``folder/<name>.x86_64`` that never connects; it writes
    ``folder/<name>.json`` (``argv``, ``pids``) once started."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.x86_64"
    path.write_text(SCRIPT.format(record=str(folder / f"{name}.json")))
    path.chmod(0o755)
    return path


def gone(pid: int) -> bool:
    """No process ``pid`` is running (a zombie not reaped by us counts as gone)."""
    try:
        os.kill(pid, 0)
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return True


def all_gone(pids: Iterable[int], timeout_s: float = 10.0) -> bool:
    """Whether every process of ``pids`` is gone within ``timeout_s`` (a SIGKILL takes effect
    a moment after it is sent)."""
    deadline = time.monotonic() + timeout_s
    while not all(gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
