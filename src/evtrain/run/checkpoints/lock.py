"""One process per run folder: an advisory lock on ``results/<run_id>/.evtrain-lock``.

``fcntl.flock`` belongs to the open file, so the operating system releases it when the process
ends however it ends (``kill -9`` included): a lock left by a dead process is simply taken by
the next one, with no stale-lock cleanup.  The holder writes its PID into the file so that
whoever is refused can say who holds the run.  The file itself stays in the folder: removing
it would let a second process lock a new file of the same name while the first still holds
the old one.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from evtrain.errors import RunFolderError

LOCK = ".evtrain-lock"
"""The lock file's name in the run folder."""


class RunLock:
    """The lock of one run folder, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        """The lock file."""
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, folder: Path, run_id: str) -> RunLock:
        """Lock ``folder`` (which exists) for this process, or refuse at once.

        :raises RunFolderError: another process holds it (its PID is in the message), or the
            lock file cannot be opened.
        """
        path = folder / LOCK
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as error:
            raise RunFolderError(
                f"cannot lock run {run_id!r}: {path}: {error.strerror or error}. Remove {path} "
                "if it is not a plain file, or choose another --run-id."
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_pid(fd)
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderError(
                    f"cannot lock run {run_id!r}: {path}: {error.strerror or error}"
                ) from None
            who = f"process {holder}" if holder else "another process"
            raise RunFolderError(
                f"run {run_id!r} in {folder} is in use by {who} (it holds {path}). Wait for "
                "it to end, stop it, or choose another --run-id."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(path, fd)

    def release(self) -> None:
        """Unlock (closing the file releases the lock); idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    """The PID the holder wrote, if it has written it yet."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
