"""The console progress bar of ``evtrain learn``: steps / max_steps, steps/s, last mean
reward and ETA per behavior, drawn by rich below the log lines (they never tangle: log records
go through the same rich console)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evtrain.bus import Bus
from evtrain.events import signals
from evtrain.events.payloads import StatsEvent
from evtrain.events.stats import CUMULATIVE_REWARD


class ProgressDisplay:
    """A rich progress bar fed by the runner (steps) and by a ``stats`` subscriber (reward)."""

    def __init__(self, behaviors: dict[str, int]) -> None:
        from rich.console import Console
        from rich.logging import RichHandler
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8} steps/s"),
            TextColumn("reward {task.fields[reward]}"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[activity]}"),
            console=self.console,
        )
        self.handler = RichHandler(
            console=self.console, show_time=False, show_path=False, markup=False
        )
        self.handler.setFormatter(logging.Formatter("%(message)s"))
        self._tasks = {
            name: self.progress.add_task(name, total=total, rate="-", reward="-", activity="")
            for name, total in behaviors.items()
        }
        self._started = {name: (time.monotonic(), 0) for name in behaviors}

    def connect(self, bus: Bus) -> None:
        """Follow the last mean reward of each behavior."""
        bus.connect(signals.stats, self.on_stats, name="evtrain.run.progress")

    def on_stats(self, event: StatsEvent) -> None:
        task = self._tasks.get(event.category)
        summary = event.values.get(CUMULATIVE_REWARD)
        if task is not None and summary is not None and summary.num:
            self.progress.update(task, reward=f"{summary.mean:.3f}")

    def __call__(self, behavior: str, step: int, max_steps: int) -> None:
        started, first = self._started[behavior]
        if first == 0:
            self._started[behavior] = (time.monotonic(), step or 1)
            started, first = self._started[behavior]
        elapsed = time.monotonic() - started
        rate = f"{(step - first) / elapsed:,.0f}" if elapsed > 0 else "-"
        self.progress.update(self._tasks[behavior], completed=min(step, max_steps), rate=rate)

    SAVING = "saving checkpoint and exporting"
    """What a bar says while its behavior saves (the first ONNX export takes seconds)."""

    @contextmanager
    def saving(self, behavior: str) -> Iterator[None]:
        """Show :attr:`SAVING` on ``behavior``'s bar for the duration of the block (the bar
        refreshes from its own thread, so it shows while the save holds the runner)."""
        task = self._tasks[behavior]
        self.progress.update(task, activity=self.SAVING)
        try:
            yield
        finally:
            self.progress.update(task, activity="")

    def activity(self, behavior: str) -> str:
        """What ``behavior``'s bar says it is doing besides training (``""``: training)."""
        task = self.progress.tasks[self._tasks[behavior]]
        return str(task.fields["activity"])

    def __enter__(self) -> ProgressDisplay:
        root = logging.getLogger()
        self._saved: list[Any] = list(root.handlers)
        root.handlers = [self.handler]
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()
        logging.getLogger().handlers = self._saved
