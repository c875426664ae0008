"""PPO on MountainCar-v0 (sparse reward): extrinsic only vs + curiosity vs + RND.

MountainCar pays -1 every step until the car reaches the flag; an episode that never does is cut
at 200 steps with return -200, so until the first success there is nothing to learn from but
the intrinsic reward.  Every run gets the same PPO settings and step budget; only
``reward_signals`` changes.  Each run is its own subprocess with one torch thread.  Reports, per
run: the env step of the first episode that reached the goal (return above -200), the share of
the last 100 episodes that did, and their mean return; prints a table and writes JSON to
``benchmarks/out/curiosity.json``.

    .venv/bin/python benchmarks/bench_curiosity.py --steps 150000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
OUT = HERE / "out"
LAST = 100
SIGNALS = ("extrinsic", "curiosity", "rnd")


def run(signal: str, steps: int, seed: int, strength: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from evtrain import Bus, StatsAggregationMethod, StatsReporter
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        TrainerSettings,
        make_vector_env,
    )
    from evtrain.trainers.settings import CuriositySettings, RewardSignals, RNDSettings

    signals = RewardSignals(
        curiosity=CuriositySettings(strength=strength) if signal == "curiosity" else None,
        rnd=RNDSettings(strength=strength) if signal == "rnd" else None,
    )
    settings = TrainerSettings(
        trainer_type="ppo",
        hyperparameters=PPOSettings(
            batch_size=256,
            buffer_size=2048,
            learning_rate=3e-4,
            learning_rate_schedule="constant",
            beta=0.01,
            num_epoch=4,
        ),
        network_settings=NetworkSettings(hidden_units=64, normalize=True),
        reward_signals=signals,
        max_steps=steps,
        time_horizon=128,
        summary_freq=50_000,
    )
    trainer: PPOTrainer | None = None
    returns: list[tuple[int, float]] = []

    class TrackingReporter(StatsReporter):
        def add_stat(
            self,
            key: str,
            value: float,
            aggregation: StatsAggregationMethod = StatsAggregationMethod.AVERAGE,
        ) -> None:
            if key == "Environment/Cumulative Reward":
                returns.append((trainer.step if trainer else 0, value))
            super().add_stat(key, value, aggregation)

    envs = make_vector_env("MountainCar-v0", 16)
    with Bus() as bus:
        trainer = PPOTrainer("MountainCar", settings, envs, TrackingReporter(bus, "M"), seed=seed)
        start = time.perf_counter()
        while not trainer.should_stop:
            trainer.advance()
        elapsed = time.perf_counter() - start
    envs.close()
    first = next((step for step, r in returns if r > -200.0), None)
    last = [r for _, r in returns[-LAST:]]
    return {
        "signal": signal,
        "seed": seed,
        "steps": trainer.step,
        "seconds": round(elapsed, 1),
        "episodes": len(returns),
        "steps_to_first_goal": first,
        "success_last_100": round(sum(r > -200.0 for r in last) / len(last), 2),
        "mean_return_last_100": round(statistics.fmean(last), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--strength", type=float, default=1.0, help="curiosity/RND strength")
    parser.add_argument("--signals", nargs="+", choices=SIGNALS, default=list(SIGNALS))
    parser.add_argument("--worker", choices=SIGNALS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(args.worker, args.steps, args.seeds[0], args.strength)))
        return

    runs = []
    header = ("signal", "seed", "first goal", "success", "mean ret", "s")
    print("{:10s} {:>4s} {:>10s} {:>8s} {:>9s} {:>6s}".format(*header))
    for seed in args.seeds:
        for signal in args.signals:
            cmd = [sys.executable, __file__, "--worker", signal, "--steps", str(args.steps)]
            cmd += ["--seeds", str(seed), "--strength", str(args.strength)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            runs.append(r)
            print(
                f"{signal:10s} {seed:4d} {r['steps_to_first_goal']!s:>10s} "
                f"{r['success_last_100']:8.2f} {r['mean_return_last_100']:9.1f} "
                f"{r['seconds']:6.1f}",
                flush=True,
            )
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "curiosity.json"
    path.write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
