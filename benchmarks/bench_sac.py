"""SAC on Pendulum-v1: evtrain and Stable-Baselines3 side by side, same hyperparameters.

rl-zoo's Pendulum-v1 SAC settings (learning rate 1e-3, 20k steps) on SB3's SAC defaults:
batch 256, tau 0.005, gamma 0.99, 100 random warm-up steps, one gradient step per env step,
automatic entropy tuning from 1.0, two hidden layers of 256 units.  Each run is its own
process with one torch thread; the libraries alternate per seed.  Reports env steps/s over the
whole run and the mean return of the last 10 episodes at the end (target: ≥ -200 within 20k
steps), per seed and the median over seeds, with evtrain's speed-up over SB3 (target: ≥ 2x).

Beside them, the floors a run cannot go below, each measured in its own process: one
Pendulum-v1 step with random actions, one evtrain SAC update (critics, actor, alpha, target)
and one SB3 ``train`` gradient step, both on a buffer filled by 1000 steps of training.
Writes ``benchmarks/out/sac.json``::

    python benchmarks/bench_sac.py --steps 20000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from typing import Any

from common import (
    Column,
    add_run_args,
    episode_returns,
    header,
    learn_here,
    make_parser,
    median_of,
    one_torch_thread,
    row,
    spawn,
    write_json,
)

LAST = 10
COLUMNS = (
    Column("library", 10, align="<"),
    Column("seed", 6),
    Column("steps", 8),
    Column("seconds", 9, ".1f"),
    Column("steps/s", 9, ".1f"),
    Column("final mean return", 19, ".1f"),
)


EVTRAIN_HYPERPARAMETERS = {
    "batch_size": 256,
    "buffer_size": 1_000_000,
    "buffer_init_steps": 100,
    "learning_rate": 1e-3,
    "tau": 0.005,
    "init_entcoef": 1.0,
    "steps_per_update": 1,
}
EVTRAIN_NETWORK = {"hidden_units": 256, "num_layers": 2, "activation": "relu"}
FILL = 1000
"""Environment steps of training before an update floor is timed (the buffer they fill)."""


def run_evtrain(steps: int, seed: int) -> dict[str, Any]:
    one_torch_thread()
    returns: list[float] = []
    options = {
        "behaviors": {
            "Pendulum": {
                "trainer_type": "sac",
                "hyperparameters": EVTRAIN_HYPERPARAMETERS,
                "network_settings": EVTRAIN_NETWORK,
                "reward_signals": {"extrinsic": {"gamma": 0.99}},
                "max_steps": steps,
                "summary_freq": 1000,
                "checkpoint_interval": steps * 10,
            }
        },
        "env_settings": {"env_id": "Pendulum-v1", "num_envs": 1, "seed": seed},
        "plugins": {"disabled": ["evtrain.stats_writer:default"]},
    }
    result, elapsed = learn_here(options, lambda event: returns.extend(episode_returns(event)))
    return {
        "library": "evtrain",
        "seed": seed,
        "steps": result.steps["Pendulum"],
        "seconds": elapsed,
        "final_mean_return": statistics.mean(returns[-LAST:]),
    }


def sb3_model(seed: int) -> Any:
    one_torch_thread()
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(gym.make("Pendulum-v1"))
    return SAC(
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


def run_sb3(steps: int, seed: int) -> dict[str, Any]:
    model = sb3_model(seed)
    env = model.get_env().envs[0]
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


def minor_faults() -> int:
    """This process's minor page faults so far (memory the kernel had to map on first use)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def floor_env(steps: int) -> dict[str, Any]:
    """Seconds per Pendulum-v1 step with random actions, resets included."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-2.0, 2.0, size=(steps, 1)).astype(np.float32)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return {"floor": "env step", "seconds_per": (time.perf_counter() - start) / steps}


def floor_evtrain_update(updates: int) -> dict[str, Any]:
    """Seconds per evtrain SAC update (batch 256) once training has filled the buffer."""
    one_torch_thread()
    from evtrain import Bus, StatsReporter
    from evtrain.run.build import keep_freed_memory
    from evtrain.trainers import (
        NetworkSettings,
        RewardProviders,
        RewardProviderSettings,
        SACSettings,
        SACTrainer,
        TrainerSettings,
        make_vector_env,
    )

    settings = TrainerSettings(
        trainer_type="sac",
        hyperparameters=SACSettings(**EVTRAIN_HYPERPARAMETERS),
        network_settings=NetworkSettings(**EVTRAIN_NETWORK),
        reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=0.99)),
        max_steps=10 * FILL,
        summary_freq=FILL,
    )
    keep_freed_memory()  # as a run does (configure_torch)
    with Bus() as bus:
        envs = make_vector_env("Pendulum-v1", 1)
        trainer = SACTrainer("Pendulum", settings, envs, StatsReporter(bus, "Pendulum"), seed=0)
        while trainer.step < FILL:
            trainer.advance()
        faults = minor_faults()
        start = time.perf_counter()
        for _ in range(updates):
            trainer._learn(1, trainer.hp.learning_rate, trainer.step)  # as a step learns
        elapsed = time.perf_counter() - start
        faults = minor_faults() - faults
        envs.close()
    return {
        "floor": "evtrain update",
        "seconds_per": elapsed / updates,
        "page_faults_per": faults / updates,
    }


def floor_sb3_update(updates: int) -> dict[str, Any]:
    """Seconds per SB3 SAC gradient step (batch 256) once training has filled the buffer."""
    model = sb3_model(0)
    model.learn(total_timesteps=FILL)
    faults = minor_faults()
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=256)
    return {
        "floor": "sb3 update",
        "seconds_per": (time.perf_counter() - start) / updates,
        "page_faults_per": (minor_faults() - faults) / updates,
    }


WORKERS: dict[str, Any] = {
    "evtrain": run_evtrain,
    "sb3": run_sb3,
    "floor-env": floor_env,
    "floor-evtrain": floor_evtrain_update,
    "floor-sb3": floor_sb3_update,
}


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=20_000, seeds=[0])
    parser.add_argument("--updates", type=int, default=2000, help="updates per update floor")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("args", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](*args.args)))
        return
    floors = [
        spawn(__file__, "floor-env", args.steps),
        spawn(__file__, "floor-evtrain", args.updates),
        spawn(__file__, "floor-sb3", args.updates),
    ]
    rows = [
        spawn(__file__, library, args.steps, seed)
        for seed in args.seeds
        for library in ("evtrain", "sb3")
    ]
    for r in rows:
        r["steps_per_s"] = r["steps"] / r["seconds"]
    keys = ("library", "seed", "steps", "seconds", "steps_per_s", "final_mean_return")
    print(header(COLUMNS))
    for r in rows:
        print(row(COLUMNS, [r[key] for key in keys]))
    summary = {}
    for library in ("evtrain", "sb3"):
        mine = summary[library] = {
            "steps_per_s": median_of(rows, "steps_per_s", library=library),
            "final_mean_return": median_of(rows, "final_mean_return", library=library),
        }
        medians = (mine["steps_per_s"], mine["final_mean_return"])
        print(row(COLUMNS, (library, "median", "", "", *medians)))
    ratios = [
        e["steps_per_s"] / s["steps_per_s"] for e, s in zip(rows[::2], rows[1::2], strict=True)
    ]
    summary["ratio"] = summary["evtrain"]["steps_per_s"] / summary["sb3"]["steps_per_s"]
    print(
        "evtrain/sb3 steps/s: "
        + ", ".join(f"seed {r['seed']} {x:.2f}x" for r, x in zip(rows[::2], ratios, strict=True))
        + f"; medians {summary['ratio']:.2f}x"
    )
    print("floors (one process each, 1 torch thread):")
    for f in floors:
        print(
            f"  {f['floor']:<16}{f['seconds_per'] * 1e3:>8.3f} ms  ({1 / f['seconds_per']:.0f}/s)"
        )
    env, update = floors[0]["seconds_per"], floors[1]["seconds_per"]
    print(f"  evtrain env step + update: {1 / (env + update):.0f} steps/s at most")
    report = {"runs": rows, "ratios": ratios, "summary": summary, "floors": floors}
    write_json("sac.json", report)


if __name__ == "__main__":
    main()
