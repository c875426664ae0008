"""SAC with discrete actions on CartPole-v1, beside evtrain's PPO on the same budget.

SAC: examples/configs/cartpole_sac.yaml's hyperparameters (one environment, 1000 random
warm-up steps, one gradient step per environment step, ML-Agents' discrete entropy target
0.2 log 2); PPO: rl-zoo's CartPole-v1 hyperparameters (8 environments), as in bench_ppo.py.
Each run is its own process with one torch thread.  Reports env steps/s over the whole run,
the mean return of the last 10 episodes at the end, and the first summary step (every 1000
steps) at which the mean of the last 10 episodes so far is at least 475 ("-": never), per seed
and the median over seeds.  Beside them, the floors: one CartPole-v1 step with random actions
and one discrete SAC update (critics, actor, alpha, target), each in its own process.
Writes ``benchmarks/out/sac_discrete.json``::

    python benchmarks/bench_sac_discrete.py --steps 80000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import yaml

from common import (
    CONFIGS,
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

EXAMPLE = CONFIGS / "cartpole_sac.yaml"
LAST = 10
THRESHOLD = 475.0
SUMMARY = 1000
FILL = 2000
"""Environment steps of training before the update floor is timed (the buffer they fill)."""
COLUMNS = (
    Column("trainer", 9, align="<"),
    Column("seed", 6),
    Column("steps", 8),
    Column("seconds", 9, ".1f"),
    Column("steps/s", 9, ".1f"),
    Column("final mean return", 19, ".1f"),
    Column("steps to 475", 14),
)

PPO_ZOO = {
    "trainer_type": "ppo",
    "hyperparameters": {
        "batch_size": 256,
        "buffer_size": 256,
        "learning_rate": 1e-3,
        "beta": 0.0,
        "epsilon": 0.2,
        "lambd": 0.8,
        "num_epoch": 20,
    },
    "network_settings": {"hidden_units": 64, "num_layers": 2},
    "reward_signals": {"extrinsic": {"gamma": 0.98}},
    "time_horizon": 32,
}


def sac_settings() -> dict[str, Any]:
    """The example's behavior settings (its only behavior)."""
    options: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    (settings,) = options["behaviors"].values()
    settings = dict(settings)
    for key in ("max_steps", "summary_freq", "checkpoint_interval", "keep_checkpoints"):
        settings.pop(key, None)
    return settings


def run(trainer: str, steps: int, seed: int) -> dict[str, Any]:
    one_torch_thread()
    returns: list[float] = []
    reached: list[int] = []

    def track(event: Any) -> None:
        returns.extend(episode_returns(event))
        if not reached and len(returns) >= LAST and statistics.mean(returns[-LAST:]) >= THRESHOLD:
            reached.append(event.step)

    settings = sac_settings() if trainer == "sac" else dict(PPO_ZOO)
    num_envs = 1 if trainer == "sac" else 8
    options = {
        "behaviors": {
            "CartPole": {
                **settings,
                "max_steps": steps,
                "summary_freq": SUMMARY,
                "checkpoint_interval": steps * 10,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": num_envs, "seed": seed},
        "plugins": {"disabled": ["evtrain.stats_writer:default"]},
    }
    result, elapsed = learn_here(options, track)
    return {
        "trainer": trainer,
        "seed": seed,
        "steps": result.steps["CartPole"],
        "seconds": elapsed,
        "final_mean_return": statistics.mean(returns[-LAST:]),
        "steps_to_475": reached[0] if reached else None,
    }


def floor_env(steps: int) -> dict[str, Any]:
    """Seconds per CartPole-v1 step with random actions, resets included."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=steps)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            env.reset()
    return {"floor": "env step", "seconds_per": (time.perf_counter() - start) / steps}


def floor_update(updates: int) -> dict[str, Any]:
    """Seconds per discrete SAC update once training has filled the buffer."""
    one_torch_thread()
    from evtrain import Bus, RunOptions, StatsReporter
    from evtrain.trainers import SACTrainer, make_vector_env

    options = RunOptions.from_dict(
        {"behaviors": {"CartPole": {**sac_settings(), "max_steps": 10 * FILL}}}
    )
    settings = options.behaviors["CartPole"]
    with Bus() as bus:
        envs = make_vector_env("CartPole-v1", 1)
        trainer = SACTrainer("CartPole", settings, envs, StatsReporter(bus, "CartPole"), seed=0)
        while trainer.step < FILL:
            trainer.advance()
        start = time.perf_counter()
        for _ in range(updates):
            trainer._learn(1, trainer.hp.learning_rate, trainer.step)  # as a step learns
        elapsed = time.perf_counter() - start
        envs.close()
    return {"floor": "discrete SAC update", "seconds_per": elapsed / updates}


WORKERS: dict[str, Any] = {
    "sac": lambda steps, seed: run("sac", steps, seed),
    "ppo": lambda steps, seed: run("ppo", steps, seed),
    "floor-env": floor_env,
    "floor-update": floor_update,
}


def reached(value: int | None) -> str:
    return "-" if value is None else str(value)


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=80_000, seeds=[0])
    parser.add_argument("--updates", type=int, default=1000, help="updates of the update floor")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("args", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](*args.args)))
        return
    floors = [spawn(__file__, "floor-env", 20_000), spawn(__file__, "floor-update", args.updates)]
    rows = [
        spawn(__file__, trainer, args.steps, seed)
        for seed in args.seeds
        for trainer in ("sac", "ppo")
    ]
    for r in rows:
        r["steps_per_s"] = r["steps"] / r["seconds"]
    keys = ("trainer", "seed", "steps", "seconds", "steps_per_s", "final_mean_return")
    print(header(COLUMNS))
    for r in rows:
        print(row(COLUMNS, [*(r[key] for key in keys), reached(r["steps_to_475"])]))
    summary = {}
    for trainer in ("sac", "ppo"):
        mine = [r for r in rows if r["trainer"] == trainer]
        s = summary[trainer] = {
            "steps_per_s": median_of(mine, "steps_per_s"),
            "final_mean_return": median_of(mine, "final_mean_return"),
            "reached_475": sum(r["steps_to_475"] is not None for r in mine),
        }
        medians = (trainer, "median", "", "", s["steps_per_s"], s["final_mean_return"])
        print(row(COLUMNS[:-1], medians) + f"{s['reached_475']:>8}/{len(mine)} seeds")
    print("floors (one process each, 1 torch thread):")
    for f in floors:
        print(
            f"  {f['floor']:<20}{f['seconds_per'] * 1e3:>8.3f} ms  ({1 / f['seconds_per']:.0f}/s)"
        )
    env, update = floors[0]["seconds_per"], floors[1]["seconds_per"]
    print(f"  env step + update: {1 / (env + update):.0f} steps/s at most")
    report = {"runs": rows, "summary": summary, "floors": floors}
    write_json("sac_discrete.json", report)


if __name__ == "__main__":
    main()
