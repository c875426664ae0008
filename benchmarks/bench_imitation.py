"""GAIL + behavioral cloning vs PPO alone on CartPole-v1, from 10 recorded expert episodes.

1. The expert: ``evtrain learn examples/configs/cartpole_ppo.yaml`` (100k steps, rl-zoo's
   settings), then ``evtrain record ... --episodes 10`` writes its demonstrations.  Both run
   through the command line, as a user runs them.
2. Per seed, PPO with the same rl-zoo settings (8 environments, 32-step rollouts), alone and
   with ``reward_signals.gail`` + ``behavioral_cloning`` on those demonstrations (settings in
   :data:`VARIANTS`; ``gail`` and ``bc`` alone with ``--variants``).  Each run is its own
   subprocess with one torch thread, and stops at the env step where the mean of the last 20
   episode returns first reaches 475 (or at ``--steps``).

Prints a table and writes JSON to ``benchmarks/out/imitation.json``::

    .venv/bin/python benchmarks/bench_imitation.py --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    CONFIGS,
    ROOT,
    Column,
    ReturnTracker,
    add_run_args,
    header,
    make_parser,
    median_with_misses,
    one_torch_thread,
    reward_reporter,
    row,
    run_worker,
    train,
    write_json,
)

EXPERT_CONFIG = CONFIGS / "cartpole_ppo.yaml"
TARGET = 475.0
WINDOW = 20
EPISODES = 10
COLUMNS = (
    Column("variant", 8, align="<"),
    Column("seed", 4, "d"),
    Column("steps to 475", 12),
    Column("episodes", 8, "d"),
    Column("s", 6, ".1f"),
)

GAIL = {"strength": 0.1, "gamma": 0.99, "learning_rate": 3.0e-4}
BC = {"strength": 0.5, "steps": 20_000}
VARIANTS: dict[str, dict[str, Any]] = {
    "ppo": {},
    "gail_bc": {"gail": GAIL, "bc": BC},
    "gail": {"gail": GAIL},
    "bc": {"bc": BC},
}
"""What each variant adds to PPO."""


def run(variant: str, demo: str, steps: int, seed: int) -> dict[str, Any]:
    """One training run in this process; stops once the mean of 20 reaches 475."""
    one_torch_thread()
    from evtrain import Bus
    from evtrain.trainers import NetworkSettings, PPOSettings, PPOTrainer, make_vector_env
    from evtrain.trainers.settings import (
        BehavioralCloningSettings,
        GAILSettings,
        RewardProviders,
        RewardProviderSettings,
        TrainerSettings,
    )

    extra = VARIANTS[variant]
    gail = extra.get("gail")
    bc = extra.get("bc")
    settings = TrainerSettings(
        trainer_type="ppo",
        hyperparameters=PPOSettings(
            batch_size=256,
            buffer_size=256,
            learning_rate=1e-3,
            learning_rate_schedule="linear",
            beta=0.0,
            epsilon=0.2,
            lambd=0.8,
            num_epoch=20,
        ),
        network_settings=NetworkSettings(hidden_units=64, num_layers=2),
        reward_signals=RewardProviders(
            extrinsic=RewardProviderSettings(gamma=0.98),
            gail=GAILSettings(demo_path=demo, **gail) if gail else None,
        ),
        behavioral_cloning=BehavioralCloningSettings(demo_path=demo, **bc) if bc else None,
        max_steps=100_000,  # the schedules of the expert's config; --steps stops earlier
        time_horizon=32,
        summary_freq=5000,
    )
    trainer: PPOTrainer | None = None
    tracker = ReturnTracker(WINDOW, TARGET, lambda: trainer.step if trainer else 0)
    envs = make_vector_env("CartPole-v1", 8)
    with Bus() as bus:
        reporter = reward_reporter(bus, "C", tracker.add)
        trainer = PPOTrainer("CartPole", settings, envs, reporter, seed=seed)
        elapsed, _ = train(trainer, until=lambda: trainer.step >= steps or tracker.hit is not None)
    envs.close()
    return {
        "variant": variant,
        "seed": seed,
        "steps": trainer.step,
        "seconds": round(elapsed, 1),
        "episodes": len(tracker.returns),
        "steps_to_475": tracker.hit,
    }


def evtrain(*args: str) -> str:
    """``evtrain ARGS`` with this interpreter; its output."""
    cmd = [sys.executable, "-m", "evtrain", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout


def record_expert(folder: Path) -> tuple[Path, str]:
    """Train the expert and record its demonstrations; the file and ``record``'s line."""
    results = str(folder / "results")
    evtrain("learn", str(EXPERT_CONFIG), "--run-id", "expert", "--results-dir", results)
    demo = folder / "cartpole_expert.npz"
    line = evtrain(
        "record",
        str(EXPERT_CONFIG),
        "--run-id",
        "expert",
        "--results-dir",
        results,
        "--episodes",
        str(EPISODES),
        "--output",
        str(demo),
    )
    return demo, line.strip()


def summarize(runs: list[dict[str, Any]], variant: str) -> dict[str, Any]:
    hits = [r["steps_to_475"] for r in runs if r["variant"] == variant]
    reached = [h for h in hits if h is not None]
    return {
        # A seed that never reached 475 counts as infinitely slow for the median.
        "median_steps_to_475": median_with_misses(hits) if reached else None,
        "seeds_reaching_475": len(reached),
        "seeds": len(hits),
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=100_000, seeds=[0, 1, 2, 3, 4], steps_help="budget per run")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["ppo", "gail_bc"])
    parser.add_argument("--demo", help="use this demonstration file instead of recording one")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(args.worker, args.demo, args.steps, args.seeds[0])))
        return

    with tempfile.TemporaryDirectory(prefix="bench-imitation-") as scratch:
        if args.demo:
            demo, recorded = Path(args.demo), f"(given) {args.demo}"
        else:
            demo, recorded = record_expert(Path(scratch))
        print(recorded, flush=True)
        runs = []
        print(header(COLUMNS, " "))
        for seed in args.seeds:
            for variant in args.variants:
                cmd = [sys.executable, __file__, "--worker", variant, "--demo", str(demo)]
                cmd += ["--steps", str(args.steps), "--seeds", str(seed)]
                r = run_worker(cmd)
                runs.append(r)
                values = (variant, seed, str(r["steps_to_475"]), r["episodes"], r["seconds"])
                print(row(COLUMNS, values, " "), flush=True)
    summary = {v: summarize(runs, v) for v in args.variants}
    print()
    print("| variant | median steps to 475 | seeds reaching 475 |")
    print("|---|---|---|")
    for variant, s in summary.items():
        print(
            f"| {variant} | {s['median_steps_to_475']} | {s['seeds_reaching_475']}/{s['seeds']} |"
        )
    settings = {v: VARIANTS[v] for v in args.variants}
    report = {
        "args": vars(args),
        "expert": recorded,
        "settings": settings,
        "runs": runs,
        "summary": summary,
    }
    path = write_json("imitation.json", report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
