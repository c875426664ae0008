"""PPO on CartPole-v1 with the rl-zoo hyperparameters: evtrain (and optionally SB3) side by side.

Each run is its own subprocess with one torch thread, so neither library warms the other's
caches or allocator.  With ``--sb3`` the runs alternate evtrain / SB3 per seed, so both see the
same machine load.  Reports env steps/s over the whole training loop, and the env step at which
the mean of the last 20 episode returns first reaches 475; writes JSON to ``benchmarks/out/``.

rl-zoo ``CartPole-v1``: 8 envs, n_steps 32 (``time_horizon``), batch 256, gae_lambda 0.8,
gamma 0.98, n_epochs 20, ent_coef 0, lin_1e-3 learning rate, lin_0.2 clip range, 1e5 steps.

    .venv/bin/python benchmarks/bench_ppo.py --steps 100000 --seeds 0 1 2 --sb3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "out"
TARGET = 475.0
WINDOW = 20


class ReturnTracker:
    """Records episode returns with the env step they finished at; finds the first 475."""

    def __init__(self, step: Callable[[], int]) -> None:
        self.step = step
        self.returns: list[float] = []
        self.hit: int | None = None

    def add(self, value: float) -> None:
        self.returns.append(value)
        last = self.returns[-WINDOW:]
        if self.hit is None and len(last) == WINDOW and sum(last) / WINDOW >= TARGET:
            self.hit = self.step()


def run_evtrain(steps: int, seed: int, summary_freq: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from evtrain import Bus, StatsAggregationMethod, StatsReporter, signals
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        RewardSignals,
        RewardSignalSettings,
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
        reward_signals=RewardSignals(extrinsic=RewardSignalSettings(gamma=0.98)),
        max_steps=steps,
        time_horizon=32,
        summary_freq=summary_freq,
    )
    trainer: PPOTrainer | None = None
    tracker = ReturnTracker(lambda: trainer.step if trainer else 0)

    class TrackingReporter(StatsReporter):
        def add_stat(
            self,
            key: str,
            value: float,
            aggregation: StatsAggregationMethod = StatsAggregationMethod.AVERAGE,
        ) -> None:
            if key == "Environment/Cumulative Reward":
                tracker.add(value)
            super().add_stat(key, value, aggregation)

    envs = make_vector_env("CartPole-v1", 8)
    events: list[Any] = []
    with Bus() as bus:
        bus.connect(signals.stats, events.append)  # a subscriber, so events are really built
        trainer = PPOTrainer(
            "CartPole", settings, envs, TrackingReporter(bus, "CartPole"), seed=seed
        )
        start, cpu_start = time.perf_counter(), time.process_time()
        while not trainer.should_stop:
            trainer.advance()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        bus.flush()
    envs.close()
    return _result("evtrain", seed, trainer.step, elapsed, cpu, tracker, stats_events=len(events))


def run_sb3(steps: int, seed: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    model: Any = None
    tracker = ReturnTracker(lambda: int(model.num_timesteps) if model else 0)

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
    last = tracker.returns[-WINDOW:]
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
        "final_mean_20": round(sum(last) / len(last), 1) if last else None,
        **extra,
    }


def spawn(library: str, steps: int, seed: int, summary_freq: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        library,
        "--steps",
        str(steps),
        "--seeds",
        str(seed),
        "--summary-freq",
        str(summary_freq),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def summarize(runs: list[dict[str, Any]], library: str) -> dict[str, Any]:
    mine = [r for r in runs if r["library"] == library]
    hits = [r["steps_to_475"] for r in mine]
    reached = sorted(h for h in hits if h is not None)
    return {
        "median_steps_per_s": statistics.median(r["steps_per_s"] for r in mine),
        "median_steps_per_cpu_s": statistics.median(r["steps_per_cpu_s"] for r in mine),
        # A seed that never reached 475 counts as infinitely slow for the median.
        "median_steps_to_475": (
            statistics.median(h if h is not None else float("inf") for h in hits)
            if reached
            else None
        ),
        "seeds_reaching_475": len(reached),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--summary-freq", type=int, default=10_000)
    parser.add_argument("--sb3", action="store_true", help="also run Stable-Baselines3")
    parser.add_argument("--worker", choices=["evtrain", "sb3"], help=argparse.SUPPRESS)
    args = parser.parse_args()

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
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"bench_ppo-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
