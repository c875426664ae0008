"""PPO on CartPole seen through pixels, per ``vis_encode_type``, beside CartPole's own vector.

The pixel environment is the tests' ``tests.pixel_envs:pixel_cartpole``: CartPole-v1 drawn into
a 40x40x3 ``uint8`` image (cart, pole, and the previous step's cart and pole).  Every run gets
rl-zoo's CartPole PPO settings (8 environments, 256-step rollouts, 20 epochs); the image runs
get one hidden layer of 64 after the encoder (its features are 64 wide), the vector run two.
Each run is its own subprocess with one torch thread.  Reports, per run: environment steps per
second (wall clock, training included) and the mean return of the last 20 episodes at a few
step counts; prints a table and writes JSON to ``benchmarks/out/pixels.json``.

    .venv/bin/python benchmarks/bench_pixels.py --steps 50000 --kinds vector simple nature_cnn

``match3`` runs at full resolution (its dense layer has 186,624 x 64 weights at 40x40): give it
``--size 12`` or expect it to be two orders of magnitude slower.
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
KINDS = ("vector", "simple", "nature_cnn", "resnet", "match3", "fully_connected")
LAST = 20


def run(kind: str, steps: int, seed: int, size: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(HERE.parent))  # the tests package: the pixel environment
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from tests.pixel_envs import pixel_cartpole

    from evtrain import Bus, StatsAggregationMethod, StatsReporter
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        RewardSignals,
        RewardSignalSettings,
        TrainerSettings,
        make_vector_env,
    )

    if kind == "vector":
        envs = make_vector_env("CartPole-v1", 8)
        network = NetworkSettings(hidden_units=64, num_layers=2)
    else:
        envs = SyncVectorEnv(
            [lambda: pixel_cartpole(size=size) for _ in range(8)],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
        network = NetworkSettings(hidden_units=64, num_layers=1, vis_encode_type=kind)  # type: ignore[arg-type]
    settings = TrainerSettings(
        trainer_type="ppo",
        hyperparameters=PPOSettings(
            batch_size=256,
            buffer_size=256,
            learning_rate=1e-3,
            beta=0.0,
            epsilon=0.2,
            lambd=0.8,
            num_epoch=20,
        ),
        network_settings=network,
        reward_signals=RewardSignals(extrinsic=RewardSignalSettings(gamma=0.98)),
        max_steps=steps,
        time_horizon=32,
        summary_freq=10_000,
    )
    trainer: PPOTrainer | None = None
    returns: list[float] = []
    marks: dict[int, float | None] = {m: None for m in (10_000, 25_000, 50_000, 100_000, steps)}

    class TrackingReporter(StatsReporter):
        def add_stat(
            self,
            key: str,
            value: float,
            aggregation: StatsAggregationMethod = StatsAggregationMethod.AVERAGE,
        ) -> None:
            if key == "Environment/Cumulative Reward":
                returns.append(value)
            super().add_stat(key, value, aggregation)

    with Bus() as bus:
        trainer = PPOTrainer("CartPole", settings, envs, TrackingReporter(bus, "C"), seed=seed)
        start = time.perf_counter()
        while not trainer.should_stop:
            trainer.advance()
            for mark, value in marks.items():
                if value is None and trainer.step >= mark and returns:
                    marks[mark] = round(statistics.fmean(returns[-LAST:]), 1)
        elapsed = time.perf_counter() - start
    envs.close()
    return {
        "kind": kind,
        "seed": seed,
        "size": size,
        "steps": trainer.step,
        "seconds": round(elapsed, 1),
        "steps_per_s": round(trainer.step / elapsed),
        "mean_return_last_20": {str(m): v for m, v in marks.items() if m <= steps},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--size", type=int, default=40, help="image side in pixels")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        default=["vector", "simple", "nature_cnn", "resnet", "fully_connected"],
    )
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(args.worker, args.steps, args.seeds[0], args.size)))
        return

    runs = []
    print(f"{'kind':16s} {'seed':>4s} {'steps/s':>8s} {'s':>7s}  mean return of the last 20 at")
    for seed in args.seeds:
        for kind in args.kinds:
            cmd = [sys.executable, __file__, "--worker", kind, "--steps", str(args.steps)]
            cmd += ["--seeds", str(seed), "--size", str(args.size)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            runs.append(r)
            curve = ", ".join(f"{m}: {v}" for m, v in r["mean_return_last_20"].items())
            print(
                f"{kind:16s} {seed:4d} {r['steps_per_s']:8d} {r['seconds']:7.1f}  {curve}",
                flush=True,
            )
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "pixels.json"
    path.write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
