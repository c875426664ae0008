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

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
OUT = HERE / "out"
EXAMPLE = HERE.parent / "examples" / "configs" / "cartpole_ppo.yaml"


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
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    evtrain = str(Path(sys.executable).with_name("evtrain"))
    start = time.perf_counter()
    subprocess.run(
        [evtrain, "learn", "config.yaml", "--run-id", mode, "--force"],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    timers = json.loads((folder / "results" / mode / "run_logs" / "timers.json").read_text())
    train = timers["children"]["train"]
    rollout = train["children"]["advance"]["children"]["rollout"]["total"]
    return {
        "mode": mode,
        "steps": steps,
        "num_envs": num_envs,
        "delay_ms": delay_ms,
        "steps_per_s": round(steps / train["total"], 1),
        "rollout_share": round(rollout / train["total"], 3),
        "wall_s": round(wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
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
        mine = [r for r in runs if r["mode"] == mode]
        median = statistics.median(r["steps_per_s"] for r in mine)
        share = statistics.median(r["rollout_share"] for r in mine)
        summary[mode] = {"median_steps_per_s": median, "floor_steps_per_s": floors[mode]}
        print(f"| {mode} | {median:,.0f} | {floors[mode]:,.0f} | {share:.0%} |")
    summary["async_vs_sync"] = round(
        summary["async"]["median_steps_per_s"] / summary["sync"]["median_steps_per_s"], 2
    )
    print(f"async / sync: {summary['async_vs_sync']}x")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "vector.json"
    path.write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
