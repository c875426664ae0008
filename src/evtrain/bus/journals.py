"""Where a bus's ``spool`` subscribers keep their journals (:mod:`evtrain.bus.journal`).

``journal_dir/<name>[-rank<N>]``, or, for a bus without ``journal_dir``, a temporary folder of
its own (lossless while the process lives, not across a crash), removed at close when empty.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from evtrain.bus.journal import Journal, journal_path


class JournalPlaces:
    """Opens the journals of one bus's spool subscribers, and tidies their folder at close.

    :param journal_dir: the bus's journal folder; ``None``: a temporary one.
    :param fsync_s: seconds between a journal's fsyncs.
    :param rank: the bus's rank, part of a journal's folder name off rank 0.
    """

    def __init__(self, journal_dir: Path | None, fsync_s: float, rank: int) -> None:
        self.journal_dir = journal_dir
        self.fsync_s = fsync_s
        self.rank = rank
        self._root: Path | None = None
        """The folder journals are in, once a spool subscriber connected."""
        self._made_root = False

    def open(
        self, name: str, max_bytes: int, journal_dir: str | os.PathLike[str] | None
    ) -> Journal:
        """Open subscriber ``name``'s journal, under ``journal_dir`` if given (the
        subscriber's own), else under the bus's folder."""
        if journal_dir is not None:
            return Journal(
                journal_path(journal_dir, name, self.rank),
                label=name,
                max_bytes=max_bytes,
                fsync_s=self.fsync_s,
                temporary=False,
            )
        root = self._root
        if root is None:
            if self.journal_dir is None:
                root = Path(tempfile.mkdtemp(prefix="evtrain-journal-"))
                self._made_root = True
            else:
                root = self.journal_dir
                self._made_root = not root.exists()
            self._root = root
        return Journal(
            journal_path(root, name, self.rank),
            label=name,
            max_bytes=max_bytes,
            fsync_s=self.fsync_s,
            temporary=self.journal_dir is None,
        )

    def tidy(self) -> None:
        """At close: remove the folder this bus made, unless journals were left in it."""
        if self._root is not None and self._made_root:
            with contextlib.suppress(OSError):  # not empty: journals left undelivered
                self._root.rmdir()
