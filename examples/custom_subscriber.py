"""Subscribers connected in code: what a notebook or a training script can hook into a run.

Run it with ``python examples/custom_subscriber.py [--out DIR]``.  It needs no environment and
no training: two :class:`~evtrain.StatsReporter` objects emit a made-up run of two behaviors,
exactly as trainers do, then two checkpoints are announced on ``save``.  It shows

* a sync ``@bus.on(signals.stats)`` handler keeping the best mean reward per behavior;
* ``sender="Walker"``: a handler that hears one behavior only;
* ``overflow="latest"``: a slow dashboard that skips stale summaries instead of holding up
  training or falling behind;
* a handler with a bug, isolated by the bus: training goes on, ``subscriber_failed`` reports
  it, and after ``max_consecutive_failures`` failures in a row the bus disables it;
* an ``async def`` handler on ``save`` that "uploads" each checkpoint (appends a line to
  ``DIR/uploads.txt``);
* ``bus.metrics()`` once the ``with Bus() as bus:`` block has closed the bus.

The output is the same on every run, so ``tests/test_examples.py`` checks it line by line.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio

from evtrain import Bus, SaveEvent, StatsEvent, StatsReporter, SubscriberFailed, signals

REWARD = "Environment/Cumulative Reward"
SUMMARY_FREQ = 1000

RETURNS: dict[str, list[tuple[float, ...]]] = {
    "CartPole": [(10.0, 14.0), (40.0, 52.0), (120.0, 90.0), (310.0, 250.0), (500.0, 480.0)],
    "Walker": [(-2.0, 0.0), (2.0, 4.0), (8.0, 6.0), (13.0, 11.0), (9.0, 9.0)],
}
"""Made-up episode returns: per behavior, per summary period."""


class Dashboard:
    """A live plot that redraws slower than training produces summaries.

    Each redraw lasts until ``redrawn`` is set.  A real dashboard would just be slow; waiting
    on an event instead makes the summaries it skips the same on every run of this script.
    """

    def __init__(self) -> None:
        self.frames: list[int] = []
        """Steps of the summaries it drew."""
        self.drawing = threading.Event()
        self.redrawn = threading.Event()

    def __call__(self, event: StatsEvent) -> None:
        self.drawing.set()
        self.redrawn.wait(timeout=10)
        self.frames.append(event.step)


def append_line(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(line + "\n")


def main(out_dir: Path) -> None:
    uploads = out_dir / "uploads.txt"
    best: dict[str, tuple[float, int]] = {}
    walker_steps: list[int] = []
    value_losses: list[float] = []
    dashboard = Dashboard()

    # Three failures in a row disable a subscriber (the default is 100), so the broken handler
    # below is switched off within this short run.
    with Bus(max_consecutive_failures=3) as bus:

        @bus.on(signals.stats, name="best_reward")
        def track_best_reward(event: StatsEvent) -> None:
            # A sync subscriber gets its events one at a time, in emission order, on its own
            # worker thread; the script reads `best` only after bus.flush(), so no lock.
            mean = event.values[REWARD].mean
            if event.category not in best or mean > best[event.category][0]:
                best[event.category] = (mean, event.step)

        @bus.on(signals.stats, sender="Walker", name="walker_only")
        def follow_walker(event: StatsEvent) -> None:
            walker_steps.append(event.step)

        # While the dashboard draws, newer summaries of a behavior replace older queued ones
        # (counted as dropped): emit never waits for it and it never falls behind.
        bus.connect(
            signals.stats, dashboard, sender="CartPole", overflow="latest", name="dashboard"
        )

        @bus.on(signals.stats, name="broken")
        def log_value_loss(event: StatsEvent) -> None:
            # The bug: only trainers that update a value function report this key.
            value_losses.append(event.values["Losses/Value Loss"].mean)

        @bus.on(signals.subscriber_failed, name="failure_report")
        def report_failure(failure: SubscriberFailed) -> None:
            print(
                f"subscriber_failed: {failure.subscriber} raised {failure.error_type}: "
                f"{failure.error} on {failure.signal!r} "
                f"(failure {failure.count}, disabled: {failure.disabled})"
            )

        @bus.on(signals.save, name="upload")
        async def upload_checkpoint(event: SaveEvent) -> None:
            # An async subscriber is awaited on the bus's event loop: while it awaits (the
            # network, here a sleep) other async subscribers run.  The append is tiny; real
            # blocking work belongs in anyio.to_thread.run_sync or in a sync subscriber.
            await anyio.sleep(0.01)
            append_line(
                uploads,
                f"{event.category} step {event.step} -> s3://example-bucket/{event.path.name}",
            )

        # -- training reports statistics (what a trainer does every summary_freq steps) ------
        reporters = {name: StatsReporter(bus, name) for name in RETURNS}
        for period in range(len(RETURNS["CartPole"])):
            for name, reporter in reporters.items():
                for episode_return in RETURNS[name][period]:
                    reporter.add_stat(REWARD, episode_return)
                reporter.write_stats((period + 1) * SUMMARY_FREQ)
            if period == 0:
                dashboard.drawing.wait(timeout=10)  # busy with its first frame from now on
        dashboard.redrawn.set()
        # Everything emitted so far is handled, including the subscriber_failed reports.
        bus.flush()

        for name, (mean, step) in best.items():
            print(f"best mean reward: {name} {mean} at step {step}")
        print(f"walker_only saw steps {walker_steps}")
        print(f"dashboard drew steps {dashboard.frames}")

        # -- checkpoints become durable (what the trainer does after each atomic save) -------
        for name in RETURNS:
            path = out_dir / name / f"{name}-5000.pt"
            bus.emit(signals.save, SaveEvent(category=name, step=5000, path=path, reward=0.0))
        bus.flush()
        for line in uploads.read_text().splitlines():
            print(f"uploads.txt: {line}")

    # Leaving the block closed the bus: queues drained, subscribers closed.  Metrics outlive it.
    print(f"{'subscriber':<16}{'delivered':>10}{'dropped':>9}{'failed':>8}  disabled")
    for name, metrics in bus.metrics().items():
        print(
            f"{name:<16}{metrics.delivered:>10}{metrics.dropped:>9}{metrics.failed:>8}"
            f"  {metrics.disabled}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out", type=Path, help="folder for uploads.txt (default: a temporary folder)"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    # The bus logs an isolated failure with its traceback on stderr; stdout stays the report.
    logging.basicConfig(format="[%(levelname)s] %(name)s: %(message)s")
    args = parse_args()
    if args.out is None:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        main(args.out)
