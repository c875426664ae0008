"""The console of a run: the progress bar of ``evtrain learn`` (steps / max_steps, steps/s,
last mean reward and ETA per behavior, drawn by rich below the log lines; they never tangle:
log records go through the same rich console, and each one is followed by the bar as it is
now), and :func:`console_logging`, which gives ``learn()`` called from Python the CLI's log
lines when nobody configured logging."""

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
from evtrain.run.evaluation.inference import INFERENCE_SUFFIX

LOG_FORMAT = "[%(levelname)s] %(message)s"
"""The CLI's log line (``evtrain.cli``), also :func:`console_logging`'s."""


@contextmanager
def console_logging() -> Iterator[None]:
    """While the block runs, log evtrain's records to stderr at INFO as the CLI does, when
    nothing would show them otherwise: neither the root logger nor ``evtrain``'s has a
    handler (Python's last-resort handler shows warnings only).  When the caller configured
    logging, nothing changes, so no line is printed twice; and the handler goes again at the
    end, so logging configured later does not double lines either."""
    package = logging.getLogger("evtrain")
    if logging.getLogger().handlers or package.handlers:
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    level = package.level
    package.addHandler(handler)
    if level == logging.NOTSET:
        package.setLevel(logging.INFO)
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(level)


class ProgressDisplay:
    """A rich progress bar fed by the runner (steps) and by a ``stats`` subscriber (reward).

    :param console: where to draw (stderr by default).
    """

    def __init__(self, behaviors: dict[str, int], console: Any = None) -> None:
        from rich.console import Console
        from rich.logging import RichHandler
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True) if console is None else console
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
        progress = self.progress

        class _Handler(RichHandler):
            def emit(self, record: logging.LogRecord) -> None:
                # The live display redraws its last refreshed frame under each log line: made
                # now, that frame shows the bar as it is, not as it was up to 0.1 s ago.
                progress.refresh()
                super().emit(record)

        self.handler = _Handler(
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
        # --inference reports under <behavior>/inference: the same bar
        task = self._tasks.get(event.category.removesuffix(INFERENCE_SUFFIX))
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
        # A run ends at the end of the rollout that reaches max_steps, possibly past it: the
        # bar follows to the last step instead of standing at max_steps meanwhile.
        self.progress.update(
            self._tasks[behavior], completed=step, total=max(step, max_steps), rate=rate
        )

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
