"""How far a save has got: which files it has written, and the one it is replacing now.

A second Ctrl-C can stop a save anywhere; the runner then says which files of the interrupted
save are on disk (each complete, every write being atomic).  :class:`SaveProgress` is what it
reads, and what lets another thread cancel a save before its next file.
"""

from __future__ import annotations

import threading
from pathlib import Path


class SaveCancelled(Exception):
    """A save stopped before its next file by :meth:`CheckpointManager.cancel
    <evtrain.run.checkpoints.checkpoint.CheckpointManager.cancel>`."""


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` is (an atomic write replaces it with another), ``None``: none."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_mtime_ns)


class SaveProgress:
    """The files one behavior's save in progress has written, and whether it was cancelled."""

    def __init__(self) -> None:
        self.in_progress: tuple[str, int] | None = None
        """``("checkpoint" | "final save", step)`` while a save runs; left set when an
        exception (a second Ctrl-C) interrupted it."""
        self.written: list[Path] = []
        """The files the latest save has written so far, in order (each complete)."""
        self._pending: tuple[Path, tuple[int, int] | None] | None = None
        self._cancelled = threading.Event()

    def begin(self, kind: str, step: int) -> None:
        """A save of ``kind`` (``"checkpoint"`` or ``"final save"``) at ``step`` starts."""
        self.in_progress = (kind, step)
        self.written = []
        self._pending = None

    def end(self) -> None:
        """The save in progress is complete."""
        self.in_progress = None

    def cancel(self) -> None:
        """Stop the save before its next file: :meth:`writing` raises from now on."""
        self._cancelled.set()

    def writing(self, path: Path) -> None:
        """``path`` is about to be replaced: note which file is there now.

        :raises SaveCancelled: :meth:`cancel` was called.
        """
        if self._cancelled.is_set():
            raise SaveCancelled(f"the save stopped before {path.name}")
        self._pending = (path, _identity(path))

    def wrote(self, path: Path) -> None:
        """``path`` is in place."""
        self.written = [p for p in self.written if p != path] + [path]
        self._pending = None

    def files_written(self) -> list[Path]:
        """:attr:`written`, plus the file an interruption caught between its rename and its
        record (a second Ctrl-C can land there), if it was replaced."""
        if self._pending is not None:
            path, before = self._pending
            if _identity(path) not in (None, before):
                return [p for p in self.written if p != path] + [path]
        return list(self.written)
