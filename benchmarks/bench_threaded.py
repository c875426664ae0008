"""``threaded: true`` vs ``false``: environment steps/s and final returns, side by side.

Each case and seed runs in a process of its own with one torch thread, holding both trainers
(same settings and seed but ``threaded``, each with its own environments): they take turns of
``--segment`` seconds until both reach ``max_steps``, so the two see the same machine load,
drifting or not (this machine's 2 cores are shared).  A turn ends with ``wait_for_update``, so
that no work of one trainer runs in the other's turn.  Cases:

- ``ppo-cartpole``: PPO with rl-zoo's CartPole-v1 settings (``bench_ppo.py``): 8 environments,
  a rollout of 32 steps each, 20 epochs of one 256-sample minibatch;
- ``sac-pendulum``: SAC with rl-zoo's Pendulum-v1 settings (``bench_sac.py``): one environment,
  one gradient step of batch 256 on 256x256 networks per step;
- ``ppo-slow-async``: the PPO settings on ``bench_envs:slow_cartpole``, which spends 1 ms of CPU
  per step, as a heavier simulator would, each copy in its own process (``vectorization:
  async``): while the update runs, the training thread waits on the simulators, not on the GIL;
- ``ppo-slow-sync``: the same environments stepped in the training process, whose Python loop
  holds the GIL that the update's Python code needs;
- ``sac-slow-async``: the SAC settings on ``bench_envs:slow_pendulum`` (1 ms of CPU per step) in
  a process of its own.

Steps/s is over each trainer's turns (``advance`` until ``max_steps``, then the final summary,
which waits for the last update).  Beside it: the CPU seconds of the training process in those
turns (all its threads; not the async environments' processes), and from the timers the
update's own time (``update_thread`` on the update thread; unthreaded ``update``) and how long
the training thread waited for it (``wait_for_update``).  Final return: the mean of the last 20
episodes (PPO) or 10 (SAC).  Writes ``benchmarks/out/threaded.json``::

    .venv/bin/python benchmarks/bench_threaded.py --seeds 0 1 2
    .venv/bin/python benchmarks/bench_threaded.py --cases sac-pendulum --steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from common import (
    Column,
    add_run_args,
    bench_env,
    episode_returns,
    header,
    make_parser,
    median_of,
    one_torch_thread,
    row,
    run_worker,
    timer_total,
    write_json,
)

BOTH = (False, True)
"""Unthreaded, then threaded: the order of the turns."""
COLUMNS = (
    Column("case", 16, align="<"),
    Column("threaded", 9),
    Column("seed", 5),
    Column("steps", 8),
    Column("seconds", 9, ".1f"),
    Column("cpu s", 7, ".1f"),
    Column("steps/s", 9, ".0f"),
    Column("update s", 10, ".1f"),
    Column("waited s", 10, ".1f"),
    Column("final return", 14),
)

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
        "steps": 5_000,
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
    "sac-slow-async": {
        "trainer": "sac",
        "env_id": "bench_envs:slow_pendulum",
        "num_envs": 1,
        "vectorization": "async",
        "steps": 5_000,
        "last": 10,
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


def run(case: str, seed: int, steps: int, segment: float) -> list[dict[str, Any]]:
    """Both trainers of ``case`` in this process, taking turns of ``segment`` seconds."""
    one_torch_thread()
    from evtrain import Bus, RunOptions, StatsReporter, signals
    from evtrain.config.options import EnvironmentSettings
    from evtrain.run.environments.envs import make_envs
    from evtrain.timers import reset_timers, timer_tree
    from evtrain.trainers import PPOTrainer, SACTrainer

    spec = CASES[case]
    trainer_cls = SACTrainer if spec["trainer"] == "sac" else PPOTrainer
    returns: dict[bool, list[float]] = {t: [] for t in BOTH}
    seconds = dict.fromkeys(BOTH, 0.0)
    cpu = dict.fromkeys(BOTH, 0.0)

    def tracker(threaded: bool) -> Any:
        def track(event: Any) -> None:
            returns[threaded].extend(episode_returns(event))

        return track

    with Bus() as bus:
        trainers = {}
        for threaded in BOTH:
            name = f"{case}-{'threaded' if threaded else 'unthreaded'}"
            options = RunOptions.from_dict({"behaviors": {name: behavior(case, steps, threaded)}})
            envs = make_envs(
                EnvironmentSettings(
                    env_id=spec["env_id"],
                    num_envs=spec["num_envs"],
                    vectorization=spec["vectorization"],
                    seed=seed,
                )
            )
            bus.connect(signals.stats, tracker(threaded), sender=name)
            trainers[threaded] = trainer_cls(
                name, options.behaviors[name], envs, StatsReporter(bus, name), seed=seed
            )
        reset_timers()
        while not all(t.should_stop for t in trainers.values()):
            for threaded, trainer in trainers.items():
                if trainer.should_stop:
                    continue
                start, cpu_start = time.perf_counter(), time.process_time()
                end = start + segment
                while not trainer.should_stop and time.perf_counter() < end:
                    trainer.advance()
                if trainer.should_stop:
                    trainer.write_final_summary()  # waits for the last update
                else:
                    trainer.wait_for_update()  # none of its work in the other's turn
                seconds[threaded] += time.perf_counter() - start
                cpu[threaded] += time.process_time() - cpu_start
        tree = timer_tree()
        for trainer in trainers.values():
            trainer.close()
            trainer.envs.close()
        bus.flush()
    return [
        {
            "case": case,
            "threaded": threaded,
            "seed": seed,
            "steps": trainer.step,
            "seconds": seconds[threaded],
            "cpu_seconds": cpu[threaded],
            "steps_per_s": trainer.step / seconds[threaded],
            # the unthreaded "update" timer also holds the threaded trainer's hand-overs (µs)
            "update_seconds": timer_total(tree, "update_thread" if threaded else "update"),
            "wait_seconds": timer_total(tree, "wait_for_update") if threaded else 0.0,
            "episodes": len(returns[threaded]),
            "final_return": (
                statistics.fmean(returns[threaded][-spec["last"] :]) if returns[threaded] else None
            ),
        }
        for threaded, trainer in trainers.items()
    ]


def spawn(case: str, seed: int, steps: int, segment: float) -> list[dict[str, Any]]:
    """:func:`run` in a fresh process (``bench_envs`` importable, also by async workers)."""
    print(f"{case} seed={seed} ({steps} steps)...", file=sys.stderr, flush=True)
    command = [sys.executable, __file__, "--worker", case, str(seed), str(steps), str(segment)]
    rows: list[dict[str, Any]] = run_worker(command, env=bench_env(OMP_NUM_THREADS="1"))
    a, b = rows
    print(
        f"  {a['steps_per_s']:.0f} -> {b['steps_per_s']:.0f} steps/s "
        f"({b['steps_per_s'] / a['steps_per_s']:.2f}x)",
        file=sys.stderr,
        flush=True,
    )
    return rows


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    add_run_args(parser, seeds=[0])
    parser.add_argument("--steps", type=int, help="max_steps of every case (default: per case)")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiplies each case's default max_steps"
    )
    parser.add_argument("--segment", type=float, default=1.0, help="seconds per turn")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        case, seed, steps, segment = args.worker
        print(json.dumps(run(case, int(seed), int(steps), float(segment))))
        return
    rows = [
        row
        for seed in args.seeds
        for case in args.cases
        for row in spawn(
            case, seed, args.steps or round(CASES[case]["steps"] * args.scale), args.segment
        )
    ]
    print(header(COLUMNS))
    keys = ("seed", "steps", "seconds", "cpu_seconds", "steps_per_s")
    for r in rows:
        final = "-" if r["final_return"] is None else f"{r['final_return']:.1f}"
        values = (r["case"], str(r["threaded"]), *(r[key] for key in keys))
        print(row(COLUMNS, (*values, r["update_seconds"], r["wait_seconds"], final)))
    summary: dict[str, Any] = {}
    print("medians over seeds: steps/s unthreaded -> threaded, speed-up (per seed), final return")
    for case in args.cases:
        mine = {t: [r for r in rows if r["case"] == case and r["threaded"] is t] for t in BOTH}
        speed = {t: median_of(mine[t], "steps_per_s") for t in BOTH}
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
            "speedup": statistics.median(ratios),
            "speedups": ratios,
            "unthreaded_final_return": statistics.median(finals[False]) if finals[False] else None,
            "threaded_final_return": statistics.median(finals[True]) if finals[True] else None,
        }
        s = summary[case]
        per_seed = ", ".join(f"{x:.2f}x" for x in ratios)
        returns = " / ".join(
            "-" if v is None else f"{v:.1f}"
            for v in (s["unthreaded_final_return"], s["threaded_final_return"])
        )
        print(
            f"  {case:<16}{speed[False]:>7.0f} -> {speed[True]:>6.0f}  {s['speedup']:.2f}x "
            f"({per_seed})  {returns}"
        )
    report = {"runs": rows, "summary": summary, "cpus": os.cpu_count(), "segment": args.segment}
    write_json("threaded.json", report)


if __name__ == "__main__":
    main()
