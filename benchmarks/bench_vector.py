"""``env_settings.vectorization``: sync vs async on an environment that costs CPU per step.

PPO (the rl-zoo CartPole settings) on ``bench_envs:slow_cartpole``, a CartPole that spends
``--delay-ms`` of CPU on every step, as a heavier simulator would.  ``sync`` steps the copies
one after another in the training process; ``async`` (Gymnasium's ``AsyncVectorEnv``) steps
each in a worker process, so a machine's cores share them.  Each case is an ``evtrain learn``
process; steps/s is over the training loop (``train`` in the run's ``timers.json``), with the
rollout's share.  The limit beside each: the environments' own CPU time per env step
(``num_envs`` x delay, spread over ``min(num_envs, cores)`` cores when async).  Writes
``benchmarks/out/vector.json``::

    .venv/bin/python benchmarks/bench_vector.py --steps 20000 --repeats 2
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from common import CONFIGS, add_run_args, learn_process, make_parser, median_of, write_json

EXAMPLE = CONFIGS / "cartpole_ppo.yaml"


def run(mode: str, steps: int, num_envs: int, delay_ms: float, folder: Path) -> dict[str, Any]:
    config = yaml.safe_load(EXAMPLE.read_text())
    behavior = config["behaviors"]["CartPole"]
    behavior["max_steps"] = steps
    behavior["checkpoint_interval"] = 10 * steps
    behavior["hyperparameters"]["buffer_size"] = 32 * num_envs
    behavior["hyperparameters"]["batch_size"] = 32 * num_envs
    config["env_settings"].update(
        env_id="bench_envs:slow_cartpole",
        env_kwargs={"delay_s": delay_ms / 1000},
        num_envs=num_envs,
        vectorization=mode,
    )
    run = learn_process(config, folder, mode)
    train = run.timers()["children"]["train"]
    rollout = train["children"]["advance"]["children"]["rollout"]["total"]
    return {
        "mode": mode,
        "steps": steps,
        "num_envs": num_envs,
        "delay_ms": delay_ms,
        "steps_per_s": round(steps / train["total"], 1),
        "rollout_share": round(rollout / train["total"], 3),
        "wall_s": round(run.seconds, 2),
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=20_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    add_run_args(parser, repeats=2)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for mode in ("sync", "async"):
                result = run(mode, args.steps, args.num_envs, args.delay_ms, Path(tmp))
                runs.append(result)
                print(json.dumps(result), flush=True)
    floors = {
        "sync": 1000 / args.delay_ms,
        "async": 1000 / args.delay_ms * min(args.num_envs, cores),
    }
    summary = {}
    print()
    print(
        f"| {args.num_envs} envs, {args.delay_ms} ms/step, {cores} cores | steps/s "
        "| env-only limit | rollout share |"
    )
    print("|---|---:|---:|---:|")
    for mode in ("sync", "async"):
        median = median_of(runs, "steps_per_s", mode=mode)
        share = median_of(runs, "rollout_share", mode=mode)
        summary[mode] = {"median_steps_per_s": median, "floor_steps_per_s": floors[mode]}
        print(f"| {mode} | {median:,.0f} | {floors[mode]:,.0f} | {share:.0%} |")
    summary["async_vs_sync"] = round(
        summary["async"]["median_steps_per_s"] / summary["sync"]["median_steps_per_s"], 2
    )
    print(f"async / sync: {summary['async_vs_sync']}x")
    path = write_json("vector.json", {"args": vars(args), "runs": runs, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
