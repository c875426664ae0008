"""Emit cost as subscribers grow: Bus.emit with 0, 10 and 100 no-op subscribers.

Each case is a fresh process holding one ``Bus()`` (default settings) with N plain sync callables
that do nothing, connected to ``stats``; the producer emits ``--events`` ``StatsEvent`` of 10 keys
and times each ``emit`` with ``perf_counter_ns``.  Two modes:

* **paced** — one emit every ``--gap-us`` microseconds, so the subscribers keep up: what a
  trainer pays per ``emit``.  The producer spins between emits, as a busy pure-Python trainer
  does; the interpreter hands the GIL to the subscribers' threads every switch interval.  (A
  producer that sleeps, or makes any system call, between emits pays 2-3 us per emit on this
  machine with no subscriber at all: its next emit runs on cold caches.)
* **burst** — the emits back to back: a producer that outruns its subscribers (under the
  default ``block`` policy a full inbox makes ``emit`` wait, and that wait is in the figures).

``--poll-s S`` makes the subscribers' tasks poll their inboxes every ``S`` seconds at the
fastest (the dispatcher polls every 0.5 ms while events come): with ``--poll-s 0.2`` they
hardly run between the paced emits, which tells what the subscribers' activity costs the
producer from what the emit itself costs.  Each case also times an empty interval (two
``perf_counter_ns`` back to back, ``timer p50``): every emit's figure holds that much of the
timer's own cost.

Every case ends with ``bus.close()`` and checks that each subscriber got every event.  With
``--baseline SRC`` (a ``src/`` folder of another evtrain, e.g. an older commit's from ``git
archive``) each case also runs on that code, the two alternating case by case so both see the
same machine load.  Prints a table and writes ``benchmarks/out/emit.json``::

    python benchmarks/bench_emit.py                               # 20,000 emits a case
    python benchmarks/bench_emit.py --baseline /tmp/before/src    # before and after, side by side
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_writers import make_events
from common import ROOT, machine, make_parser, percentiles, write_json

MODES = ("paced", "burst")


def child(
    subscribers: int, mode: str, events: int, gap_us: int, out: Path, poll_s: float | None
) -> None:
    import evtrain
    from evtrain import Bus, signals

    if poll_s is not None:
        from evtrain.bus import dispatch

        dispatch.POLL_MIN_S = poll_s
        dispatch.POLL_MAX_S = max(poll_s, dispatch.POLL_MAX_S)

    payloads = make_events(events)
    bus = Bus()
    for i in range(subscribers):

        def no_op(event: object) -> None:
            return None

        bus.connect(signals.stats, no_op, name=f"no-op-{i}")
    emit, stats, clock = bus.emit, signals.stats, time.perf_counter_ns
    gap_ns = gap_us * 1000 if mode == "paced" else 0
    samples = [0] * events
    empty = [0] * events
    for i in range(events):  # the timer's own cost, in each sample below
        t0 = clock()
        empty[i] = clock() - t0
    time.sleep(0.5)  # the subscribers' tasks and threads have started
    start = time.perf_counter()
    for i, payload in enumerate(payloads):
        t0 = clock()
        emit(stats, payload)
        samples[i] = clock() - t0
        if gap_ns:
            until = t0 + gap_ns
            while clock() < until:  # busy, as a trainer is between two emits
                pass
    emitted = time.perf_counter()
    report = bus.close(timeout=120)
    closed = time.perf_counter()
    delivered = [m.delivered for m in bus.metrics().values()]
    result = {
        "subscribers": subscribers,
        "mode": mode,
        "events": events,
        "emit": percentiles(samples),
        "timer": percentiles(empty),
        "poll_s": poll_s,
        "emit_loop_s": emitted - start,
        "close_s": closed - emitted,
        "evtrain": str(Path(evtrain.__file__).parent.parent),
        "all_delivered": all(d == events for d in delivered) and report.clean,
    }
    out.write_text(json.dumps(result))
    os._exit(0)


def run_case(command: list[str], src: Path) -> dict[str, Any]:
    """Run one case in a fresh process importing evtrain from ``src``; its result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        subprocess.run([*command, "--out", tmp.name], check=True, env=env)
        result: dict[str, Any] = json.loads(Path(tmp.name).read_text())
    return result


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--events", type=int, default=20_000, help="emits per case")
    parser.add_argument("--subscribers", type=int, nargs="+", default=[0, 10, 100])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--gap-us", type=int, default=200, help="paced: microseconds between emits")
    parser.add_argument("--baseline", type=Path, help="another evtrain's src/ to measure too")
    parser.add_argument(
        "--poll-s", type=float, help="the subscribers' fastest poll interval (default 0.0005)"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.mode, args.events, args.gap_us, args.out, args.poll_s)
        return
    codes = {"this": ROOT / "src"}
    if args.baseline is not None:
        codes = {"baseline": args.baseline.resolve(), **codes}
    rows: list[dict[str, Any]] = []
    for mode in args.modes:
        for n in args.subscribers:
            for code, src in codes.items():
                print(f"{mode}, {n} subscribers, {code}...", file=sys.stderr, flush=True)
                command = [sys.executable, __file__, "--child", str(n), "--mode", mode]
                command += ["--events", str(args.events), "--gap-us", str(args.gap_us)]
                if args.poll_s is not None:
                    command += ["--poll-s", str(args.poll_s)]
                rows.append({"code": code, **run_case(command, src)})
    load = os.getloadavg()
    title = f"{'mode':<7}{'subscribers':>12}{'code':>10}{'p50 us':>9}{'p99 us':>9}{'p99.9 us':>10}"
    print(title + f"{'max us':>10}{'timer p50':>11}{'emit loop s':>13}{'all delivered':>15}")
    print("-" * (len(title) + 49))
    for r in rows:
        e = r["emit"]
        print(
            f"{r['mode']:<7}{r['subscribers']:>12}{r['code']:>10}{e['p50_us']:>9.2f}"
            f"{e['p99_us']:>9.2f}{e['p999_us']:>10.1f}{e['max_us']:>10.0f}"
            f"{r['timer']['p50_us']:>11.2f}"
            f"{r['emit_loop_s']:>13.2f}{'yes' if r['all_delivered'] else 'NO':>15}"
        )
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)")
    path = write_json(
        "emit.json",
        {
            "machine": machine(),
            "load_average": load,
            "gap_us": args.gap_us,
            "poll_s": args.poll_s,
            "cases": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
