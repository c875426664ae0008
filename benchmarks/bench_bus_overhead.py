"""Bus overhead on training: the same PPO CartPole run with and without subscribers.

* ``none`` — no subscriber at all (default writers disabled, nothing connected);
* ``defaults+slow`` — the default writers (TensorBoard, gauges, console to a file) plus a
  plugin-like subscriber that takes 10 ms per event, on every signal.

Each run is its own process with one torch thread; the two variants alternate ``--repeats``
times so both see the same machine load.  Wall time is measured around ``learn()`` only
(imports excluded).  Prints a table and writes ``benchmarks/out/bus_overhead.json``::

    python benchmarks/bench_bus_overhead.py --steps 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from common import (
    CONFIGS,
    add_run_args,
    log_to_file,
    make_parser,
    run_child,
    timed_learn,
    write_json,
)

CONFIG = CONFIGS / "cartpole_ppo.yaml"


def child(variant: str, steps: int, out: Path) -> None:
    from evtrain import Bus, signals

    options: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    behavior = options["behaviors"]["CartPole"]
    behavior["max_steps"] = steps
    behavior["checkpoint_interval"] = steps * 10  # one final save in both variants
    with tempfile.TemporaryDirectory() as tmp:
        options["checkpoint_settings"] = {"run_id": "bench", "results_dir": tmp}
        log_to_file(Path(tmp) / "console.log")
        if variant == "none":
            options["plugins"] = {"disabled": ["evtrain.stats_writer:default"]}
        with Bus() as bus:
            if variant == "defaults+slow":

                def slow_plugin(event: object) -> None:
                    time.sleep(0.010)

                bus.connect(signals.ALL, slow_plugin, name="slow-plugin")
            result, times = timed_learn(options, bus)
        events = sum(m.delivered for m in bus.metrics().values())
    out.write_text(
        json.dumps(
            {
                "variant": variant,
                **times,  # wall, and CPU of the training thread and of the others
                "steps": result.steps,
                "events_delivered": events,
            }
        )
    )


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=100_000, repeats=3)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        child(args.variant, args.steps, args.out)
        return
    runs: dict[str, list[dict[str, Any]]] = {"none": [], "defaults+slow": []}
    for repeat in range(args.repeats):
        for variant in runs:
            print(f"repeat {repeat + 1}: {variant}...", file=sys.stderr, flush=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            command = [sys.executable, __file__, "--variant", variant, "--steps", str(args.steps)]
            record = run_child(command)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            # CPU of the whole child process (start-up included): every thread's work
            record["cpu_s"] = (after.ru_utime - before.ru_utime) + (
                after.ru_stime - before.ru_stime
            )
            runs[variant].append(record)

    def median_of(key: str) -> dict[str, float]:
        return {v: statistics.median(r[key] for r in rs) for v, rs in runs.items()}

    medians = median_of("wall_s")
    overhead = (medians["defaults+slow"] / medians["none"] - 1.0) * 100.0
    print(f"{'variant':<16}{'wall s (each run)':>36}{'median s':>10}{'events':>8}")
    for variant, rs in runs.items():
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in rs)
        print(f"{variant:<16}{walls:>36}{medians[variant]:>10.2f}{rs[0]['events_delivered']:>8}")
    print(f"overhead of default writers + 10 ms/event plugin: {overhead:+.1f} % wall time")
    # This shared machine's speed drifts between runs by more than the effect measured, so
    # also: each repeat's pair (run back to back) as a ratio, and the fastest run of each.
    paired = statistics.median(
        b["wall_s"] / a["wall_s"] for a, b in zip(runs["none"], runs["defaults+slow"], strict=True)
    )
    fastest = {v: min(r["wall_s"] for r in rs) for v, rs in runs.items()}
    cpu = median_of("cpu_s")
    print(f"median of the paired ratios: {(paired - 1.0) * 100.0:+.1f} % wall time")
    print(
        f"fastest run: none {fastest['none']:.2f} s, defaults+slow {fastest['defaults+slow']:.2f}"
        f" s ({(fastest['defaults+slow'] / fastest['none'] - 1.0) * 100.0:+.1f} %)"
    )
    print(
        f"median CPU s of the whole process: none {cpu['none']:.2f}, defaults+slow "
        f"{cpu['defaults+slow']:.2f} ({(cpu['defaults+slow'] / cpu['none'] - 1.0) * 100.0:+.1f} %)"
    )
    # CPU time is not charged for time the VM's hypervisor takes away, so it drifts less than
    # the wall time: the bus's own cost is the extra CPU of the non-training threads, and what
    # emitting costs the training thread shows in its CPU time.
    main_cpu = median_of("main_cpu_s")
    other_cpu = median_of("other_cpu_s")
    extra_other = other_cpu["defaults+slow"] - other_cpu["none"]
    print(
        f"median CPU s inside learn(), training thread: none {main_cpu['none']:.2f}, "
        f"defaults+slow {main_cpu['defaults+slow']:.2f} "
        f"({(main_cpu['defaults+slow'] / main_cpu['none'] - 1.0) * 100.0:+.1f} %)"
    )
    print(
        f"median CPU s inside learn(), other threads: none {other_cpu['none']:.3f}, "
        f"defaults+slow {other_cpu['defaults+slow']:.3f} (+{extra_other:.3f} s = "
        f"{extra_other / medians['none'] * 100.0:+.1f} % of the no-subscriber wall time)"
    )
    report = {
        "runs": runs,
        "median_s": medians,
        "overhead_pct": overhead,
        "paired_ratio_median": paired,
        "fastest_s": fastest,
        "median_cpu_s": cpu,
        "median_main_thread_cpu_s": main_cpu,
        "median_other_threads_cpu_s": other_cpu,
    }
    write_json("bus_overhead.json", report)


if __name__ == "__main__":
    main()
