"""Data-parallel scaling: env steps/s of PPO CartPole on 1 vs 2 ranks, the same total steps.

Every run is a real ``torchrun --standalone --nproc-per-node N -m evtrain learn`` of the
rl-zoo CartPole config (``examples/configs/cartpole_ppo.yaml``) for ``--steps`` global env
steps, one torch thread per rank, no checkpoint before the final one.  Two ways to split the
work over 2 ranks:

* ``per-rank``: each rank keeps the config's 8 environments and 256-step rollouts, so an
  update averages the gradients of 512 steps and there are half as many updates;
* ``same-batch``: each rank runs 4 environments (128-step rollouts, minibatch 128), so the
  global batch and the number of updates stay those of the 1-rank run.

Throughput is measured inside the run, from ``run_started`` to the last ``stats`` event, by
a timing subscriber this script loads with ``--plugins`` (process start-up, the rendezvous,
and the final ONNX export are left out; ``wall`` includes them).  Runs alternate between
the setups so that each sees the same machine load.  Writes JSON to ``benchmarks/out/``.

    .venv/bin/python benchmarks/bench_distributed.py --steps 100000 --repeats 3
    .venv/bin/python benchmarks/bench_distributed.py --steps 20000 --hidden-units 256

``--hidden-units`` widens the networks: more computation per gradient step for the same
number of exchanges between the ranks.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from common import (
    CONFIGS,
    add_run_args,
    bench_env,
    learn_process,
    make_parser,
    median_of,
    stamped,
    write_json,
)

CONFIG = CONFIGS / "cartpole_ppo.yaml"
TORCHRUN = Path(sys.executable).parent / "torchrun"

TIMING_PLUGIN = """
import json, os, time

from evtrain import signals


def connect(options, bus):
    marks = {}

    def started(event):
        marks["started"] = time.monotonic()

    def stats(event):
        marks["last_stats"] = time.monotonic()
        marks["step"] = event.step

    def finished(event):
        path = os.path.join(os.environ["BENCH_TIMING_OUT"], f"rank{bus.rank}.json")
        with open(path, "w") as file:
            json.dump(marks, file)

    bus.connect(signals.run_started, started, name="bench.started")
    bus.connect(signals.stats, stats, name="bench.stats")
    bus.connect(signals.run_finished, finished, name="bench.finished")


EVTRAIN_PLUGINS = {"evtrain.subscriber": {"bench_timing": connect}}
"""

SETUPS: dict[str, tuple[int, dict[str, Any]]] = {
    "1 rank": (1, {}),
    "2 ranks, per-rank": (2, {}),
    "2 ranks, same-batch": (2, {"num_envs": 4, "buffer_size": 128, "batch_size": 128}),
}
"""Name to (ranks, changes to the config)."""


def run(
    folder: Path, ranks: int, changes: dict[str, Any], steps: int, hidden_units: int | None
) -> dict[str, Any]:
    config = yaml.safe_load(CONFIG.read_text())
    behavior = config["behaviors"]["CartPole"]
    behavior["max_steps"] = steps
    if hidden_units is not None:
        behavior["network_settings"]["hidden_units"] = hidden_units
    behavior["checkpoint_interval"] = 10**9
    behavior["summary_freq"] = 10_000
    for key in ("buffer_size", "batch_size"):
        if key in changes:
            behavior["hyperparameters"][key] = changes[key]
    config["env_settings"]["num_envs"] = changes.get("num_envs", config["env_settings"]["num_envs"])
    config["checkpoint_settings"] = {"run_id": "bench", "results_dir": str(folder / "results")}
    config["plugins"] = {"paths": [str(folder / "plugins")]}
    (folder / "plugins").mkdir(parents=True, exist_ok=True)
    (folder / "plugins" / "bench_timing.py").write_text(TIMING_PLUGIN)
    (folder / "timing").mkdir(exist_ok=True)
    env = bench_env(BENCH_TIMING_OUT=str(folder / "timing"), OMP_NUM_THREADS="1")
    launch = [str(TORCHRUN), "--standalone", "--nproc-per-node", str(ranks), "-m", "evtrain"]
    wall = learn_process(config, folder, "bench", launcher=launch, env=env).seconds
    marks = json.loads((folder / "timing" / "rank0.json").read_text())
    seconds = marks["last_stats"] - marks["started"]
    return {
        "steps": marks["step"],
        "seconds": seconds,
        "steps_per_s": marks["step"] / seconds,
        "wall": wall,
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=100_000, repeats=3)
    parser.add_argument("--hidden-units", type=int, help="network width (config: 64)")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SETUPS}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for name, (ranks, changes) in SETUPS.items():
                folder = Path(scratch) / f"{repeat}-{ranks}-{len(changes)}"
                runs[name].append(run(folder, ranks, changes, args.steps, args.hidden_units))
                print(f"repeat {repeat}: {name}: {runs[name][-1]}", flush=True)
    base = median_of(runs["1 rank"], "steps_per_s")
    summary = {}
    print(f"\n{'setup':<22}{'steps/s (median)':>18}{'speed-up':>10}{'efficiency':>12}{'wall s':>9}")
    for name, (ranks, _) in SETUPS.items():
        rate = median_of(runs[name], "steps_per_s")
        wall = median_of(runs[name], "wall")
        speedup = rate / base
        summary[name] = {
            "steps_per_s": rate,
            "speedup": speedup,
            "efficiency": speedup / ranks,
            "wall": wall,
        }
        print(f"{name:<22}{rate:>18,.0f}{speedup:>9.2f}x{speedup / ranks:>11.0%}{wall:>9.1f}")
    report = {"args": vars(args), "runs": runs, "summary": summary}
    path = write_json(stamped("bench_distributed"), report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
