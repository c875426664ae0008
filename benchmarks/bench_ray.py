"""``env_settings.vectorization``: async vs ray on environments that wait per step.

``bench_envs:sleeping_cartpole``, a CartPole that waits ``--delays-ms`` (sleeping) on every
step, as a simulator running elsewhere would, in 8, 16 and 32 copies (``--num-envs``).
``async`` (Gymnasium's ``AsyncVectorEnv``) steps each copy in a process of its own, all at
once; ``ray`` steps them in ``--workers`` Ray actors (fewer when there are fewer copies), each
holding its share and stepping it in one remote call per vector step.  Measured here: the
vector environment alone, built as ``evtrain learn`` builds it
(``evtrain.run.environments.envs.make_envs``) and stepped with random actions, ``--steps`` vector
steps after 10 to warm up (no learner).

Per case: env steps/s, milliseconds per vector step, and the *environment's own* time per
vector step (the delay for async, where every copy waits at once; the delay x the copies of
the fullest worker for ray, where a worker steps its copies one after another): what is left
is the overhead of each mode's round trips.  ``ray`` runs on a Ray of its own started in this
process (``--address`` for a running cluster).  Writes ``benchmarks/out/ray.json``::

    .venv/bin/python benchmarks/bench_ray.py --steps 200
"""

from __future__ import annotations

import math
import time
from typing import Any

from common import machine, make_parser, median_of, write_json


def measure(mode: str, num_envs: int, delay_ms: float, steps: int, args: Any) -> dict[str, Any]:
    import numpy as np

    from evtrain.config.options import EnvironmentSettings, RaySettings
    from evtrain.run.environments.envs import make_envs

    workers = min(num_envs, args.workers)
    settings = EnvironmentSettings(
        env_id="bench_envs:sleeping_cartpole",
        env_kwargs={"delay_s": delay_ms / 1000},
        num_envs=num_envs,
        vectorization=mode,
        ray=RaySettings(address=args.address, workers=workers, cpus_per_worker=0),
    )
    envs = make_envs(settings)
    try:
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, 2, size=num_envs) for _ in range(steps + 10)]
        for action in actions[:10]:
            envs.step(action)
        start = time.perf_counter()
        for action in actions[10:]:
            envs.step(action)
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    per_step_ms = seconds / steps * 1000
    own_ms = delay_ms * (1 if mode == "async" else math.ceil(num_envs / workers))
    return {
        "mode": mode,
        "num_envs": num_envs,
        "delay_ms": delay_ms,
        "workers": num_envs if mode == "async" else workers,
        "steps_per_s": round(num_envs * steps / seconds, 1),
        "ms_per_step": round(per_step_ms, 3),
        "env_ms_per_step": own_ms,
        "overhead_ms_per_step": round(per_step_ms - own_ms, 3),
    }


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--steps", type=int, default=200, help="vector steps timed per case")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--delays-ms", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--workers", type=int, default=8, help="Ray actors (at most)")
    parser.add_argument("--address", default=None, help="a Ray cluster (default: its own)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        for delay_ms in args.delays_ms:
            for num_envs in args.num_envs:
                for mode in ("async", "ray"):
                    result = measure(mode, num_envs, delay_ms, args.steps, args)
                    runs.append(result)
                    print(result, flush=True)
    print()
    print(
        "| delay | envs | async steps/s | ray steps/s (workers) | async ms/step (overhead) "
        "| ray ms/step (overhead) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    summary = []
    for delay_ms in args.delays_ms:
        for num_envs in args.num_envs:
            case: dict[str, Any] = {"delay_ms": delay_ms, "num_envs": num_envs}
            for mode in ("async", "ray"):
                where = {"mode": mode, "delay_ms": delay_ms, "num_envs": num_envs}
                case[mode] = {
                    key: median_of(runs, key, **where)
                    for key in ("steps_per_s", "ms_per_step", "overhead_ms_per_step", "workers")
                }
            summary.append(case)
            a, r = case["async"], case["ray"]
            print(
                f"| {delay_ms:g} ms | {num_envs} | {a['steps_per_s']:,.0f} "
                f"| {r['steps_per_s']:,.0f} ({r['workers']}) "
                f"| {a['ms_per_step']:.2f} ({a['overhead_ms_per_step']:+.2f}) "
                f"| {r['ms_per_step']:.2f} ({r['overhead_ms_per_step']:+.2f}) |"
            )
    report = {"machine": machine(), "args": vars(args), "runs": runs, "summary": summary}
    path = write_json("ray.json", report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
