"""SAC on Pendulum-v1: evtrain and Stable-Baselines3 side by side, same hyperparameters.

rl-zoo's Pendulum-v1 SAC settings (learning rate 1e-3, 20k steps) on SB3's SAC defaults:
batch 256, tau 0.005, gamma 0.99, 100 random warm-up steps, one gradient step per env step,
automatic entropy tuning from 1.0, two hidden layers of 256 units.  Each run is its own
process with one torch thread; the libraries alternate per seed.  Reports env steps/s over the
whole run and the mean return of the last 10 episodes at the end (target: ≥ -200 within 20k
steps); writes ``benchmarks/out/sac.json``::

    python benchmarks/bench_sac.py --steps 20000 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "out"
LAST = 10


def run_evtrain(steps: int, seed: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from evtrain import Bus, signals
    from evtrain.run.learn import learn

    returns: list[float] = []

    def track(event: Any) -> None:
        summary = event.values.get("Environment/Cumulative Reward")
        if summary is not None:
            returns.extend(summary.full_dist)

    with tempfile.TemporaryDirectory() as tmp:
        options = {
            "behaviors": {
                "Pendulum": {
                    "trainer_type": "sac",
                    "hyperparameters": {
                        "batch_size": 256,
                        "buffer_size": 1_000_000,
                        "buffer_init_steps": 100,
                        "learning_rate": 1e-3,
                        "tau": 0.005,
                        "init_entcoef": 1.0,
                        "steps_per_update": 1,
                    },
                    "network_settings": {
                        "hidden_units": 256,
                        "num_layers": 2,
                        "activation": "relu",
                    },
                    "reward_signals": {"extrinsic": {"gamma": 0.99}},
                    "max_steps": steps,
                    "summary_freq": 1000,
                    "checkpoint_interval": steps * 10,
                }
            },
            "env_settings": {"env_id": "Pendulum-v1", "num_envs": 1, "seed": seed},
            "checkpoint_settings": {"run_id": "bench", "results_dir": tmp},
            "plugins": {"disabled": ["evtrain.stats_writer:default"]},
        }
        with Bus() as bus:
            bus.connect(signals.stats, track)
            start = time.perf_counter()
            result = learn(options, bus)
            elapsed = time.perf_counter() - start
    return {
        "library": "evtrain",
        "seed": seed,
        "steps": result.steps["Pendulum"],
        "seconds": elapsed,
        "final_mean_return": statistics.mean(returns[-LAST:]),
    }


def run_sb3(steps: int, seed: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(gym.make("Pendulum-v1"))
    model = SAC(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        batch_size=256,
        buffer_size=1_000_000,
        learning_starts=100,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto_1.0",
        seed=seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - start
    returns = env.get_episode_rewards()
    return {
        "library": "sb3",
        "seed": seed,
        "steps": int(model.num_timesteps),
        "seconds": elapsed,
        "final_mean_return": statistics.mean(returns[-LAST:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--worker", choices=["evtrain", "sb3"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = run_evtrain if args.worker == "evtrain" else run_sb3
        print(json.dumps(run(args.steps, args.seeds[0])))
        return
    rows = []
    for seed in args.seeds:
        for library in ("evtrain", "sb3"):
            print(f"seed {seed}: {library}...", file=sys.stderr, flush=True)
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    library,
                    "--steps",
                    str(args.steps),
                    "--seeds",
                    str(seed),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"{'library':<10}{'seed':>5}{'steps':>8}{'seconds':>9}{'steps/s':>9}"
        f"{'final mean return':>19}"
    )
    for r in rows:
        print(
            f"{r['library']:<10}{r['seed']:>5}{r['steps']:>8}{r['seconds']:>9.1f}"
            f"{r['steps'] / r['seconds']:>9.0f}{r['final_mean_return']:>19.1f}"
        )
    OUT.mkdir(exist_ok=True)
    (OUT / "sac.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
