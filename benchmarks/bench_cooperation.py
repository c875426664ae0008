"""Cooperation on mpe2 simple_spread_v3: POCA vs MAPPO vs independent PPO vs random, equal steps.

Three agents (behavior ``agent``) must cover three landmarks without colliding
(``simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25)``, discrete actions):
each agent's reward is half the team's (minus the distances from each landmark to its nearest
agent) and half its own (minus its collisions).  The same settings and step budget for
``poca``, ``mappo`` and ``ppo`` (independent PPO: one policy shared by the agents, a critic of
each agent's own observation); ``random`` is uniformly random actions on the PettingZoo
environment itself.  Steps are agent steps (an environment step of 3 agents is 3), as evtrain
counts them.  Each run is its own subprocess with one torch thread.  Reports, per run: the
mean per-agent episode return of the last 100 agent episodes (``Environment/Cumulative
Reward``) and steps/s; per variant the median and spread over seeds; prints a table and writes
JSON to ``benchmarks/out/cooperation.json``.

    .venv/bin/python benchmarks/bench_cooperation.py --steps 500000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
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
    run_worker,
    write_json,
)

VARIANTS = ("poca", "mappo", "ppo", "random")
ENV_ID = "mpe2.simple_spread_v3:parallel_env"
ENV_KWARGS = {"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False}
LAST = 100
"""Agent episodes the reported mean is over."""
COLUMNS = (
    Column("variant", 8, align="<"),
    Column("seed", 5, "d"),
    Column("steps", 9, "d"),
    Column("last-100 return", 16, ".2f"),
    Column("steps/s", 9, ",.0f"),
    Column("s", 7, ".1f"),
)


def options(variant: str, steps: int, seed: int, copies: int) -> dict[str, Any]:
    """The run's configuration: the MAPPO paper's MPE settings where evtrain has the key
    (learning rate 7e-4, 10 epochs, entropy 0.01, 64 units, gamma 0.99, lambda 0.95)."""
    rollout = copies * 3 * 75  # three 25-step episodes of every copy
    behavior = {
        "trainer_type": variant,
        "hyperparameters": {
            "batch_size": rollout // 3,
            "buffer_size": rollout,
            "learning_rate": 7.0e-4,
            "learning_rate_schedule": "constant",
            "beta": 0.01,
            "num_epoch": 10,
            "lambd": 0.95,
        },
        "network_settings": {"hidden_units": 64, "num_layers": 2, "normalize": True},
        "reward_signals": {"extrinsic": {"gamma": 0.99}},
        "max_steps": steps,
        "time_horizon": 25,
        "summary_freq": max(steps // 10, rollout),
        "checkpoint_interval": steps,
        "keep_checkpoints": 1,
    }
    environment = {"env_id": ENV_ID, "env_kwargs": ENV_KWARGS, "num_envs": copies, "seed": seed}
    return {
        "behaviors": {"agent": behavior},
        "env_settings": environment,
        "torch_settings": {"device": "cpu"},
    }


def run_trainer(variant: str, steps: int, seed: int, copies: int) -> dict[str, Any]:
    """One training run in this process."""
    one_torch_thread()
    returns: list[float] = []
    config = options(variant, steps, seed, copies)
    result, seconds = learn_here(config, lambda event: returns.extend(episode_returns(event)))
    done = result.steps["agent"]
    return {
        "variant": variant,
        "seed": seed,
        "steps": done,
        "seconds": round(seconds, 1),
        "steps_per_s": round(done / seconds, 1),
        "episodes": len(returns),
        "mean_return_last_100": round(statistics.fmean(returns[-LAST:]), 3),
    }


def run_random(steps: int, seed: int) -> dict[str, Any]:
    """Uniformly random actions on the PettingZoo environment, ``steps`` agent steps."""
    import numpy as np
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(**ENV_KWARGS)
    rng = np.random.default_rng(seed)
    returns: list[float] = []
    done = 0
    start = time.perf_counter()
    env.reset(seed=seed)
    totals = dict.fromkeys(env.agents, 0.0)
    while done < steps:
        actions = {agent: int(rng.integers(5)) for agent in env.agents}
        rewards = env.step(actions)[1]
        done += len(actions)
        for agent, reward in rewards.items():
            totals[agent] += float(reward)
        if not env.agents:
            returns.extend(totals.values())
            env.reset(seed=int(rng.integers(2**31)))
            totals = dict.fromkeys(env.agents, 0.0)
    seconds = time.perf_counter() - start
    env.close()
    return {
        "variant": "random",
        "seed": seed,
        "steps": done,
        "seconds": round(seconds, 1),
        "steps_per_s": round(done / seconds, 1),
        "episodes": len(returns),
        "mean_return_last_100": round(statistics.fmean(returns[-LAST:]), 3),
        "mean_return_all": round(statistics.fmean(returns), 3),
        "std_return_all": round(statistics.pstdev(returns), 3),
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=500_000, seeds=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--envs", type=int, default=16, help="environment copies per run")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        seed = args.seeds[0]
        if args.worker == "random":
            print(json.dumps(run_random(args.steps, seed)))
        else:
            print(json.dumps(run_trainer(args.worker, args.steps, seed, args.envs)))
        return

    runs = []
    print(header(COLUMNS, " "))
    for seed in args.seeds:
        for variant in args.variants:
            cmd = [sys.executable, __file__, "--worker", variant, "--steps", str(args.steps)]
            cmd += ["--seeds", str(seed), "--envs", str(args.envs)]
            r = run_worker(cmd)
            runs.append(r)
            values = (variant, seed, r["steps"], r["mean_return_last_100"])
            print(row(COLUMNS, (*values, r["steps_per_s"], r["seconds"]), " "), flush=True)
    summary = {}
    for variant in args.variants:
        finals = [r["mean_return_last_100"] for r in runs if r["variant"] == variant]
        summary[variant] = {
            "median_last_100": median_of(runs, "mean_return_last_100", variant=variant),
            "min_last_100": min(finals),
            "max_last_100": max(finals),
            "median_steps_per_s": median_of(runs, "steps_per_s", variant=variant),
        }
        print(
            f"{variant}: median last-100 return {summary[variant]['median_last_100']:.2f} "
            f"(seeds {min(finals):.2f} .. {max(finals):.2f})"
        )
    report = {"args": vars(args), "env": {"id": ENV_ID, **ENV_KWARGS}, "runs": runs}
    path = write_json("cooperation.json", {**report, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
