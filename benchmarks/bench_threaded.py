"""``threaded: true`` vs ``false``: environment steps/s and final returns, side by side.

Each run is its own process with one torch thread; per seed and case the two settings run one
after the other (unthreaded first), so both see the same machine load.  Cases:

- ``ppo-cartpole``: PPO with rl-zoo's CartPole-v1 settings (``bench_ppo.py``): 8 environments,
  a rollout of 32 steps each, 20 epochs of one 256-sample minibatch;
- ``sac-pendulum``: SAC with rl-zoo's Pendulum-v1 settings (``bench_sac.py``): one environment,
  one gradient step of batch 256 on 256x256 networks per step;
- ``ppo-slow-async``: the PPO settings on ``bench_envs:slow_cartpole``, which spends 1 ms of CPU
  per step, as a heavier simulator would, each copy in its own process (``vectorization:
  async``): while the update runs, the training thread waits on the simulators, not on the GIL;
- ``ppo-slow-sync``: the same environments stepped in the training process: their Python loop
  holds the GIL the update's Python code needs.

Steps/s is over the training loop (``advance`` until ``max_steps``, then the final summary,
which waits for the last update).  Beside it, from the timers: the update's own time
(``update_thread`` on the update thread, or ``update`` unthreaded) and what the training thread
spent waiting for it (``wait_for_update``).  Final return: the mean of the last 20 episodes
(PPO) or 10 (SAC).  Writes ``benchmarks/out/threaded.json``::

    .venv/bin/python benchmarks/bench_threaded.py --seeds 0 1 2
    .venv/bin/python benchmarks/bench_threaded.py --cases sac-pendulum --steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
OUT = HERE / "out"
BOTH = (False, True)
"""Unthreaded first, then threaded."""

CASES: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {
        "trainer": "ppo",
        "env_id": "CartPole-v1",
        "num_envs": 8,
        "vectorization": "sync",
        "steps": 50_000,
        "last": 20,
    },
    "sac-pendulum": {
        "trainer": "sac",
        "env_id": "Pendulum-v1",
        "num_envs": 1,
        "vectorization": "sync",
        "steps": 10_000,
        "last": 10,
    },
    "ppo-slow-async": {
        "trainer": "ppo",
        "env_id": "bench_envs:slow_cartpole",
        "num_envs": 8,
        "vectorization": "async",
        "steps": 20_000,
        "last": 20,
    },
    "ppo-slow-sync": {
        "trainer": "ppo",
        "env_id": "bench_envs:slow_cartpole",
        "num_envs": 8,
        "vectorization": "sync",
        "steps": 20_000,
        "last": 20,
    },
}


def behavior(case: str, steps: int, threaded: bool) -> dict[str, Any]:
    """The behavior's settings as YAML would give them."""
    if CASES[case]["trainer"] == "sac":
        return {
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
            "network_settings": {"hidden_units": 256, "num_layers": 2, "activation": "relu"},
            "reward_signals": {"extrinsic": {"gamma": 0.99}},
            "max_steps": steps,
            "summary_freq": 1000,
            "threaded": threaded,
        }
    return {
        "trainer_type": "ppo",
        "hyperparameters": {
            "batch_size": 256,
            "buffer_size": 256,
            "learning_rate": 1e-3,
            "learning_rate_schedule": "linear",
            "beta": 0.0,
            "epsilon": 0.2,
            "lambd": 0.8,
            "num_epoch": 20,
        },
        "network_settings": {"hidden_units": 64, "num_layers": 2, "activation": "tanh"},
        "reward_signals": {"extrinsic": {"gamma": 0.98}},
        "max_steps": steps,
        "time_horizon": 32,
        "summary_freq": 10_000,
        "threaded": threaded,
    }


def seconds_in(tree: dict[str, Any], name: str) -> float:
    """The total of every timer called ``name`` in a ``timers.json`` tree."""
    total = 0.0
    for child_name, child in tree.get("children", {}).items():
        if child_name == name:
            total += float(child["total"])
        total += seconds_in(child, name)
    return total


def run(case: str, threaded: bool, seed: int, steps: int) -> dict[str, Any]:
    """One training loop in this process."""
    import torch

    torch.set_num_threads(1)
    from evtrain import Bus, RunOptions, StatsReporter, signals
    from evtrain.config.options import EnvironmentSettings
    from evtrain.events.stats import CUMULATIVE_REWARD
    from evtrain.run.envs import make_envs
    from evtrain.timers import reset_timers, timer_tree
    from evtrain.trainers import PPOTrainer, SACTrainer

    spec = CASES[case]
    options = RunOptions.from_dict({"behaviors": {case: behavior(case, steps, threaded)}})
    settings = options.behaviors[case]
    envs = make_envs(
        EnvironmentSettings(
            env_id=spec["env_id"],
            num_envs=spec["num_envs"],
            vectorization=spec["vectorization"],
            seed=seed,
        )
    )
    trainer_cls = SACTrainer if spec["trainer"] == "sac" else PPOTrainer
    returns: list[float] = []

    def track(event: Any) -> None:
        summary = event.values.get(CUMULATIVE_REWARD)
        if summary is not None:
            returns.extend(summary.full_dist)

    with Bus() as bus:
        bus.connect(signals.stats, track)
        trainer = trainer_cls(
            case, settings, envs, StatsReporter(bus, case), seed=seed, device="cpu"
        )
        reset_timers()
        start, cpu_start = time.perf_counter(), time.process_time()
        while not trainer.should_stop:
            trainer.advance()
        trainer.write_final_summary()  # waits for the last update
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        tree = timer_tree()
        trainer.close()
        bus.flush()
    envs.close()
    update_timer = "update_thread" if threaded else "update"
    return {
        "case": case,
        "threaded": threaded,
        "seed": seed,
        "steps": trainer.step,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "steps_per_s": trainer.step / elapsed,
        "update_seconds": seconds_in(tree, update_timer),
        "wait_seconds": seconds_in(tree, "wait_for_update"),
        "episodes": len(returns),
        "final_return": statistics.fmean(returns[-spec["last"] :]) if returns else None,
    }


def spawn(case: str, threaded: bool, seed: int, steps: int) -> dict[str, Any]:
    """:func:`run` in a fresh process (``bench_envs`` importable, also by async workers)."""
    print(f"{case} threaded={threaded} seed={seed}...", file=sys.stderr, flush=True)
    command = [sys.executable, __file__, "--worker", case, str(int(threaded)), str(seed)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run([*command, str(steps)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{case} threaded={threaded} seed={seed} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, help="max_steps of every case (default: per case)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        case, threaded, seed, steps = args.worker
        print(json.dumps(run(case, bool(int(threaded)), int(seed), int(steps))))
        return
    rows = [
        spawn(case, threaded, seed, args.steps or CASES[case]["steps"])
        for seed in args.seeds
        for case in args.cases
        for threaded in BOTH
    ]
    print(
        f"{'case':<16}{'threaded':>9}{'seed':>5}{'steps':>8}{'seconds':>9}{'steps/s':>9}"
        f"{'update s':>10}{'waited s':>10}{'final return':>14}"
    )
    for r in rows:
        final = "-" if r["final_return"] is None else f"{r['final_return']:.1f}"
        print(
            f"{r['case']:<16}{r['threaded']!s:>9}{r['seed']:>5}{r['steps']:>8}"
            f"{r['seconds']:>9.1f}{r['steps_per_s']:>9.0f}{r['update_seconds']:>10.1f}"
            f"{r['wait_seconds']:>10.1f}{final:>14}"
        )
    summary: dict[str, Any] = {}
    print("medians over seeds (threaded / unthreaded steps/s, per seed in parentheses):")
    for case in args.cases:
        mine = {t: [r for r in rows if r["case"] == case and r["threaded"] is t] for t in BOTH}
        speed = {t: statistics.median(r["steps_per_s"] for r in mine[t]) for t in BOTH}
        finals = {
            t: [r["final_return"] for r in mine[t] if r["final_return"] is not None] for t in BOTH
        }
        ratios = [
            b["steps_per_s"] / a["steps_per_s"]
            for a, b in zip(mine[False], mine[True], strict=True)
        ]
        summary[case] = {
            "unthreaded_steps_per_s": speed[False],
            "threaded_steps_per_s": speed[True],
            "speedup": speed[True] / speed[False],
            "speedups": ratios,
            "unthreaded_final_return": statistics.median(finals[False]) if finals[False] else None,
            "threaded_final_return": statistics.median(finals[True]) if finals[True] else None,
        }
        s = summary[case]
        per_seed = ", ".join(f"{x:.2f}x" for x in ratios)
        returns = "  final return " + " / ".join(
            "-" if v is None else f"{v:.1f}"
            for v in (s["unthreaded_final_return"], s["threaded_final_return"])
        )
        print(
            f"  {case:<16}{speed[False]:>8.0f} -> {speed[True]:>6.0f} steps/s  {s['speedup']:.2f}x "
            f"({per_seed}){returns}"
        )
    OUT.mkdir(exist_ok=True)
    report = {"runs": rows, "summary": summary, "cpus": os.cpu_count()}
    (OUT / "threaded.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
