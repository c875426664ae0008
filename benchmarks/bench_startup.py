"""Start-up as a user feels it: from typing ``evtrain learn`` to the first environment step.

Every case is a fresh process, timed from just before it is started; the cases alternate, so
they see the same machine load.  The first step is recorded by the environment itself
(``bench_envs:timed_cartpole``, which also notes which heavy modules are loaded by then):

* ``python``: an interpreter that does nothing (the floor of any Python tool);
* ``import torch``: the floor of any torch-based trainer;
* ``import torch, gymnasium``: the bare imports; issue 35's goal is a 2,048-step ``evtrain
  learn`` (its final checkpoint and ONNX export included) in at most 1.3 times this;
* ``torch + gymnasium``: a hand-written minimum — import both, build 8 CartPoles and a 64x64
  MLP, act once, step — the floor of a first step for a torch trainer on Gymnasium;
* ``evtrain learn``: PPO on CartPole (the rl-zoo config) for 2,048 steps, the whole run too
  (its final checkpoint and ONNX export included);
* ``sb3`` (with ``--sb3``): Stable-Baselines3's PPO on the same environment and config, its
  ``model.save`` included.

Writes ``benchmarks/out/startup.json``::

    .venv/bin/python benchmarks/bench_startup.py --repeats 5 --sb3
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from common import add_run_args, bench_env, evtrain_command, make_parser, median_of, write_json

STEPS = 2048

CONFIG = {
    "behaviors": {
        "CartPole": {
            "trainer_type": "ppo",
            "hyperparameters": {
                "batch_size": 256,
                "buffer_size": 256,
                "learning_rate": 1e-3,
                "learning_rate_schedule": "linear",
                "beta": 0.0,
                "epsilon": 0.2,
                "epsilon_schedule": "linear",
                "lambd": 0.8,
                "num_epoch": 20,
            },
            "network_settings": {"hidden_units": 64, "num_layers": 2},
            "reward_signals": {"extrinsic": {"gamma": 0.98, "strength": 1.0}},
            "max_steps": STEPS,
            "time_horizon": 32,
            "summary_freq": 1024,
        }
    },
    "env_settings": {"env_id": "bench_envs:timed_cartpole", "num_envs": 8, "seed": 1},
    "torch_settings": {"num_threads": 1},
}

MINIMAL = textwrap.dedent(
    """
    import torch
    torch.set_num_threads(1)
    from gymnasium.vector import SyncVectorEnv
    from bench_envs import timed_cartpole
    envs = SyncVectorEnv([timed_cartpole for _ in range(8)])
    obs, _ = envs.reset(seed=1)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 2),
    )
    with torch.no_grad():
        actions = net(torch.as_tensor(obs)).argmax(-1).numpy()
    envs.step(actions)
    """
)

SB3 = textwrap.dedent(
    """
    import sys
    import torch
    torch.set_num_threads(1)
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from bench_envs import timed_cartpole

    def linear(initial):
        return lambda progress_remaining: progress_remaining * initial

    env = make_vec_env(timed_cartpole, n_envs=8, seed=1)
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
        ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=1, device="cpu",
    )
    model.learn(int(sys.argv[1]))
    model.save(sys.argv[2])
    """
)


def run_case(name: str, cmd: list[str], folder: Path) -> dict[str, Any]:
    first = folder / "first_step.json"
    first.unlink(missing_ok=True)
    env = bench_env(EVTRAIN_BENCH_FIRST_STEP=str(first))
    start = time.time()
    subprocess.run(cmd, cwd=folder, env=env, check=True, capture_output=True)
    wall = time.time() - start
    result: dict[str, Any] = {"case": name, "wall_s": round(wall, 3)}
    if first.exists():
        record = json.loads(first.read_text())
        result["first_step_s"] = round(record["time"] - start, 3)
        result["loaded_at_first_step"] = record["loaded"]
    return result


def cases(folder: Path, sb3: bool) -> list[tuple[str, list[str]]]:
    python = sys.executable
    (evtrain,) = evtrain_command()
    (folder / "config.yaml").write_text(json.dumps(CONFIG))  # JSON is YAML
    found: list[tuple[str, list[str]]] = [
        ("python", [python, "-c", "pass"]),
        ("import torch", [python, "-c", "import torch"]),
        ("import torch, gymnasium", [python, "-c", "import torch, gymnasium"]),
        ("torch + gymnasium", [python, "-c", MINIMAL]),
        ("evtrain learn", [evtrain, "learn", "config.yaml", "--force", "--run-id", "startup"]),
    ]
    if sb3:
        found.append(("sb3", [python, "-c", SB3, str(STEPS), str(folder / "sb3_model")]))
    return found


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, repeats=5)
    parser.add_argument("--sb3", action="store_true", help="also run Stable-Baselines3")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        todo = cases(folder, args.sb3)
        for repeat in range(args.repeats):
            for name, cmd in todo:
                run = run_case(name, cmd, folder)
                run["repeat"] = repeat
                runs.append(run)
                print(json.dumps(run), flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for name, _ in todo:
        mine = [r for r in runs if r["case"] == name]
        entry: dict[str, Any] = {"median_wall_s": median_of(mine, "wall_s")}
        if "first_step_s" in mine[0]:
            entry["median_first_step_s"] = median_of(mine, "first_step_s")
            entry["loaded_at_first_step"] = mine[0]["loaded_at_first_step"]
        summary[name] = entry
    print()
    print(f"| case (median of {args.repeats}) | first env step s | whole process s | loaded then |")
    print("|---|---:|---:|---|")
    for name, entry in summary.items():
        first = entry.get("median_first_step_s")
        loaded = ", ".join(entry.get("loaded_at_first_step", [])) or "-"
        print(
            f"| {name} | {'-' if first is None else f'{first:.2f}'} | "
            f"{entry['median_wall_s']:.2f} | {loaded} |"
        )
    ratio = (
        summary["evtrain learn"]["median_wall_s"]
        / summary["import torch, gymnasium"]["median_wall_s"]
    )
    print(f"\nevtrain learn (2,048 steps, export included) / bare import: {ratio:.2f}x (goal 1.3x)")
    path = write_json(
        "startup.json",
        {
            "args": vars(args),
            "runs": runs,
            "summary": summary,
            "learn_over_bare_import": round(ratio, 3),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
