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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).parent / "out"
EXAMPLE = Path(__file__).parent.parent / "examples" / "configs" / "cartpole_sac.yaml"
LAST = 10
THRESHOLD = 475.0
SUMMARY = 1000
FILL = 2000
"""Environment steps of training before the update floor is timed (the buffer they fill)."""

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
    import torch

    torch.set_num_threads(1)
    from evtrain import Bus, signals
    from evtrain.run.learn import learn

    returns: list[float] = []
    reached: list[int] = []

    def track(event: Any) -> None:
        summary = event.values.get("Environment/Cumulative Reward")
        if summary is not None:
            returns.extend(summary.full_dist)
        if not reached and len(returns) >= LAST and statistics.mean(returns[-LAST:]) >= THRESHOLD:
            reached.append(event.step)

    settings = sac_settings() if trainer == "sac" else dict(PPO_ZOO)
    num_envs = 1 if trainer == "sac" else 8
    with tempfile.TemporaryDirectory() as tmp:
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
            "checkpoint_settings": {"run_id": "bench", "results_dir": tmp},
            "plugins": {"disabled": ["evtrain.stats_writer:default"]},
        }
        with Bus() as bus:
            bus.connect(signals.stats, track)
            start = time.perf_counter()
            result = learn(options, bus)
            elapsed = time.perf_counter() - start
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
    import torch

    torch.set_num_threads(1)
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
            trainer._update()
        elapsed = time.perf_counter() - start
        envs.close()
    return {"floor": "discrete SAC update", "seconds_per": elapsed / updates}


WORKERS: dict[str, Any] = {
    "sac": lambda steps, seed: run("sac", steps, seed),
    "ppo": lambda steps, seed: run("ppo", steps, seed),
    "floor-env": floor_env,
    "floor-update": floor_update,
}


def worker(name: str, *args: int) -> dict[str, Any]:
    """Run ``WORKERS[name](*args)`` in a fresh process; its result."""
    print(f"{name} {' '.join(map(str, args))}...", file=sys.stderr, flush=True)
    command = [sys.executable, __file__, "--worker", name, *map(str, args)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def reached(value: int | None) -> str:
    return "-" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=80_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--updates", type=int, default=1000, help="updates of the update floor")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("args", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](*args.args)))
        return
    floors = [worker("floor-env", 20_000), worker("floor-update", args.updates)]
    rows = [worker(trainer, args.steps, seed) for seed in args.seeds for trainer in ("sac", "ppo")]
    for r in rows:
        r["steps_per_s"] = r["steps"] / r["seconds"]
    print(
        f"{'trainer':<9}{'seed':>6}{'steps':>8}{'seconds':>9}{'steps/s':>9}"
        f"{'final mean return':>19}{'steps to 475':>14}"
    )
    for r in rows:
        print(
            f"{r['trainer']:<9}{r['seed']:>6}{r['steps']:>8}{r['seconds']:>9.1f}"
            f"{r['steps_per_s']:>9.1f}{r['final_mean_return']:>19.1f}"
            f"{reached(r['steps_to_475']):>14}"
        )
    summary = {}
    for trainer in ("sac", "ppo"):
        mine = [r for r in rows if r["trainer"] == trainer]
        summary[trainer] = {
            "steps_per_s": statistics.median(r["steps_per_s"] for r in mine),
            "final_mean_return": statistics.median(r["final_mean_return"] for r in mine),
            "reached_475": sum(r["steps_to_475"] is not None for r in mine),
        }
        print(
            f"{trainer:<9}{'median':>6}{'':>8}{'':>9}{summary[trainer]['steps_per_s']:>9.1f}"
            f"{summary[trainer]['final_mean_return']:>19.1f}"
            f"{summary[trainer]['reached_475']:>8}/{len(mine)} seeds"
        )
    print("floors (one process each, 1 torch thread):")
    for f in floors:
        print(
            f"  {f['floor']:<20}{f['seconds_per'] * 1e3:>8.3f} ms  ({1 / f['seconds_per']:.0f}/s)"
        )
    env, update = floors[0]["seconds_per"], floors[1]["seconds_per"]
    print(f"  env step + update: {1 / (env + update):.0f} steps/s at most")
    OUT.mkdir(exist_ok=True)
    report = {"runs": rows, "summary": summary, "floors": floors}
    (OUT / "sac_discrete.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
