"""Line files that a crash or a full disk never tears: what the CSV and JSONL writers append to.

Each line is handed to the operating system by one ``os.write`` of the whole line (no Python
buffer: ``kill -9`` loses nothing already written); a write that fails half way (``ENOSPC``)
is cut back to the last whole line before the error is raised, so the next try starts clean.
:meth:`LineFile.sync` makes what was written durable (one ``fsync``, only when something was
written since the last one).  Opening an existing file first cuts a torn last line (a line
without its newline, left by a crash of a writer that did not work this way) so that nothing
is glued onto it, and :meth:`LineFile.cut` drops the lines a crashed run wrote past the
checkpoint a resumed run starts from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from evtrain.atomic import atomic_write


class LineFile:
    """A file of ``\\n``-terminated lines, opened for appending.

    :param path: created (with its folder) if missing.
    :param header: written first when the file is new or empty (e.g. a CSV header line).
    """

    def __init__(self, path: Path, header: bytes = b"") -> None:
        self.path = path
        self.header = header
        self._fd: int | None = None
        self._size = 0
        self._dirty = False

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
            try:
                size = os.fstat(fd).st_size
                whole = _whole_lines_size(fd, size)
                if whole != size:  # a torn last line: nothing may be glued onto it
                    os.ftruncate(fd, whole)
                    os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd, self._size = fd, whole
            if whole == 0 and self.header:
                try:
                    self.append(self.header)
                except BaseException:  # the next try opens again, header first
                    self._fd = None
                    os.close(fd)
                    raise
        return self._fd

    def append(self, line: bytes) -> None:
        """Append ``line`` (ending in ``\\n``) whole, or not at all.

        :raises OSError: the write failed; the file is as it was before the call.
        """
        fd = self._open()
        size = self._size
        try:
            written = os.pwrite(fd, line, size)
            while written < len(line):  # a short write: the rest, or the error that stopped it
                written += os.pwrite(fd, line[written:], size + written)
        except BaseException as error:
            os.ftruncate(fd, size)  # whole or absent (truncating frees space: no ENOSPC)
            if isinstance(error, OSError) and error.filename is None:
                error.filename = str(self.path)  # say which file met the full disk
            raise
        self._size = size + len(line)
        self._dirty = True

    def sync(self) -> None:
        """Make every line appended so far durable (``fsync``; nothing when nothing is new)."""
        if self._fd is not None and self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def lines(self) -> list[bytes]:
        """The file's whole lines, each with its newline."""
        if self._fd is None and not self.path.exists():
            return []
        fd = self._open()
        return os.pread(fd, self._size, 0).splitlines(keepends=True)

    def cut(self, keep: Callable[[bytes], bool]) -> int:
        """Rewrite the file (atomically) with only the lines ``keep`` accepts; a no-op when it
        accepts them all.  :returns: the number of lines dropped."""
        lines = self.lines()
        kept = [line for line in lines if keep(line)]
        if len(kept) == len(lines):
            return 0
        self.close()
        data = b"".join(kept)
        atomic_write(self.path, lambda f: f.write(data))
        return len(lines) - len(kept)

    def close(self) -> None:
        """Sync and close (reopened by the next call that needs the file)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if self._dirty:
                    os.fsync(fd)
            finally:
                self._dirty = False
                os.close(fd)


def _whole_lines_size(fd: int, size: int) -> int:
    """The size of ``fd``'s content up to and including its last newline."""
    end, chunk = size, 1 << 16
    while end > 0:
        start = max(0, end - chunk)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0
