"""PPO on CartPole-v1 with the rl-zoo hyperparameters: evtrain (and optionally SB3) side by side.

Each run is its own subprocess with one torch thread, so neither library warms the other's
caches or allocator.  With ``--sb3`` the runs alternate evtrain / SB3 per seed, so both see the
same machine load.  Reports env steps/s over the whole training loop, and the env step at which
the mean of the last 20 episode returns first reaches 475; writes JSON to ``benchmarks/out/``.

rl-zoo ``CartPole-v1``: 8 envs, n_steps 32 (``time_horizon``), batch 256, gae_lambda 0.8,
gamma 0.98, n_epochs 20, ent_coef 0, lin_1e-3 learning rate, lin_0.2 clip range, 1e5 steps.

    .venv/bin/python benchmarks/bench_ppo.py --steps 100000 --seeds 0 1 2 --sb3

``--whole-process`` measures what a user waits for instead: ``evtrain learn`` on
``examples/configs/cartpole_ppo.yaml`` (checkpoints every 25k steps, the final ONNX export)
against a script that trains SB3's PPO with the same settings and saves with ``model.save``, each
timed from process start to exit.  Both run on ``bench_envs:returns_cartpole``, which writes
every episode's return with its env step at exit (for the steps to 475).  Beside them, the
floors: ``import torch``, the 8 CartPoles stepped with random actions for the same number of
steps, and evtrain's own update time (``update`` in the run's ``timers.json``)::

    .venv/bin/python benchmarks/bench_ppo.py --whole-process --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    CONFIGS,
    ReturnTracker,
    add_run_args,
    bench_env,
    learn_process,
    make_parser,
    median_of,
    median_with_misses,
    one_torch_thread,
    reward_reporter,
    run_worker,
    stamped,
    timed_run,
    train,
    write_json,
)

EXAMPLE = CONFIGS / "cartpole_ppo.yaml"
TARGET = 475.0
WINDOW = 20


def run_evtrain(steps: int, seed: int, summary_freq: int) -> dict[str, Any]:
    one_torch_thread()
    from evtrain import Bus, signals
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        RewardProviders,
        RewardProviderSettings,
        TrainerSettings,
        make_vector_env,
    )

    settings = TrainerSettings(
        trainer_type="ppo",
        hyperparameters=PPOSettings(
            batch_size=256,
            buffer_size=256,
            learning_rate=1e-3,
            learning_rate_schedule="linear",
            beta=0.0,
            epsilon=0.2,
            lambd=0.8,
            num_epoch=20,
        ),
        network_settings=NetworkSettings(hidden_units=64, num_layers=2, activation="tanh"),
        reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=0.98)),
        max_steps=steps,
        time_horizon=32,
        summary_freq=summary_freq,
    )
    trainer: PPOTrainer | None = None
    tracker = ReturnTracker(WINDOW, TARGET, lambda: trainer.step if trainer else 0)
    envs = make_vector_env("CartPole-v1", 8)
    events: list[Any] = []
    with Bus() as bus:
        bus.connect(signals.stats, events.append)  # a subscriber, so events are really built
        reporter = reward_reporter(bus, "CartPole", tracker.add)
        trainer = PPOTrainer("CartPole", settings, envs, reporter, seed=seed)
        elapsed, cpu = train(trainer)
        bus.flush()
    envs.close()
    return _result("evtrain", seed, trainer.step, elapsed, cpu, tracker, stats_events=len(events))


def run_sb3(steps: int, seed: int) -> dict[str, Any]:
    one_torch_thread()
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    model: Any = None
    tracker = ReturnTracker(WINDOW, TARGET, lambda: int(model.num_timesteps) if model else 0)

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    tracker.add(float(info["episode"]["r"]))
            return True

    def linear(initial: float) -> Callable[[float], float]:
        return lambda progress_remaining: progress_remaining * initial

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(steps, callback=Track())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    env.close()
    return _result("sb3", seed, int(model.num_timesteps), elapsed, cpu, tracker)


def _result(
    library: str,
    seed: int,
    steps: int,
    elapsed: float,
    cpu: float,
    tracker: ReturnTracker,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "library": library,
        "seed": seed,
        "steps": steps,
        "seconds": round(elapsed, 3),
        "steps_per_s": round(steps / elapsed, 1),
        # Per second of this process's CPU time: less sensitive to other load on the machine.
        "steps_per_cpu_s": round(steps / cpu, 1),
        "steps_to_475": tracker.hit,
        "episodes": len(tracker.returns),
        "final_mean_20": tracker.last_mean(1),
        **extra,
    }


def spawn(library: str, steps: int, seed: int, summary_freq: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", library, "--steps", str(steps)]
    cmd += ["--seeds", str(seed), "--summary-freq", str(summary_freq)]
    result: dict[str, Any] = run_worker(cmd)
    return result


def summarize(runs: list[dict[str, Any]], library: str) -> dict[str, Any]:
    hits = [r["steps_to_475"] for r in runs if r["library"] == library]
    reached = [h for h in hits if h is not None]
    return {
        "median_steps_per_s": median_of(runs, "steps_per_s", library=library),
        "median_steps_per_cpu_s": median_of(runs, "steps_per_cpu_s", library=library),
        # A seed that never reached 475 counts as infinitely slow for the median.
        "median_steps_to_475": median_with_misses(hits) if reached else None,
        "seeds_reaching_475": len(reached),
    }


SB3_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    torch.set_num_threads(1)
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from bench_envs import returns_cartpole

    steps, seed, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    def linear(initial):
        return lambda progress_remaining: progress_remaining * initial

    env = make_vec_env(returns_cartpole, n_envs=8, seed=seed, env_kwargs={"num_envs": 8})
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
        ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed,
        device="cpu",
    )
    model.learn(steps)
    model.save(path)
    """
)

ENV_ONLY_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from evtrain.trainers import make_vector_env
    steps = int(sys.argv[1])
    envs = make_vector_env("CartPole-v1", 8)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (steps // 8, 8))
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    print(time.perf_counter() - start)
    """
)


def whole_process(library: str, steps: int, seed: int, folder: Path) -> dict[str, Any]:
    import yaml

    returns = folder / f"returns-{library}-{seed}.json"
    env = bench_env(EVTRAIN_BENCH_RETURNS=str(returns))
    extra: dict[str, Any] = {}
    if library == "evtrain":
        config = yaml.safe_load(EXAMPLE.read_text())
        config["behaviors"]["CartPole"]["max_steps"] = steps
        config["env_settings"].update(
            env_id="bench_envs:returns_cartpole", env_kwargs={"num_envs": 8}, seed=seed
        )
        run = learn_process(config, folder, f"seed{seed}", env=env)
        seconds = run.seconds
        advance = run.timers()["children"]["train"]["children"]["advance"]["children"]
        extra = {
            "update_s": round(advance["update"]["total"], 3),
            "rollout_s": round(advance["rollout"]["total"], 3),
            "model": (run.run_folder / "CartPole.onnx").exists(),
        }
    else:
        cmd = [sys.executable, "-c", SB3_SCRIPT, str(steps), str(seed), str(folder / "sb3")]
        seconds = timed_run(cmd, folder, env)
    # The env step at which the mean of the last 20 returns first reached 475, from the
    # ``returns_cartpole`` log.
    tracker = ReturnTracker.from_episodes(json.loads(returns.read_text()), WINDOW, TARGET)
    return {
        "library": library,
        "seed": seed,
        "steps": steps,
        "seconds": round(seconds, 3),
        "steps_per_s": round(steps / seconds, 1),
        "steps_to_475": tracker.hit,
        "final_mean_20": tracker.last_mean(1),
        "episodes": len(tracker.returns),
        **extra,
    }


def floors(steps: int) -> dict[str, float]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    torch_import = time.perf_counter() - start
    out = subprocess.run(
        [sys.executable, "-c", ENV_ONLY_SCRIPT, str(steps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {"import_torch_s": round(torch_import, 3), "env_only_s": round(float(out), 3)}


def main_whole_process(args: argparse.Namespace) -> None:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for library in ("evtrain", "sb3"):
                run = whole_process(library, args.steps, seed, Path(tmp))
                runs.append(run)
                print(json.dumps(run), flush=True)
    floor = floors(args.steps)
    medians = {lib: median_of(runs, "seconds", library=lib) for lib in ("evtrain", "sb3")}
    hits = {
        lib: median_with_misses(r["steps_to_475"] for r in runs if r["library"] == lib)
        for lib in ("evtrain", "sb3")
    }
    update = median_of(runs, "update_s", library="evtrain")
    summary = {
        "median_seconds": medians,
        "speedup": round(medians["sb3"] / medians["evtrain"], 2),
        "median_steps_to_475": hits,
        "floors": {**floor, "evtrain_update_s": update},
    }
    print()
    print(f"| whole process, {args.steps:,} steps, seeds {args.seeds} | median s | steps to 475 |")
    print("|---|---:|---:|")
    for lib in ("evtrain", "sb3"):
        print(f"| {lib} | {medians[lib]:.2f} | {hits[lib]} |")
    print(f"speed-up (SB3 s / evtrain s): {summary['speedup']}x")
    print(
        f"floors: import torch {floor['import_torch_s']:.2f} s; the env alone "
        f"{floor['env_only_s']:.2f} s; evtrain's update alone {update:.2f} s (median)"
    )
    path = write_json(
        stamped("bench_ppo-whole"), {"args": vars(args), "runs": runs, "summary": summary}
    )
    print(f"wrote {path}")


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=100_000, seeds=[0, 1, 2])
    parser.add_argument("--summary-freq", type=int, default=10_000)
    parser.add_argument("--sb3", action="store_true", help="also run Stable-Baselines3")
    parser.add_argument(
        "--whole-process",
        action="store_true",
        help="time `evtrain learn` and an SB3 script as whole processes (always runs SB3)",
    )
    parser.add_argument("--worker", choices=["evtrain", "sb3"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.whole_process:
        main_whole_process(args)
        return

    if args.worker == "evtrain":
        print(json.dumps(run_evtrain(args.steps, args.seeds[0], args.summary_freq)))
        return
    if args.worker == "sb3":
        print(json.dumps(run_sb3(args.steps, args.seeds[0])))
        return

    libraries = ["evtrain", "sb3"] if args.sb3 else ["evtrain"]
    runs = []
    for seed in args.seeds:
        for library in libraries:
            run = spawn(library, args.steps, seed, args.summary_freq)
            runs.append(run)
            print(
                f"{library:8s} seed {seed}: {run['steps_per_s']:8.0f} steps/s, "
                f"475 at {run['steps_to_475']}, final mean-20 {run['final_mean_20']}",
                flush=True,
            )
    summary = {library: summarize(runs, library) for library in libraries}
    if args.sb3:
        ev, sb3 = summary["evtrain"], summary["sb3"]
        summary["speedup"] = round(ev["median_steps_per_s"] / sb3["median_steps_per_s"], 2)
        summary["speedup_cpu"] = round(
            ev["median_steps_per_cpu_s"] / sb3["median_steps_per_cpu_s"], 2
        )
    for key, value in summary.items():
        print(f"{key}: {value}")
    path = write_json(stamped("bench_ppo"), {"args": vars(args), "runs": runs, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
