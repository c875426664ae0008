"""A hyperparameter sweep of SAC on Pendulum-v1 at rl-zoo's budget, with the median pruner.

Runs ``evtrain sweep examples/configs/pendulum_sac_sweep.yaml --trials N --workers W`` (20k
steps a trial, as rl-zoo trains Pendulum-v1; TPE; Optuna's median pruner after 5 trials and
6k steps) in a fresh results folder, then reads the study's journal with Optuna: each
trial's state, score (the mean return of its last 10 training episodes), steps and values;
the best trial against rl-zoo's published -157 +/- 89 for its tuned SAC (the mean and
standard deviation of deterministic evaluation episodes), here as the mean return of 50
episodes of the best trial's exported policy, deterministic (``evtrain record``'s way); and
the share of steps pruning saved, 1 - (steps run) / (trials x steps a trial).  The best
trial is the best of many, biased upwards: ``--seeds`` trains ``best.yaml`` again with each
seed (one process each, ``--workers`` at a time) and evaluates it the same way.  Writes
``benchmarks/out/sweep.json``::

    python benchmarks/bench_sweep.py --trials 20 --workers 2 --seeds 10 11 12
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from common import (
    CONFIGS,
    Column,
    bench_env,
    episode_returns,
    header,
    machine,
    make_parser,
    one_torch_thread,
    out_dir,
    row,
    run_worker,
    write_json,
)

CONFIG = CONFIGS / "pendulum_sac_sweep.yaml"
STUDY = "bench-sweep"
RL_ZOO = (-157.0, 89.0)
"""rl-zoo's published mean and standard deviation of SAC on Pendulum-v1 (20k steps)."""
LAST = 10
EPISODES = 50
"""Deterministic evaluation episodes of a trained policy."""
COLUMNS = (
    Column("trial", 6),
    Column("state", 10),
    Column("score", 9, ".1f"),
    Column("steps", 8),
    Column("learning_rate", 15, ".2e"),
    Column("batch", 6),
    Column("tau", 8, ".4f"),
    Column("init", 6),
    Column("gamma", 6, ".2f"),
)
KEYS = ("learning_rate", "batch_size", "tau", "buffer_init_steps", "gamma")


def sweep_config(steps: int, folder: Path) -> Path:
    """The example sweep with ``steps`` a trial (summaries every twentieth of them), written
    to ``folder``."""
    config = yaml.safe_load(CONFIG.read_text())
    behavior = config["behaviors"]["Pendulum"]
    freq = max(200, steps // 20)
    behavior.update(max_steps=steps, summary_freq=freq, checkpoint_interval=steps)
    config["plugins"] = {"disabled": ["evtrain.stats_writer:default"]}
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_sweep(config: Path, folder: Path, trials: int, workers: int) -> float:
    """``evtrain sweep`` in a process of its own (its output in ``folder/sweep.log``); the
    seconds it took."""
    command = [sys.executable, "-m", "evtrain", "sweep", str(config), "--study", STUDY]
    command += ["--trials", str(trials), "--workers", str(workers)]
    command += ["--results-dir", str(folder / "results")]
    start = time.perf_counter()
    with (folder / "sweep.log").open("w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=bench_env(), check=True)
    return time.perf_counter() - start


def read_trials(folder: Path) -> list[dict[str, Any]]:
    """Each trial of the study as a plain row."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = folder / "results" / STUDY / "study.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.load_study(study_name=STUDY, storage=storage)
    rows = []
    for t in study.get_trials(deepcopy=False):
        values = t.intermediate_values
        score = t.value if t.value is not None else values[max(values)] if values else None
        params = {key.rsplit(".", 1)[-1]: value for key, value in t.params.items()}
        rows.append(
            {
                "trial": t.number,
                "state": t.state.name,
                "score": score,
                "steps": t.user_attrs.get("evtrain.steps", 0),
                "start": t.datetime_start.timestamp() if t.datetime_start else None,
                "end": t.datetime_complete.timestamp() if t.datetime_complete else None,
                "params": params,
            }
        )
    return rows


def evaluate(config: dict[str, Any], folder: Path, run_id: str, seed: int) -> dict[str, float]:
    """:data:`EPISODES` deterministic episodes of the policy run ``run_id`` in ``folder``
    exported (``evtrain record``'s way: the ONNX file, environments seeded ``seed``)."""
    from evtrain.run.options import options_from_data
    from evtrain.run.record import record

    config = {**config, "checkpoint_settings": {"run_id": run_id, "results_dir": str(folder)}}
    config["env_settings"] = {**config["env_settings"], "seed": seed}
    with tempfile.TemporaryDirectory() as tmp:
        done = record(options_from_data(config), episodes=EPISODES, output=Path(tmp) / "e.npz")
    returns = list(done.returns)
    return {"eval_mean": statistics.mean(returns), "eval_std": statistics.pstdev(returns)}


def confirm(best: Path, seed: int) -> dict[str, Any]:
    """``best.yaml`` trained again with ``seed``, in this process: the mean return of its
    last 10 episodes, and of :data:`EPISODES` deterministic ones."""
    from evtrain import Bus, signals
    from evtrain.run.learn import learn

    one_torch_thread()
    options = yaml.safe_load(best.read_text())
    options["env_settings"]["seed"] = seed
    options["plugins"] = {"disabled": ["evtrain.stats_writer:default"]}
    returns: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        options["checkpoint_settings"] = {"run_id": "confirm", "results_dir": tmp}
        with Bus() as bus:
            bus.connect(signals.stats, lambda event: returns.extend(episode_returns(event)))
            start = time.perf_counter()
            result = learn(options, bus)
            seconds = time.perf_counter() - start
        evaluation = evaluate(options, Path(tmp), "confirm", 10_000 + seed)
    return {
        "seed": seed,
        "steps": result.steps["Pendulum"],
        "seconds": seconds,
        "final_mean_return": statistics.mean(returns[-LAST:]),
        **evaluation,
    }


def summary(rows: list[dict[str, Any]], trials: int, steps: int, seconds: float) -> dict[str, Any]:
    """The best trial, the states, and the share of steps pruning saved."""
    done = [r for r in rows if r["state"] == "COMPLETE"]
    best = max(done, key=lambda r: r["score"]) if done else None
    run = sum(r["steps"] for r in rows)
    return {
        "trials": len(rows),
        "states": {
            s: sum(r["state"] == s for r in rows) for s in sorted({r["state"] for r in rows})
        },
        "best_trial": None if best is None else best["trial"],
        "best_score": None if best is None else best["score"],
        "best_params": None if best is None else best["params"],
        "rl_zoo": {"mean": RL_ZOO[0], "std": RL_ZOO[1]},
        "steps_run": run,
        "steps_budget": trials * steps,
        "steps_saved_share": 1 - run / (trials * steps),
        "wall_s": seconds,
    }


def print_trials(rows: list[dict[str, Any]]) -> None:
    print(header(COLUMNS))
    for r in sorted(rows, key=lambda r: r["trial"]):
        p = r["params"]
        values = [p.get(key, "") for key in KEYS]
        score = r["score"] if r["score"] is not None else ""
        print(row(COLUMNS, [r["trial"], r["state"], score, r["steps"], *values]))


def confirm_all(best: Path, seeds: list[int], workers: int) -> list[dict[str, Any]]:
    """:func:`confirm` of each seed, each in a process of its own, ``workers`` at a time."""
    command = [sys.executable, __file__, "--worker", str(best)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        runs = [pool.submit(run_worker, [*command, str(seed)], bench_env()) for seed in seeds]
        return [run.result() for run in runs]


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--trials", type=int, default=20, help="trials of the study")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--steps", type=int, default=20_000, help="steps a trial")
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=[], help="train best.yaml again with each"
    )
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    # the folder of a sweep this script ran before: report on it, without running it again
    parser.add_argument("--from-folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(confirm(Path(args.worker[0]), int(args.worker[1]))))
        return
    if args.from_folder is None:
        out_dir().mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="sweep-", dir=out_dir()))
        seconds = run_sweep(sweep_config(args.steps, folder), folder, args.trials, args.workers)
    else:
        folder, seconds = args.from_folder, 0.0
    rows = read_trials(folder)
    if args.from_folder is not None:  # from the first trial's start to the last one's end
        seconds = max(r["end"] or 0 for r in rows) - min(r["start"] or 0 for r in rows)
    print_trials(rows)
    report = summary(rows, args.trials, args.steps, seconds)
    study = folder / "results" / STUDY
    if report["best_trial"] is not None:
        config = yaml.safe_load((study / "best.yaml").read_text())
        run_id = f"trial-{report['best_trial']:04d}"
        report["best_eval"] = evaluate(config, study, run_id, 10_000)
        print(
            f"best trial {report['best_trial']}: last {LAST} episodes {report['best_score']:.1f}; "
            f"{EPISODES} deterministic episodes {report['best_eval']['eval_mean']:.1f} +/- "
            f"{report['best_eval']['eval_std']:.1f}; rl-zoo {RL_ZOO[0]} +/- {RL_ZOO[1]}"
        )
    confirmed = confirm_all(study / "best.yaml", args.seeds, args.workers)
    for c in confirmed:
        print(
            f"best.yaml, seed {c['seed']}: last {LAST} episodes {c['final_mean_return']:.1f}; "
            f"{EPISODES} deterministic episodes {c['eval_mean']:.1f} +/- {c['eval_std']:.1f}"
        )
    print(
        f"steps run {report['steps_run']:,} of {report['steps_budget']:,} "
        f"({report['steps_saved_share']:.1%} saved by pruning); sweep {seconds:.0f} s"
    )
    write_json(
        "sweep.json",
        {
            "args": {**vars(args), "from_folder": str(args.from_folder)},
            "machine": machine(),
            "folder": str(folder),
            "trials": rows,
            "summary": report,
            "confirm": confirmed,
        },
    )


if __name__ == "__main__":
    main()
