"""PPO and SAC update time on CUDA vs the CPU: the trainer's update alone, per network size.

Cases (``--cases``), each trained on each device in a process of its own:

* ``ppo-cartpole``: rl-zoo's CartPole-v1 PPO (8 environments x 32 steps = 256-row rollouts,
  batch 256, 20 epochs, two tanh layers of 64): one update is 20 gradient steps.
* ``ppo-3x512``: the same with three layers of 512.
* ``ppo-cnn84``: the same on CartPole drawn as an 84x84x3 image (``tests.pixel_envs``),
  ``vis_encode_type: nature_cnn`` and one layer of 64 after it.
* ``sac-pendulum``: rl-zoo's Pendulum-v1 SAC (batch 256, two relu layers of 256, one gradient
  step per environment step): one update is one gradient step (critics, actor, alpha, target).
* ``sac-3x512``: the same with three layers of 512.
* ``sac-cnn84``: the same on the 84x84x3 pixel CartPole with continuous actions, nature_cnn.

Only the update is timed — what the trainer hands ``_run_update`` — each between two
``torch.cuda.synchronize()`` calls on CUDA, after ``--warmup`` untimed updates (CUDA's
kernels load and cuDNN picks its algorithms in the first ones); collecting the rollout or
stepping the environment is not.  Each case times ``--updates`` updates, or as many as
``--budget`` seconds hold (3 at least: a CNN's PPO update takes seconds on one CPU thread).
The CPU runs use ``--threads`` torch threads (1 is ``torch_settings.num_threads``' default).
Without CUDA only the CPU is measured, and the report says so.  Prints the median
milliseconds per update and per gradient step, and the CPU's time over CUDA's; writes JSON
to ``benchmarks/out/gpu.json``::

    python benchmarks/bench_gpu.py --updates 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from bench_sac import EVTRAIN_HYPERPARAMETERS as SAC_ZOO
from common import CONFIGS, ROOT, Column, header, machine, make_parser, row, run_worker, write_json

CASES = ("ppo-cartpole", "ppo-3x512", "ppo-cnn84", "sac-pendulum", "sac-3x512", "sac-cnn84")
EXAMPLE = yaml.safe_load((CONFIGS / "cartpole_ppo.yaml").read_text())
PPO_HYPERPARAMETERS: dict[str, Any] = EXAMPLE["behaviors"]["CartPole"]["hyperparameters"]
"""rl-zoo's CartPole-v1 PPO, as ``examples/configs/cartpole_ppo.yaml`` holds it."""
SAC_HYPERPARAMETERS = {**SAC_ZOO, "buffer_size": 10_000, "buffer_init_steps": 300}
"""rl-zoo's Pendulum-v1 SAC, as ``bench_sac.py`` runs it, with a buffer of 10,000 (84x84x3
images in memory) filled with 300 steps before the first update."""
NETWORKS: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {"hidden_units": 64, "num_layers": 2, "activation": "tanh"},
    "ppo-3x512": {"hidden_units": 512, "num_layers": 3, "activation": "tanh"},
    "ppo-cnn84": {"hidden_units": 64, "num_layers": 1, "vis_encode_type": "nature_cnn"},
    "sac-pendulum": {"hidden_units": 256, "num_layers": 2, "activation": "relu"},
    "sac-3x512": {"hidden_units": 512, "num_layers": 3, "activation": "relu"},
    "sac-cnn84": {"hidden_units": 256, "num_layers": 2, "vis_encode_type": "nature_cnn"},
}
COLUMNS = (
    Column("case", 14, align="<"),
    Column("device", 8, align="<"),
    Column("updates", 9),
    Column("ms/update", 11, ".2f"),
    Column("grad steps", 12),
    Column("ms/grad step", 14, ".3f"),
    Column("cpu/cuda", 10),
)


def make_envs(case: str) -> Any:
    """The case's vector environment (``SAME_STEP`` autoreset, as evtrain's own)."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from evtrain.trainers import make_vector_env

    num_envs = 8 if case.startswith("ppo") else 1
    if not case.endswith("cnn84"):
        return make_vector_env("CartPole-v1" if case.startswith("ppo") else "Pendulum-v1", num_envs)
    sys.path.insert(0, str(ROOT))  # the tests package: the pixel environment
    from tests.pixel_envs import pixel_cartpole

    continuous = case.startswith("sac")
    return SyncVectorEnv(
        [lambda: pixel_cartpole(size=84, continuous=continuous) for _ in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def make_trainer(case: str, device: str, reporter: Any) -> Any:
    """The case's trainer on ``device``, seed 0."""
    from evtrain.trainers import (
        NetworkSettings,
        PPOSettings,
        PPOTrainer,
        RewardProviders,
        RewardProviderSettings,
        SACSettings,
        SACTrainer,
        TrainerSettings,
    )

    ppo = case.startswith("ppo")
    settings = TrainerSettings(
        trainer_type="ppo" if ppo else "sac",
        hyperparameters=PPOSettings(**PPO_HYPERPARAMETERS)
        if ppo
        else SACSettings(**SAC_HYPERPARAMETERS),
        network_settings=NetworkSettings(**NETWORKS[case]),
        reward_signals=RewardProviders(
            extrinsic=RewardProviderSettings(gamma=0.98 if ppo else 0.99)
        ),
        max_steps=10_000_000,
        time_horizon=32 if ppo else 64,
        summary_freq=10_000_000,
    )
    trainer_type = PPOTrainer if ppo else SACTrainer
    return trainer_type(case, settings, make_envs(case), reporter, seed=0, device=device)


def measure(
    case: str, device: str, updates: int, warmup: int, threads: int, budget: float
) -> dict[str, Any]:
    """Milliseconds of each of ``updates`` updates of ``case`` on ``device``, or of as many
    as ``budget`` seconds of updates allow (3 at least), after ``warmup`` (a worker)."""
    import torch

    from evtrain import Bus, StatsReporter
    from evtrain.run.build import keep_freed_memory

    torch.set_num_threads(threads)
    keep_freed_memory()  # as a run does (configure_torch)
    cuda = torch.device(device).type == "cuda"
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else lambda: None
    seconds: list[float] = []
    with Bus() as bus:
        trainer = make_trainer(case, device, StatsReporter(bus, case))

        def timed_update(update: Callable[..., None], *args: Any) -> None:
            sync()
            start = time.perf_counter()
            update(*args)
            sync()
            seconds.append(time.perf_counter() - start)

        trainer._run_update = timed_update
        while len(seconds) < warmup + updates and not (
            len(seconds) >= warmup + 3 and sum(seconds[warmup:]) > budget
        ):
            trainer.advance()
        trainer.envs.close()
    timed = seconds[warmup:]
    ppo = case.startswith("ppo")
    steps = PPO_HYPERPARAMETERS["num_epoch"] if ppo else 1  # one minibatch of 256 per epoch
    return {
        "case": case,
        "device": device,
        "device_name": torch.cuda.get_device_name(torch.device(device)) if cuda else "cpu",
        "threads": threads,
        "updates": len(timed),
        "gradient_steps_per_update": steps,
        "ms_per_update": statistics.median(timed) * 1e3,
        "ms_per_gradient_step": statistics.median(timed) * 1e3 / steps,
        "ms_per_update_all": [s * 1e3 for s in timed],
    }


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--updates", type=int, default=20, help="timed updates per case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates first")
    parser.add_argument(
        "--budget", type=float, default=60.0, help="seconds of timed updates per case at most"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the CPU runs")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import json

        case, device, updates, warmup, threads, budget = args.worker
        result = measure(case, device, int(updates), int(warmup), int(threads), float(budget))
        print(json.dumps(result))
        return

    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if len(devices) == 1:
        print(f"no CUDA device for torch {torch.__version__}: measuring the CPU only")
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        for device in devices:
            print(f"{case} on {device}...", file=sys.stderr, flush=True)
            worker = [case, device, args.updates, args.warmup, args.threads, args.budget]
            rows.append(run_worker([sys.executable, __file__, "--worker", *map(str, worker)]))
    speedups = {
        case: cpu["ms_per_update"] / gpu["ms_per_update"]
        for case in args.cases
        for cpu in rows
        for gpu in rows
        if cpu["case"] == gpu["case"] == case and (cpu["device"], gpu["device"]) == ("cpu", "cuda")
    }
    print(header(COLUMNS))
    for r in rows:
        ratio = f"{speedups[r['case']]:.2f}x" if r["device"] == "cuda" else ""
        values = [r["case"], r["device"], r["updates"], r["ms_per_update"]]
        values += [r["gradient_steps_per_update"], r["ms_per_gradient_step"], ratio]
        print(row(COLUMNS, values))
    gpu = next((r["device_name"] for r in rows if r["device"] == "cuda"), None)
    print(f"CUDA: {gpu}" if gpu else "CUDA: not measured (no CUDA device)")
    report = {
        "args": vars(args),
        "machine": machine(),
        "torch": torch.__version__,
        "cuda": gpu,
        "rows": rows,
        "speedups": speedups,
    }
    print(f"JSON: {write_json('gpu.json', report)}")


if __name__ == "__main__":
    main()
