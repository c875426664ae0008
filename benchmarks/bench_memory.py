"""PPO on masked CartPole (no velocities in the observation): LSTM vs feed-forward policy.

``tests.memory_envs.masked_cartpole`` shows the cart's position and the pole's angle only; the
velocities that balancing needs must be inferred from successive observations.  Both runs get
the same PPO settings, network width and step budget; only ``network_settings.memory``
differs (an LSTM of 64 units after the hidden layer, trained on sequences of 16 steps).  Each
run is its own subprocess with one torch thread.  Reports, per run: the mean return of the
last 100 episodes, the best mean of 20 consecutive episodes and the step it was first reached
at or above 195 (CartPole-v0's "solved"); prints a table and writes JSON to
``benchmarks/out/memory.json``.

    .venv/bin/python benchmarks/bench_memory.py --steps 150000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from common import (
    ROOT,
    Column,
    ReturnTracker,
    add_run_args,
    header,
    make_parser,
    median_of,
    one_torch_thread,
    reward_reporter,
    row,
    run_worker,
    train,
    write_json,
)

POLICIES = ("lstm", "feedforward")
SOLVED = 195.0
"""Mean of 20 episodes counted as balancing (CartPole-v0's threshold; v1's episodes go to 500)."""
COLUMNS = (
    Column("policy", 12, align="<"),
    Column("seed", 4, "d"),
    Column("last-100", 9, ".1f"),
    Column("best-20", 8, ".1f"),
    Column("steps to 195", 13),
    Column("s", 6, ".1f"),
)


def run(policy: str, steps: int, seed: int, num_envs: int) -> dict[str, Any]:
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    one_torch_thread()
    sys.path.insert(0, str(ROOT))
    from tests.memory_envs import masked_cartpole

    from evtrain import Bus
    from evtrain.trainers import (
        MemorySettings,
        NetworkSettings,
        PPOSettings,
        RewardProviders,
        RewardProviderSettings,
        TrainerSettings,
    )
    from evtrain.trainers.ppo import PPOTrainer

    memory = MemorySettings(memory_size=128, sequence_length=16) if policy == "lstm" else None
    settings = TrainerSettings(
        trainer_type="ppo",
        hyperparameters=PPOSettings(
            batch_size=256,
            buffer_size=256,
            learning_rate=1e-3,
            beta=0.0,
            lambd=0.98,
            num_epoch=20,
        ),
        network_settings=NetworkSettings(
            hidden_units=64, num_layers=1, normalize=True, activation="relu", memory=memory
        ),
        reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=0.999)),
        max_steps=steps,
        time_horizon=32,
        summary_freq=50_000,
    )
    trainer: PPOTrainer | None = None
    tracker = ReturnTracker(20, step=lambda: trainer.step if trainer else 0)
    envs = gym.vector.SyncVectorEnv(
        [masked_cartpole] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
    )
    with Bus() as bus:
        reporter = reward_reporter(bus, "MaskedCartPole", tracker.add)
        trainer = PPOTrainer("MaskedCartPole", settings, envs, reporter, seed=seed)
        elapsed, _ = train(trainer)
    envs.close()
    values = tracker.returns
    windows = [statistics.fmean(values[i - 20 : i]) for i in range(20, len(values) + 1)]
    solved_at = next(
        (tracker.steps[i + 19] for i, mean in enumerate(windows) if mean >= SOLVED), None
    )
    return {
        "policy": policy,
        "seed": seed,
        "steps": trainer.step,
        "seconds": round(elapsed, 1),
        "episodes": len(values),
        "mean_return_last_100": round(statistics.fmean(values[-100:]), 1),
        "best_mean_20": round(max(windows, default=0.0), 1),
        "steps_to_mean_20_of_195": solved_at,
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=150_000, seeds=[0, 1, 2])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--worker", choices=POLICIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(args.worker, args.steps, args.seeds[0], args.envs)))
        return

    runs = []
    print(header(COLUMNS, " "))
    for seed in args.seeds:
        for policy in args.policies:
            cmd = [sys.executable, __file__, "--worker", policy, "--steps", str(args.steps)]
            cmd += ["--seeds", str(seed), "--envs", str(args.envs)]
            r = run_worker(cmd)
            runs.append(r)
            values = (policy, seed, r["mean_return_last_100"], r["best_mean_20"])
            solved = str(r["steps_to_mean_20_of_195"])
            print(row(COLUMNS, (*values, solved, r["seconds"]), " "), flush=True)
    summary = {
        policy: median_of(runs, "mean_return_last_100", policy=policy) for policy in args.policies
    }
    for policy, median in summary.items():
        print(f"median last-100 return, {policy}: {median:.1f}")
    path = write_json("memory.json", {"args": vars(args), "runs": runs, "median_last_100": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
