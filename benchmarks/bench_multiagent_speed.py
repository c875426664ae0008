"""Steps/s of poca, mappo and ppo on agent slots beside single-agent PPO, same model and steps.

The multi-agent cases train ``mpe2.simple_spread_v3`` (3 agents, 18 observations, 5 actions)
with :mod:`bench_cooperation`'s settings: 16 copies (48 agent slots), rollouts of 3,600 agent
steps, minibatches of 1,200, 10 epochs, two hidden layers of 64, ``normalize``.  ``ppo-cartpole``
is single-agent PPO on ``CartPole-v1`` (4 observations, 2 actions) with the same settings and
48 copies, so that every case steps 48 slots and updates on the same rollout and minibatch
shapes; only the environment and what the trainer does with a group differ.  Every case
runs ``--steps`` agent steps (an environment step of spread is 3), ``--repeats`` times,
alternating, each in its own process with one torch thread.  Steps/s are over the training
loop (``train`` in the run's ``timers.json``: building the trainers and the final checkpoint
and export left out), shown with the loop's rollout and update seconds, the whole
``learn()``'s wall time, and the whole process's (``process s``: from starting the worker to
its exit, imports included, as a user's ``evtrain learn`` would take); the medians over
repeats are reported, and each case's median update and process seconds over ``ppo``'s (on
the same agent slots) when ``ppo`` is among the cases.  ``env-spread`` and
``env-cartpole`` are the environments alone under random actions (simple_spread through
PettingZoo's parallel API, one copy; CartPole through ``gymnasium.make``): the floor under
each.  Prints a table and writes JSON to
``benchmarks/out/multiagent_speed.json``::

    .venv/bin/python benchmarks/bench_multiagent_speed.py --steps 36000 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_cooperation import GAMES, options, run_random
from common import (
    Column,
    add_run_args,
    header,
    machine,
    make_parser,
    median_of,
    one_torch_thread,
    row,
    run_worker,
    timer_total,
    write_json,
)

CASES = ("poca", "mappo", "ppo", "ppo-cartpole", "env-spread", "env-cartpole")
SLOTS = 48
"""Agent slots every trainer steps: 16 copies of spread's 3 agents, or 48 CartPoles."""
COLUMNS = (
    Column("case", 18, align="<"),
    Column("agent steps/s", 14, ",.0f"),
    Column("env steps/s", 12, ",.0f"),
    Column("rollout s", 10, ".1f"),
    Column("update s", 9, ".1f"),
    Column("train s", 8, ".1f"),
    Column("wall s", 7, ".1f"),
    Column("process s", 10, ".1f"),
)


def config(case: str, steps: int) -> dict[str, Any]:
    """The case's configuration: bench_cooperation's spread settings; CartPole's the same."""
    spread = GAMES["spread"]
    if case != "ppo-cartpole":
        return options(spread, case, steps, 0, SLOTS // spread.agents)
    settings = options(spread, "ppo", steps, 0, SLOTS // spread.agents)
    settings["behaviors"] = {"CartPole": settings["behaviors"]["agent"]}
    settings["env_settings"] = {"env_id": "CartPole-v1", "num_envs": SLOTS, "seed": 0}
    return settings


def run_trainer(case: str, steps: int) -> dict[str, Any]:
    """One training run in this process; its speed and where its time went."""
    from evtrain import Bus
    from evtrain.run.learn import learn

    one_torch_thread()
    agents = 1 if case == "ppo-cartpole" else GAMES["spread"].agents
    with tempfile.TemporaryDirectory() as tmp:
        settings = {**config(case, steps), "checkpoint_settings": {"run_id": "speed"}}
        settings["checkpoint_settings"]["results_dir"] = tmp
        with Bus() as bus:
            start = time.perf_counter()
            result = learn(settings, bus)
            seconds = time.perf_counter() - start
        timers = json.loads((Path(tmp) / "speed" / "run_logs" / "timers.json").read_text())
    done = next(iter(result.steps.values()))
    train = timer_total(timers, "train")
    return {
        "case": case,
        "steps": done,
        "seconds": round(seconds, 2),
        "train_s": round(train, 2),
        "steps_per_s": round(done / train, 1),
        "env_steps_per_s": round(done / agents / train, 1),
        "rollout_s": round(timer_total(timers, "rollout"), 2),
        "update_s": round(timer_total(timers, "update"), 2),
    }


def run_env(case: str, steps: int) -> dict[str, Any]:
    """The environment alone under random actions, ``steps`` agent steps."""
    if case == "env-spread":
        spread = GAMES["spread"]
        r = run_random(spread, steps, 0)
        steps, seconds, agents = r["steps"], r["steps"] / r["steps_per_s"], spread.agents
    else:
        import gymnasium as gym

        env = gym.make("CartPole-v1")
        env.reset(seed=0)
        env.action_space.seed(0)
        start = time.perf_counter()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        seconds, agents = time.perf_counter() - start, 1
    return {
        "case": case,
        "steps": steps,
        "seconds": round(seconds, 2),
        "train_s": round(seconds, 2),
        "steps_per_s": round(steps / seconds, 1),
        "env_steps_per_s": round(steps / agents / seconds, 1),
        "rollout_s": None,
        "update_s": None,
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=36_000, repeats=2)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = run_env if args.worker.startswith("env-") else run_trainer
        print(json.dumps(run(args.worker, args.steps)))
        return

    runs = []
    print(header(COLUMNS, " "))
    for _ in range(args.repeats):
        for case in args.cases:
            cmd = [sys.executable, __file__, "--worker", case, "--steps", str(args.steps)]
            start = time.perf_counter()
            r = run_worker(cmd)
            r["process_s"] = round(time.perf_counter() - start, 2)
            runs.append(r)
            times = ["-" if t is None else t for t in (r["rollout_s"], r["update_s"])]
            values = (case, r["steps_per_s"], r["env_steps_per_s"], *times)
            values += (r["train_s"], r["seconds"], r["process_s"])
            print(row(COLUMNS, values, " "), flush=True)
    summary = {
        case: {
            "median_steps_per_s": median_of(runs, "steps_per_s", case=case),
            "median_env_steps_per_s": median_of(runs, "env_steps_per_s", case=case),
            "median_process_s": median_of(runs, "process_s", case=case),
            "median_update_s": (
                None if case.startswith("env-") else median_of(runs, "update_s", case=case)
            ),
        }
        for case in args.cases
    }
    print(
        "median agent steps/s: "
        + ", ".join(f"{case} {s['median_steps_per_s']:,.0f}" for case, s in summary.items())
    )
    if "ppo" in summary:
        ppo = summary["ppo"]
        for s in summary.values():
            s["process_over_ppo"] = round(s["median_process_s"] / ppo["median_process_s"], 2)
            if s["median_update_s"] is not None:
                s["update_over_ppo"] = round(s["median_update_s"] / ppo["median_update_s"], 2)
        print(
            "median over ppo's, update / process: "
            + ", ".join(
                f"{case} {s.get('update_over_ppo', '-')} / {s['process_over_ppo']}"
                for case, s in summary.items()
                if case != "ppo"
            )
        )
    report = {"args": vars(args), "machine": machine(), "runs": runs, "summary": summary}
    print(f"wrote {write_json('multiagent_speed.json', report)}")


if __name__ == "__main__":
    main()
