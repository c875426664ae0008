"""Writer benchmark: emit cost, end-to-end throughput, loss and memory, side by side.

One command runs every case in its own subprocess (clean memory figures, no shared state) and
prints a table; JSON goes to ``benchmarks/out/writers.json``::

    python benchmarks/bench_writers.py              # 100,000 events x 10 keys = 1,000,000 scalars
    python benchmarks/bench_writers.py --quick      # 10x fewer, for a smoke run

Workload: ``StatsEvent`` of 10 keys (one value each) for one behavior, steps 1..N.  Each case
measures, in the producer's thread:

* **paced emit latency** — events spaced 0.2 ms apart (already 50,000 scalars/s, far above any
  training run's logging rate), so the writers keep up: what a trainer pays per ``emit``;
* **burst** — N events in a tight loop, then ``bus.close()``: scalars/s end to end until the files
  are closed, and the per-call latency of a producer that outruns its writers (under the default
  ``block`` policy it waits for room: that wait is in these figures);
* **loss** — the event files read back with TensorBoard's ``EventAccumulator``;
* **peak RSS** of the case's process.

``stalled-drop`` and ``stalled-spool`` emit past a subscriber that never returns (capacity
1,000): the first drops the oldest, the second journals everything to disk and loses nothing.

``tensorboard-alone`` is the TensorBoard writer without a bus: ``write_stats`` called N times in
the producer's thread (its CPU time per event, first pass and a second one once warm), to tell
the writer's own cost from the hand-over's.

``no-subscribers`` is the floor: ``emit`` with nobody listening (type check and route lookup),
to tell the bus's own cost from the machine's (paced calls run on cold caches after a sleep).

torch's ``SummaryWriter.add_scalar`` runs the same workload (10 calls per event) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    log_to_file,
    machine,
    make_parser,
    out_dir,
    percentiles,
    run_child,
    write_json,
)

KEYS = tuple(f"Group/Metric {i}" for i in range(10))
PACED_EVENTS = 5_000
PACED_GAP_S = 0.0002
CASES = (
    "torch",
    "no-subscribers",
    "tensorboard",
    "tensorboard-alone",
    "console",
    "gauge",
    "defaults",
    "defaults+slow+raising",
    "stalled-drop",
    "stalled-spool",
)


def read_back(directory: Path) -> int:
    """Scalars in every event file under ``directory``, counted by TensorBoard's own reader."""
    from tensorboard.backend.event_processing import event_accumulator

    total = 0
    for run_dir in sorted({p.parent for p in directory.rglob("events.out.tfevents.*")}):
        acc = event_accumulator.EventAccumulator(
            str(run_dir), size_guidance={event_accumulator.SCALARS: 0}
        )
        acc.Reload()
        total += sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])
    return total


# -- evtrain cases -------------------------------------------------------------------------------


def make_events(n: int, start: int = 1) -> list[Any]:
    from evtrain import StatsEvent, StatsSummary

    return [
        StatsEvent(
            category="Bench",
            step=step,
            values={k: StatsSummary(full_dist=(float(step + i),)) for i, k in enumerate(KEYS)},
            rank=0,
            time=0.0,
        )
        for step in range(start, start + n)
    ]


def build_bus(case: str, results: Path) -> Any:
    from evtrain import Bus, RunOptions, signals
    from evtrain_writers import ConsoleWriter, GaugeWriter, TensorboardWriter

    options = RunOptions.from_dict(
        {"checkpoint_settings": {"run_id": "bench", "results_dir": str(results)}}
    )
    cs = options.checkpoint_settings
    bus = (
        Bus(on_error="log")
        if case == "defaults+slow+raising"
        else Bus(journal_dir=cs.run_logs_dir / "journal")
    )
    tensorboard = lambda: TensorboardWriter(cs.write_path, hidden_keys=["Is Training", "Step"])  # noqa: E731
    gauge = lambda: GaugeWriter(cs.run_logs_dir)  # noqa: E731
    writers: dict[str, list[Callable[[], Any]]] = {
        "tensorboard": [tensorboard],
        "console": [ConsoleWriter],
        "gauge": [gauge],
        "defaults": [tensorboard, gauge, ConsoleWriter],
        "defaults+slow+raising": [tensorboard, gauge, ConsoleWriter],
        "stalled-drop": [],
        "stalled-spool": [],
        "no-subscribers": [],
    }
    for make in writers[case]:
        bus.add_writer(make())
    if case == "defaults+slow+raising":
        bus.connect(
            signals.stats,
            lambda event: time.sleep(0.010),
            name="slow-10ms",
            capacity=1_000,
            overflow="drop_oldest",
        )

        def always_raises(event: Any) -> None:
            raise RuntimeError("this subscriber always fails")

        bus.connect(signals.stats, always_raises, name="always-raises")
    if case == "stalled-drop":
        stall = threading.Event()
        bus.connect(
            signals.stats,
            lambda event: stall.wait(),
            name="stalled",
            capacity=1_000,
            overflow="drop_oldest",
        )
    if case == "stalled-spool":
        stall = threading.Event()
        bus.connect(
            signals.stats,
            lambda event: stall.wait(),
            name="stalled",
            capacity=1_000,
            overflow="spool",
        )
    return bus


def run_evtrain(case: str, n: int, results: Path) -> dict[str, Any]:
    from evtrain import signals

    # The console writer logs one line per event: send it to a file, as a terminal would slow
    # the whole machine, not just the writer.
    results.mkdir(parents=True, exist_ok=True)
    log_to_file(results / "console.log")
    emit_stats = signals.stats
    out: dict[str, Any] = {"case": case, "events": n, "scalars": n * len(KEYS)}

    # Paced: what a trainer pays per emit when the writers keep up.
    paced_dir = results / "paced"
    bus = build_bus(case, paced_dir)
    paced = make_events(PACED_EVENTS)
    samples = []
    clock = time.perf_counter_ns
    for event in paced:
        t0 = clock()
        bus.emit(emit_stats, event)
        samples.append(clock() - t0)
        time.sleep(PACED_GAP_S)
    stalled = case.startswith("stalled-")
    bus.close(timeout=1.0 if stalled else None)
    out["paced_emit"] = percentiles(samples)

    # Burst: a producer that outruns its writers; then everything must reach the disk.
    burst_dir = results / "burst"
    bus = build_bus(case, burst_dir)
    # A stalled subscriber under a drop policy must hold at most `capacity` events: build each
    # event just before emitting it, so nothing but the inbox can keep them alive.
    fresh = stalled
    events = [] if fresh else make_events(n)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    samples = []
    emit = bus.emit
    start = time.perf_counter()
    for event in (make_events(1, step)[0] for step in range(1, n + 1)) if fresh else events:
        t0 = clock()
        emit(emit_stats, event)
        samples.append(clock() - t0)
    emitted = time.perf_counter()
    out["rss_growth_during_burst_mb"] = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    ) / 1024
    metrics_before_close = {k: m.as_dict() for k, m in bus.metrics().items()}
    report = bus.close(timeout=1.0 if stalled else 600)
    closed = time.perf_counter()
    out["burst_emit"] = percentiles(samples)
    out["emit_loop_s"] = emitted - start
    out["end_to_end_s"] = closed - start
    out["scalars_per_s"] = out["scalars"] / (closed - start)
    out["undelivered"] = report.undelivered
    out["journaled"] = report.journaled
    out["metrics"] = (
        metrics_before_close if stalled else {k: m.as_dict() for k, m in bus.metrics().items()}
    )
    out["rss_before_burst_mb"] = rss_before / 1024
    if case in ("tensorboard", "defaults", "defaults+slow+raising"):
        t0 = time.perf_counter()
        out["read_back"] = read_back(burst_dir)
        out["read_back_s"] = time.perf_counter() - t0
        out["lost"] = out["scalars"] - out["read_back"]
    return out


def run_alone(n: int, results: Path) -> dict[str, Any]:
    """The TensorBoard writer without a bus: ``write_stats`` in this thread, twice over."""
    from evtrain_writers import TensorboardWriter

    out: dict[str, Any] = {"case": "tensorboard-alone", "events": n, "scalars": n * len(KEYS)}
    events = make_events(n)
    for label in ("first", "warm"):
        writer = TensorboardWriter(results / label, hidden_keys=["Is Training", "Step"])
        write = writer.write_stats
        start, cpu = time.perf_counter(), time.thread_time()
        for event in events:
            write(event.category, event.values, event.step)
        writer.close()
        out[f"{label}_us_per_event"] = (time.thread_time() - cpu) / n * 1e6
        out[f"{label}_s"] = time.perf_counter() - start
    out["scalars_per_s"] = out["scalars"] / out["warm_s"]
    out["read_back"] = read_back(results / "warm")
    out["lost"] = out["scalars"] - out["read_back"]
    return out


# -- torch's SummaryWriter ---------------------------------------------------------------------


def run_torch(n: int, results: Path) -> dict[str, Any]:
    from torch.utils.tensorboard import SummaryWriter

    out: dict[str, Any] = {"case": "torch", "events": n, "scalars": n * len(KEYS)}
    writer = SummaryWriter(str(results / "torch"))
    samples = []
    clock = time.perf_counter_ns
    add = writer.add_scalar
    start = time.perf_counter()
    for step in range(1, n + 1):
        for i, key in enumerate(KEYS):
            t0 = clock()
            add(key, float(step + i), step)
            samples.append(clock() - t0)
    emitted = time.perf_counter()
    writer.close()
    closed = time.perf_counter()
    out["burst_emit"] = percentiles(samples)
    out["per"] = "add_scalar call (one scalar)"
    out["emit_loop_s"] = emitted - start
    out["end_to_end_s"] = closed - start
    out["scalars_per_s"] = out["scalars"] / (closed - start)
    out["read_back"] = read_back(results / "torch")
    out["lost"] = out["scalars"] - out["read_back"]
    return out


# -- driver ------------------------------------------------------------------------------------


def child(case: str, n: int, out_file: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=f"evtrain-bench-{case}-") as tmp:
        results = Path(tmp)
        if case == "torch":
            result = run_torch(n, results)
        elif case == "tensorboard-alone":
            result = run_alone(n, results)
        else:
            result = run_evtrain(case, n, results)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out_file.write_text(json.dumps(result))
    os._exit(0)  # a stalled subscriber thread must not hold the process


def fmt(value: Any, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--events", type=int, default=100_000, help="events of 10 keys per case")
    parser.add_argument("--torch-events", type=int, default=20_000, help="events for torch")
    parser.add_argument("--quick", action="store_true", help="10x fewer events")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=out_dir() / "writers.json")
    args = parser.parse_args()
    if args.case:
        child(args.case, args.events, args.out)
        return
    if args.quick:
        args.events //= 10
        args.torch_events //= 10
    rows = []
    for case in args.cases:
        n = args.torch_events if case == "torch" else args.events
        print(f"running {case} ({n:,} events)...", file=sys.stderr, flush=True)
        rows.append(run_child([sys.executable, __file__, "--case", case, "--events", str(n)]))
    by_case = {r["case"]: r for r in rows}
    torch_rate = by_case.get("torch", {}).get("scalars_per_s")
    header = (
        f"{'case':<24}{'paced emit p50/p99/p99.9 us':>30}{'burst emit p50/p99 us':>24}"
        f"{'scalars/s e2e':>15}{'vs torch':>10}{'read back':>12}{'lost':>7}{'peak RSS MB':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        paced = r.get("paced_emit")
        paced_s = (
            f"{paced['p50_us']:.1f}/{paced['p99_us']:.1f}/{paced['p999_us']:.1f}" if paced else "-"
        )
        burst = r.get("burst_emit")  # none without a bus (tensorboard-alone)
        burst_s = (
            f"{burst['p50_us']:>12.1f}/{burst['p99_us']:<11.1f}"
            if burst
            else f"{'-':>12} " + " " * 11
        )
        ratio = r["scalars_per_s"] / torch_rate if torch_rate and r["case"] != "torch" else None
        print(
            f"{r['case']:<24}{paced_s:>30}{burst_s}"
            f"{r['scalars_per_s']:>15,.0f}{fmt(ratio, '.1f') + ('x' if ratio else ''):>10}"
            f"{fmt(r.get('read_back'), ',d'):>12}{fmt(r.get('lost'), ',d'):>7}"
            f"{r['peak_rss_mb']:>13.1f}"
        )
    if "tensorboard-alone" in by_case:
        r = by_case["tensorboard-alone"]
        print(
            f"  tensorboard-alone: write_stats without a bus, thread CPU "
            f"{r['first_us_per_event']:.2f} us an event in a first pass, "
            f"{r['warm_us_per_event']:.2f} warm"
        )
    if "stalled-drop" in by_case:
        r = by_case["stalled-drop"]
        print(
            f"  stalled-drop: {r['events']:,} fresh events emitted past a subscriber that never "
            f"returns (capacity 1,000, drop_oldest); peak RSS grew "
            f"{r['rss_growth_during_burst_mb']:.1f} MB during the burst"
        )
    if "stalled-spool" in by_case:
        r = by_case["stalled-spool"]
        print(
            f"  stalled-spool: {r['events']:,} fresh events emitted past a subscriber that never "
            f"returns (capacity 1,000, spool); peak RSS grew "
            f"{r['rss_growth_during_burst_mb']:.1f} MB during the burst; left journaled at close: "
            f"{r['journaled']}"
        )
    for name in ("defaults+slow+raising", "stalled-drop", "stalled-spool"):
        if name in by_case:
            for sub, m in by_case[name]["metrics"].items():
                print(
                    f"  {name} / {sub}: delivered {m['delivered']:,}, dropped {m['dropped']:,}, "
                    f"failed {m['failed']:,}, inbox high-water {m['high_water']:,}"
                )
    meta = {**machine(), "events": args.events, "torch_events": args.torch_events}
    write_json(args.out.resolve(), {"meta": meta, "cases": rows})
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
