"""Atomic files: a reader, a crash or ``kill -9`` at any moment sees the old complete file or
the new complete one, never a torn one (temp file in the same folder, fsync, ``os.replace``)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

StrPath = str | os.PathLike[str]

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Write errors that last only until space is freed (a full disk, a full quota)."""

_TEMP = re.compile(r"^\.(?P<target>.+)\.[0-9a-f]{12}\.tmp$")

_EXIT_WAIT_S = 2.0
"""How long the interpreter's exit waits for writes still in flight on other threads."""

_in_flight: set[Path] = set()
"""The temporary files of the writes under way in this process."""
_in_flight_changed = threading.Condition()


# -- files ---------------------------------------------------------------------------------------


def atomic_write(path: StrPath, write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` all at once: ``write`` fills a temporary file in the same folder, which is
    flushed, fsynced and renamed over ``path`` (``os.replace``), then the folder is fsynced.

    Readers see the old content until the rename and the new content after it; on any
    exception (``KeyboardInterrupt`` included) the temporary file is removed and ``path`` is
    untouched.  Only ``kill -9`` or a power cut can leave a temporary file behind (see
    :func:`remove_stale_temps`).  The folder must exist.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    renamed = False
    with _in_flight_changed:
        _in_flight.add(temp)
    try:
        # O_EXCL: never share a temporary file with another writer.  Mode 0o666 lets the umask
        # decide, as for any file open() creates (mkstemp would make it 0o600).
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        with open(os.open(temp, flags, 0o666), "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        renamed = True
    except OSError as error:
        # Name the file being replaced (a full disk's error names none, or the temporary one).
        error.filename = str(path)
        raise
    finally:
        if not renamed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        with _in_flight_changed:
            _in_flight.discard(temp)
            _in_flight_changed.notify_all()
    fsync_folder(path.parent)
    return path


@atexit.register
def _finish_in_flight_writes() -> None:
    """At the interpreter's exit, writes on daemon threads (a writer's ``timers.json`` while a
    second Ctrl-C ends the process) would be cut off where they stand, leaving their temporary
    file: wait a moment for them, then remove the temporary files of those still running (their
    targets keep the old content)."""
    deadline = time.monotonic() + _EXIT_WAIT_S
    with _in_flight_changed:
        while _in_flight and (left := deadline - time.monotonic()) > 0:
            _in_flight_changed.wait(left)
        for temp in list(_in_flight):
            with contextlib.suppress(OSError):
                os.unlink(temp)


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` is a full disk or quota: it lasts until space is freed."""
    return isinstance(error, OSError) and error.errno in DISK_FULL


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; Windows cannot open a folder)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder; the file itself is durable
        pass
    finally:
        os.close(fd)


def remove_stale_temps(folder: StrPath, target: str | None = None) -> list[Path]:
    """Remove the temporary files :func:`atomic_write` left in ``folder`` when its process was
    killed; only those for the file named ``target`` if given.  Returns what was removed.

    Call it only while nothing writes there: an in-flight write's temporary file looks the same.
    """
    removed = []
    for entry in Path(folder).glob(".*.tmp"):
        match = _TEMP.match(entry.name)
        if match and (target is None or match["target"] == target):
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed.append(entry)
    return removed


def atomic_copy(source: Path, destination: Path) -> None:
    """Copy ``source`` to ``destination`` through :func:`atomic_write`."""
    with source.open("rb") as src:
        atomic_write(destination, lambda dst: shutil.copyfileobj(src, dst, 1 << 20))
