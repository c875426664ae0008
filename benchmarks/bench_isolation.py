"""Per-event cost of process isolation: in-process vs ``isolation="process"`` delivery of
``StatsEvent``s, with a subscriber that does nothing and one that holds the GIL.

A stand-in training loop does ``--work-us`` of pure-Python work per step and emits one
``StatsEvent`` (``--keys`` stat keys, as a summary period would) every step, to one subscriber:

* ``noop`` — returns at once: what the delivery itself costs the trainer;
* ``gilN`` — spends about N µs (each of ``--hold-us``) in the regex engine per event, the GIL
  held (a tracker client serialising a big payload in C).

For each, the loop runs ``--events`` steps in-process and process-isolated; the table gives
the trainer's steps/s (emits included, the final drain not), and the microseconds of trainer
time each event costs over the loop without any subscriber.  Writes
``benchmarks/out/isolation.json``::

    python benchmarks/bench_isolation.py --events 3000 --repeats 3
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from typing import Any

from common import machine, write_json
from evtrain import Bus, StatsEvent, StatsSummary
from evtrain.events.signals import stats

HOLD_TEXT = "a" * 18 + "b"
"""The regex engine's work per ``gil`` event: tuned below to about ``--hold-us``."""


def noop(event: StatsEvent) -> None:
    """The subscriber that does nothing."""


class Hog:
    """Holds the GIL in the regex engine ``repeat`` times per event."""

    def __init__(self, repeat: int) -> None:
        self.repeat = repeat

    def __call__(self, event: StatsEvent) -> None:
        for _ in range(self.repeat):
            re.match(r"(a|aa)+$", HOLD_TEXT)


def work(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def loop(bus: Bus | None, events: int, keys: int, work_us: float) -> float:
    """Steps per second of the stand-in trainer."""
    values = {f"Stat/{k}": StatsSummary(full_dist=[float(k)]) for k in range(keys)}
    started = time.perf_counter()
    for step in range(events):
        work(work_us)
        if bus is not None:
            bus.emit(stats, StatsEvent(category="B", step=step, values=values))
    return events / (time.perf_counter() - started)


def run(subscriber: Any, isolation: str | None, args: argparse.Namespace) -> float:
    if isolation is None:
        return loop(None, args.events, args.keys, args.work_us)
    bus = Bus(capacity=args.events + 1, drain_timeout=600)
    bus.connect(stats, subscriber, isolation=isolation, name="sub")
    bus.emit(stats, StatsEvent(category="B", step=-1, values={}))
    bus.flush(600)  # the child is up before the clock starts
    rate = loop(bus, args.events, args.keys, args.work_us)
    bus.close()
    return rate


def hog_repeat(hold_us: float) -> int:
    started = time.perf_counter()
    Hog(50)(StatsEvent(category="B", step=0, values={}))
    once = (time.perf_counter() - started) / 50
    return max(1, round(hold_us / 1e6 / once))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--work-us", type=float, default=200.0)
    parser.add_argument("--hold-us", type=float, nargs="+", default=[100.0, 2000.0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    subscribers: dict[str, Any] = {"noop": noop}
    for hold in args.hold_us:
        subscribers[f"gil{hold:g}"] = Hog(hog_repeat(hold))
    variants = [("none", None, None)] + [
        (f"{name}/{isolation}", sub, isolation)
        for name, sub in subscribers.items()
        for isolation in ("thread", "process")
    ]
    rates: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    for _ in range(args.repeats):  # interleaved, so every variant sees the same load
        for label, sub, isolation in variants:
            rates[label].append(run(sub, isolation, args))
    base = statistics.median(rates["none"])
    rows = []
    print(f"{'variant':<16} {'steps/s':>10} {'us/event over none':>20}")
    for label, _, _ in variants:
        rate = statistics.median(rates[label])
        cost = (1 / rate - 1 / base) * 1e6
        rows.append({"variant": label, "steps_per_s": rate, "us_per_event": cost})
        print(f"{label:<16} {rate:>10.0f} {cost:>20.1f}")
    write_json(
        "isolation.json", {"machine": machine(), "args": vars(args), "rates": rates, "rows": rows}
    )


if __name__ == "__main__":
    main()
