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
import sys
from typing import Any

from common import (
    ROOT,
    add_run_args,
    make_parser,
    one_torch_thread,
    reward_reporter,
    run_worker,
    train,
    write_json,
)

KINDS = ("vector", "simple", "nature_cnn", "resnet", "match3", "fully_connected")
LAST = 20


def run(kind: str, steps: int, seed: int, size: int) -> dict[str, Any]:
    one_torch_thread()
    sys.path.insert(0, str(ROOT))  # the tests package: the pixel environment
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from tests.pixel_envs import pixel_cartpole

    from evtrain import Bus
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        RewardProviders,
        RewardProviderSettings,
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
        reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=0.98)),
        max_steps=steps,
        time_horizon=32,
        summary_freq=10_000,
    )
    returns: list[float] = []
    marks: dict[int, float | None] = {m: None for m in (10_000, 25_000, 50_000, 100_000, steps)}

    with Bus() as bus:
        reporter = reward_reporter(bus, "C", returns.append)
        trainer = PPOTrainer("CartPole", settings, envs, reporter, seed=seed)

        def mark() -> None:
            for step, value in marks.items():
                if value is None and trainer.step >= step and returns:
                    marks[step] = round(statistics.fmean(returns[-LAST:]), 1)

        elapsed, _ = train(trainer, after_advance=mark)
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
    parser = make_parser(__doc__)
    add_run_args(parser, steps=50_000, seeds=[0])
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
            r = run_worker(cmd)
            runs.append(r)
            curve = ", ".join(f"{m}: {v}" for m, v in r["mean_return_last_20"].items())
            print(
                f"{kind:16s} {seed:4d} {r['steps_per_s']:8d} {r['seconds']:7.1f}  {curve}",
                flush=True,
            )
    path = write_json("pixels.json", {"args": vars(args), "runs": runs})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
