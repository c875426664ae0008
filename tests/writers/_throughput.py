"""Scalars per second to disk, end to end: evtrain's TensorboardWriter against torch's.

Not a test (timings are never asserted); run by hand::

    .venv/bin/python tests/writers/_throughput.py [--scalars 1000000]

Workload: events of 10 keys (``Key 0`` … ``Key 9``) at consecutive steps.  Each case is timed
from the first call to the end of ``close()``, then read back with TensorBoard's
``EventAccumulator`` and counted.  Cases:

* ``direct``: ``TensorboardWriter.write_stats`` called in a loop (summaries built beforehand).
* ``bus``: ``StatsEvent`` payloads emitted on a real ``Bus`` with the writer added, built
  beforehand (the bus and the writer, nothing else).
* ``bus+build``: the same, building each event's ``StatsSummary`` objects in the timed loop, as
  a trainer's reporter would.
* ``torch``: ``torch.utils.tensorboard.SummaryWriter.add_scalar`` per scalar, then ``close()``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain import Bus, StatsEvent, StatsSummary, signals
from evtrain_writers import TensorboardWriter

KEYS = tuple(f"Key {i}" for i in range(10))


def count_scalars(folder: Path) -> int:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return sum(len(accumulator.Scalars(tag)) for tag in accumulator.Tags()["scalars"])


def run_direct(folder: Path, events: int) -> float:
    summaries = [{key: StatsSummary(full_dist=(float(i),)) for key in KEYS} for i in range(100)]
    start = time.perf_counter()
    writer = TensorboardWriter(folder)
    for step in range(events):
        writer.write_stats("Behavior", summaries[step % 100], step)
    writer.close()
    return time.perf_counter() - start


def make_event(step: int) -> StatsEvent:
    value = (float(step),)
    return StatsEvent(
        category="Behavior",
        step=step,
        values={key: StatsSummary(full_dist=value) for key in KEYS},
        rank=0,
        time=0.0,
    )


def run_bus(folder: Path, events: int) -> float:
    payloads = [make_event(step) for step in range(events)]
    start = time.perf_counter()
    with Bus() as bus:
        bus.add_writer(TensorboardWriter(folder))
        for payload in payloads:
            bus.emit(signals.stats, payload)
    return time.perf_counter() - start


def run_bus_build(folder: Path, events: int) -> float:
    start = time.perf_counter()
    with Bus() as bus:
        bus.add_writer(TensorboardWriter(folder))
        for step in range(events):
            bus.emit(signals.stats, make_event(step))
    return time.perf_counter() - start


def run_torch(folder: Path, events: int) -> float:
    from torch.utils.tensorboard import SummaryWriter

    start = time.perf_counter()
    writer = SummaryWriter(str(folder / "Behavior"))
    for step in range(events):
        for key in KEYS:
            writer.add_scalar(key, float(step), step)
    writer.close()
    return time.perf_counter() - start


def measure(name: str, run: Callable[[Path, int], float], scalars: int) -> float:
    """Run one case in a fresh folder; print and return its scalars/s."""
    events = scalars // len(KEYS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        elapsed = run(folder, events)
        read_back = count_scalars(folder / "Behavior")
    rate = events * len(KEYS) / elapsed
    print(f"{name:>9}: {rate:>11,.0f} scalars/s  ({elapsed:.3f} s; read back {read_back:,})")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scalars", type=int, default=1_000_000)
    parser.add_argument("--torch-scalars", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.repeat):
        direct = measure("direct", run_direct, args.scalars)
        bus = measure("bus", run_bus, args.scalars)
        built = measure("bus+build", run_bus_build, args.scalars)
        torch = measure("torch", run_torch, args.torch_scalars)
        print(
            f"  vs torch: direct {direct / torch:.1f}x, bus {bus / torch:.1f}x, "
            f"bus+build {built / torch:.1f}x"
        )


if __name__ == "__main__":
    main()
