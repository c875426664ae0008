"""Subscribers that tests run in child processes (``isolation="process"``): module-level
classes of plain values, so a spawned child can import and unpickle them."""

from __future__ import annotations

import os
import re
from pathlib import Path

from evtrain import StatsEvent


class Recorder:
    """Appends each event's step to ``folder/steps`` (one line, flushed) and writes its pid to
    ``folder/pid`` on its first event."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started = False

    def record(self, event: StatsEvent) -> None:
        if not self.started:
            self.started = True
            (self.folder / f"pid.{os.getpid()}").touch()
            (self.folder / "pid").write_text(str(os.getpid()))
        with open(self.folder / "steps", "a", encoding="utf-8") as file:
            file.write(f"{event.step}\n")

    def __call__(self, event: StatsEvent) -> None:
        self.record(event)


class Spinner(Recorder):
    """On the first event it ever sees (in any child), spins in the regex engine, which holds
    the GIL, for far longer than any test lasts; later events are recorded."""

    def __call__(self, event: StatsEvent) -> None:
        spun = self.folder / "spun"
        if not spun.exists():
            spun.write_text(str(os.getpid()))
            re.match(r"(a|aa)+$", "a" * 64 + "b")  # about 1.6**64 steps: forever
        self.record(event)


class Leaker(Recorder):
    """Keeps ``leak_bytes`` of touched memory per event, forever."""

    def __init__(self, folder: Path, leak_bytes: int) -> None:
        super().__init__(folder)
        self.leak_bytes = leak_bytes
        self.kept: list[bytes] = []

    def __call__(self, event: StatsEvent) -> None:
        self.kept.append(os.urandom(16) * (self.leak_bytes // 16))
        self.record(event)


def steps(folder: Path) -> list[int]:
    """Every step recorded, by every child, in order of recording."""
    path = folder / "steps"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


class Raiser(Recorder):
    """Raises on step 3, records every other step."""

    def __call__(self, event: StatsEvent) -> None:
        if event.step == 3:
            raise ValueError("step 3 is refused")
        self.record(event)
