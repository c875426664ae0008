"""Evaluation overhead on training: PPO CartPole with and without evaluation every 10k steps.

* ``none`` — examples/configs/cartpole_ppo.yaml as it is;
* ``evaluation`` — the same with ``evaluation: {every: 10000, episodes: 10}`` (the best model
  kept: a snapshot of the state at each evaluation, a best save when it improves).

Each run is its own process with one torch thread and the default writers disabled (so that
only the evaluation differs); the two variants alternate ``--repeats`` times so both see the
same machine load.  Wall time is measured around ``learn()`` only (imports excluded), with the
CPU time of the training thread and of the other threads (the evaluation's among them).  The
issue's target: at most 5 % more wall time.  Prints a table and writes
``benchmarks/out/evaluation.json``::

    python benchmarks/bench_evaluation.py --steps 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from common import (
    CONFIGS,
    add_run_args,
    log_to_file,
    machine,
    make_parser,
    run_child,
    timed_learn,
    write_json,
)

CONFIG = CONFIGS / "cartpole_ppo.yaml"
VARIANTS = ("none", "evaluation")


def child(variant: str, args: argparse.Namespace, out: Path) -> None:
    from evtrain import Bus, EvaluationEvent, signals
    from evtrain.run.evaluation import evaluator

    worker_cpu = []
    close = evaluator.Evaluator.close

    def closing(self: evaluator.Evaluator) -> None:  # the worker's CPU, as it last said
        worker_cpu.append(self.worker_cpu_s)
        close(self)

    evaluator.Evaluator.close = closing  # type: ignore[method-assign]

    options: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    behavior = options["behaviors"]["CartPole"]
    behavior["max_steps"] = args.steps
    behavior["checkpoint_interval"] = args.steps * 10  # one final save in both variants
    if variant == "evaluation":
        behavior["evaluation"] = {"every": args.every, "episodes": args.episodes}
    options["plugins"] = {"disabled": ["evtrain.stats_writer:default"]}
    evaluations: list[EvaluationEvent] = []
    with tempfile.TemporaryDirectory() as tmp:
        options["checkpoint_settings"] = {"run_id": "bench", "results_dir": tmp}
        log_to_file(Path(tmp) / "console.log")
        with Bus() as bus:
            bus.connect(signals.evaluation, evaluations.append, name="bench")
            result, times = timed_learn(options, bus)
            bus.flush()
    record = {
        "variant": variant,
        **times,
        "worker_cpu_s": sum(worker_cpu),
        "steps": result.steps["CartPole"],
        "evaluations": [[e.step, e.mean_return, sum(e.lengths)] for e in evaluations],
    }
    out.write_text(json.dumps(record))


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=100_000, repeats=3)
    parser.add_argument("--every", type=int, default=10_000, help="evaluation.every")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation.episodes")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        child(args.variant, args, args.out)
        return
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    settings = ["--steps", str(args.steps), "--every", str(args.every)]
    settings += ["--episodes", str(args.episodes)]
    for repeat in range(args.repeats):
        for variant in VARIANTS:
            print(f"repeat {repeat + 1}: {variant}...", file=sys.stderr, flush=True)
            runs[variant].append(
                run_child([sys.executable, __file__, "--variant", variant, *settings])
            )
    report = summarise(runs)
    report.update(
        args={k: v for k, v in vars(args).items() if k in {"steps", "repeats", "every", "episodes"}}
    )
    report["machine"] = machine()
    print(f"JSON: {write_json('evaluation.json', report)}")


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Print the table; the report's figures."""

    def median_of(key: str) -> dict[str, float]:
        return {v: statistics.median(r[key] for r in rs) for v, rs in runs.items()}

    wall, main_cpu = median_of("wall_s"), median_of("main_cpu_s")
    other_cpu, worker_cpu = median_of("other_cpu_s"), median_of("worker_cpu_s")
    overhead = (wall["evaluation"] / wall["none"] - 1.0) * 100.0
    paired = statistics.median(
        b["wall_s"] / a["wall_s"] for a, b in zip(runs["none"], runs["evaluation"], strict=True)
    )
    main_overhead = (main_cpu["evaluation"] / main_cpu["none"] - 1.0) * 100.0
    evaluated = runs["evaluation"][0]["evaluations"]
    print(f"{'variant':<12}{'wall s (each run)':>30}{'median s':>10}{'main CPU s':>12}", end="")
    print(f"{'other CPU s':>13}{'worker CPU s':>14}")
    for variant, rs in runs.items():
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in rs)
        print(f"{variant:<12}{walls:>30}{wall[variant]:>10.2f}{main_cpu[variant]:>12.2f}", end="")
        print(f"{other_cpu[variant]:>13.2f}{worker_cpu[variant]:>14.2f}")
    steps = sum(e[2] for e in evaluated)
    print(f"evaluations per run: {len(evaluated)} ({steps} episode steps in the first run)")
    print(
        f"overhead of evaluation: {overhead:+.1f} % wall time (medians), "
        f"{(paired - 1.0) * 100.0:+.1f} % (median of the paired ratios), "
        f"{main_overhead:+.1f} % training-thread CPU; target <= 5 % wall time"
    )
    return {
        "runs": runs,
        "median_wall_s": wall,
        "median_main_cpu_s": main_cpu,
        "median_other_cpu_s": other_cpu,
        "median_worker_cpu_s": worker_cpu,
        "overhead_pct": overhead,
        "paired_overhead_pct": (paired - 1.0) * 100.0,
        "main_cpu_overhead_pct": main_overhead,
    }


if __name__ == "__main__":
    main()
