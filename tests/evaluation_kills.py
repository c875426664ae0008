"""``python -m tests.evaluation_kills PATH WHEN ARGS...``: ``evtrain ARGS`` (as ``python -m
evtrain ARGS`` runs it) killed with SIGKILL in place of the ``WHEN``-th rename of ``PATH``.

What ``strace -f -P PATH -e inject=rename,renameat,renameat2:signal=KILL:when=WHEN`` does,
without the cost of tracing every system call of the run (the imports of torch in the run and
in its evaluation server doubled the run's CPU time): ``os.replace`` and ``os.rename`` count
the renames whose source is ``PATH``, from any thread, and the ``WHEN``-th one sends the
process SIGKILL instead of renaming.  Nothing of the process runs after it, as after a
``kill -9`` (SIGKILL cannot be caught).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def kill_at_rename(path: Path, when: int) -> None:
    """Make the ``when``-th rename of ``path`` (its source) a SIGKILL of this process."""
    target = os.path.abspath(path)
    lock = threading.Lock()
    seen = [0]

    def killing(rename: Callable[..., None]) -> Callable[..., None]:
        def instead(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if isinstance(src, (str, os.PathLike)) and os.path.abspath(src) == target:
                with lock:
                    seen[0] += 1
                    if seen[0] == when:
                        os.kill(os.getpid(), signal.SIGKILL)
            rename(src, dst, *args, **kwargs)

        return instead

    os.replace = killing(os.replace)
    os.rename = killing(os.rename)


if __name__ == "__main__":
    kill_at_rename(Path(sys.argv[1]), int(sys.argv[2]))
    sys.argv = ["evtrain", *sys.argv[3:]]
    runpy.run_module("evtrain", run_name="__main__", alter_sys=True)
