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
import sys
from typing import Any

from common import (
    Column,
    ReturnTracker,
    add_run_args,
    header,
    make_parser,
    one_torch_thread,
    reward_reporter,
    row,
    run_worker,
    train,
    write_json,
)

LAST = 100
PROVIDERS = ("extrinsic", "curiosity", "rnd")
COLUMNS = (
    Column("provider", 10, align="<"),
    Column("seed", 4, "d"),
    Column("first goal", 10),
    Column("success", 8, ".2f"),
    Column("mean ret", 9, ".1f"),
    Column("s", 6, ".1f"),
)


def run(provider: str, steps: int, seed: int, strength: float) -> dict[str, Any]:
    one_torch_thread()
    from evtrain import Bus
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        TrainerSettings,
        make_vector_env,
    )
    from evtrain.trainers.settings import CuriositySettings, RewardProviders, RNDSettings

    providers = RewardProviders(
        curiosity=CuriositySettings(strength=strength) if provider == "curiosity" else None,
        rnd=RNDSettings(strength=strength) if provider == "rnd" else None,
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
        reward_signals=providers,
        max_steps=steps,
        time_horizon=128,
        summary_freq=50_000,
    )
    trainer: PPOTrainer | None = None
    tracker = ReturnTracker(LAST, step=lambda: trainer.step if trainer else 0)
    envs = make_vector_env("MountainCar-v0", 16)
    with Bus() as bus:
        reporter = reward_reporter(bus, "M", tracker.add)
        trainer = PPOTrainer("MountainCar", settings, envs, reporter, seed=seed)
        elapsed, _ = train(trainer)
    envs.close()
    returns = list(zip(tracker.steps, tracker.returns, strict=True))
    first = next((step for step, r in returns if r > -200.0), None)
    last = [r for _, r in returns[-LAST:]]
    return {
        "provider": provider,
        "seed": seed,
        "steps": trainer.step,
        "seconds": round(elapsed, 1),
        "episodes": len(returns),
        "steps_to_first_goal": first,
        "success_last_100": round(sum(r > -200.0 for r in last) / len(last), 2),
        "mean_return_last_100": round(statistics.fmean(last), 1),
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=150_000, seeds=[0, 1, 2])
    parser.add_argument("--strength", type=float, default=1.0, help="curiosity/RND strength")
    parser.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS))
    parser.add_argument("--worker", choices=PROVIDERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(args.worker, args.steps, args.seeds[0], args.strength)))
        return

    runs = []
    print(header(COLUMNS, " "))
    for seed in args.seeds:
        for provider in args.providers:
            cmd = [sys.executable, __file__, "--worker", provider, "--steps", str(args.steps)]
            cmd += ["--seeds", str(seed), "--strength", str(args.strength)]
            r = run_worker(cmd)
            runs.append(r)
            values = (provider, seed, str(r["steps_to_first_goal"]), r["success_last_100"])
            print(row(COLUMNS, (*values, r["mean_return_last_100"], r["seconds"]), " "), flush=True)
    path = write_json("curiosity.json", {"args": vars(args), "runs": runs})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
