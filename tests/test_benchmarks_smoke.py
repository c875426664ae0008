"""The benchmark scripts still run after sharing ``benchmarks/common.py``.

Every script answers ``--help`` with its documented options; a few run end to end with tiny
settings (never a benchmark's default size) and write the JSON keys docs/benchmark.md and
their docstrings name, into a temporary folder given as ``EVTRAIN_BENCH_OUT``.  Timings are
never asserted: the machine is shared.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_runs import BENCHMARKS, _env, _report, _run

ROOT = Path(__file__).resolve().parent.parent

OPTIONS: dict[str, list[str]] = {
    "bench_bus_overhead.py": ["--steps", "--repeats"],
    "bench_cooperation.py": ["--steps", "--seeds", "--variants", "--envs", "--game"],
    "bench_curiosity.py": ["--steps", "--seeds", "--strength", "--providers"],
    "bench_emit.py": ["--events", "--subscribers", "--modes", "--gap-us", "--baseline", "--poll-s"],
    "bench_distributed.py": ["--steps", "--repeats", "--hidden-units"],
    "bench_evaluation.py": ["--steps", "--repeats", "--every", "--episodes"],
    "bench_gpu.py": ["--cases", "--updates", "--warmup", "--budget", "--threads"],
    "bench_imitation.py": ["--steps", "--seeds", "--variants", "--demo"],
    "bench_isolation.py": ["--events", "--keys", "--work-us", "--hold-us", "--repeats"],
    "bench_memory.py": ["--steps", "--seeds", "--envs", "--policies"],
    "bench_multiagent_speed.py": ["--steps", "--repeats", "--cases"],
    "bench_pixels.py": ["--steps", "--seeds", "--size", "--kinds"],
    "bench_ppo.py": ["--steps", "--seeds", "--summary-freq", "--sb3", "--whole-process"],
    "bench_ray.py": ["--steps", "--num-envs", "--delays-ms", "--workers", "--address", "--repeats"],
    "bench_sac.py": ["--steps", "--seeds", "--updates"],
    "bench_sac_discrete.py": ["--steps", "--seeds", "--updates"],
    "bench_selfplay.py": ["--steps", "--seeds", "--games", "--envs"],
    "bench_startup.py": ["--repeats", "--sb3"],
    "bench_sweep.py": ["--trials", "--workers", "--steps", "--seeds"],
    "bench_threaded.py": ["--cases", "--seeds", "--steps", "--scale", "--segment"],
    "bench_trackers.py": ["--steps", "--repeats", "--variants"],
    "bench_unity.py": ["--steps", "--agents", "--cases"],
    "bench_vector.py": ["--steps", "--num-envs", "--delay-ms", "--repeats"],
    "bench_writers.py": ["--events", "--torch-events", "--quick", "--cases", "--out"],
}
"""Each script's documented options, in the order ``--help`` lists them (hidden ones left out)."""


def test_every_script_is_covered() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("bench_*.py")} - {"bench_envs.py"}
    assert scripts == set(OPTIONS)


@pytest.mark.parametrize("script", sorted(OPTIONS))
def test_help_lists_the_documented_options(script: str, tmp_path: Path) -> None:
    text = _run(script, "--help", out=tmp_path).stdout
    doc = (BENCHMARKS / script).read_text().split('"""')[1]
    description = doc.strip().split("\n")[0]
    assert text.startswith(f"usage: {script} ")
    assert "".join(description.split()) in "".join(text.split())  # as argparse wraps it
    listed = re.findall(r"^  (?:-h, )?(--[a-z0-9-]+)", text, flags=re.MULTILINE)
    assert listed == ["--help", *OPTIONS[script]]
    assert list(tmp_path.iterdir()) == []


def test_unity_end_to_end(tmp_path: Path) -> None:
    done = _run("bench_unity.py", "--steps", "5", "--agents", "2", "--cases", "evtrain", "floor",
                out=tmp_path)  # fmt: skip
    assert re.search(r"^     2 +\d+ +\d+$", done.stdout, flags=re.MULTILINE), done.stdout
    report = _report(tmp_path, "unity.json")
    assert set(report["steps_per_s"]["2"]) == {"evtrain", "floor"}
    assert set(report["goals"]["met"]) == {"floor_2"}


def test_ray_end_to_end(tmp_path: Path) -> None:
    args = ["--steps", "5", "--num-envs", "2", "--delays-ms", "1", "--workers", "2"]
    done = _run("bench_ray.py", *args, out=tmp_path)
    assert re.search(r"^\| 1 ms \| 2 \| [\d,]+ \| [\d,]+ \(2\) \|", done.stdout, flags=re.MULTILINE)
    report = _report(tmp_path, "ray.json")
    (case,) = report["summary"]
    assert set(case["ray"]) == {"steps_per_s", "ms_per_step", "overhead_ms_per_step", "workers"}
    assert [run["mode"] for run in report["runs"]] == ["async", "ray"]


def test_isolation_end_to_end(tmp_path: Path) -> None:
    done = _run(
        "bench_isolation.py", "--events", "200", "--hold-us", "100", "--repeats", "1", out=tmp_path
    )
    assert re.search(r"^gil100/process +\d+ +-?\d+\.\d$", done.stdout, flags=re.MULTILINE)
    report = _report(tmp_path, "isolation.json")
    assert [row["variant"] for row in report["rows"]] == [
        "none",
        "noop/thread",
        "noop/process",
        "gil100/thread",
        "gil100/process",
    ]


def test_emit_end_to_end(tmp_path: Path) -> None:
    done = _run(
        "bench_emit.py", "--events", "200", "--subscribers", "0", "2", "--poll-s", "0.2",
        out=tmp_path,
    )  # fmt: skip
    assert re.search(r"^burst +2 +this +[\d.]+ +[\d.]+ +[\d.]+ +\d+ +[\d.]+ +[\d.]+ +yes$",
                     done.stdout, flags=re.MULTILINE), done.stdout  # fmt: skip
    report = _report(tmp_path, "emit.json")
    cases = [(c["mode"], c["subscribers"], c["all_delivered"]) for c in report["cases"]]
    assert cases == [(m, n, True) for m in ("paced", "burst") for n in (0, 2)]
    assert set(report["cases"][0]["emit"]) == {"p50_us", "p99_us", "p999_us", "max_us"}
    assert set(report["cases"][0]["timer"]) == {"p50_us", "p99_us", "p999_us", "max_us"}
    assert report["poll_s"] == 0.2 and {c["poll_s"] for c in report["cases"]} == {0.2}


def test_bus_overhead_end_to_end(tmp_path: Path) -> None:
    # 256 steps: one rollout of the example's 8 envs x 32 steps
    done = _run("bench_bus_overhead.py", "--steps", "256", "--repeats", "1", out=tmp_path)
    assert re.search(r"^none +\d+\.\d\d +\d+\.\d\d +1$", done.stdout, flags=re.MULTILINE)
    report = _report(tmp_path, "bus_overhead.json")
    assert sorted(report) == [
        "fastest_s",
        "median_cpu_s",
        "median_main_thread_cpu_s",
        "median_other_threads_cpu_s",
        "median_s",
        "overhead_pct",
        "paired_ratio_median",
        "runs",
    ]
    assert sorted(report["runs"]) == ["defaults+slow", "none"]
    for variant, (run,) in report["runs"].items():
        assert sorted(run) == [
            "cpu_s",
            "events_delivered",
            "main_cpu_s",
            "other_cpu_s",
            "steps",
            "variant",
            "wall_s",
        ]
        assert run["variant"] == variant
        assert run["steps"] == {"CartPole": 256}
    assert sorted(report["median_s"]) == ["defaults+slow", "none"]


def test_evaluation_end_to_end(tmp_path: Path) -> None:
    # two evaluations, one after each 256-step rollout (the example's 8 envs x 32 steps)
    args = ["--steps", "512", "--repeats", "1", "--every", "256", "--episodes", "2"]
    done = _run("bench_evaluation.py", *args, out=tmp_path)
    assert re.search(r"^overhead of evaluation: [+-]\d+\.\d % wall time", done.stdout, re.M)
    report = _report(tmp_path, "evaluation.json")
    assert sorted(report) == [
        "args",
        "machine",
        "main_cpu_overhead_pct",
        "median_main_cpu_s",
        "median_other_cpu_s",
        "median_wall_s",
        "median_worker_cpu_s",
        "overhead_pct",
        "paired_overhead_pct",
        "runs",
    ]
    (none,), (evaluated,) = report["runs"]["none"], report["runs"]["evaluation"]
    assert (none["evaluations"], none["worker_cpu_s"]) == ([], 0)
    assert [e[0] for e in evaluated["evaluations"]] == [256, 512]
    assert evaluated["worker_cpu_s"] > 0


def test_gpu_end_to_end(tmp_path: Path) -> None:
    import torch

    args = ["--cases", "ppo-cartpole", "sac-pendulum", "--updates", "2", "--warmup", "1"]
    done = _run("bench_gpu.py", *args, out=tmp_path)
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if devices == ["cpu"]:
        assert done.stdout.startswith("no CUDA device for torch ")
        assert "CUDA: not measured (no CUDA device)" in done.stdout
    assert re.search(r"^ppo-cartpole +cpu +2 +\d+\.\d\d +20 +\d+\.\d{3} +$", done.stdout, re.M)
    report = _report(tmp_path, "gpu.json")
    assert sorted(report) == ["args", "cuda", "machine", "rows", "speedups", "torch"]
    assert [(r["case"], r["device"]) for r in report["rows"]] == [
        (case, device) for case in ("ppo-cartpole", "sac-pendulum") for device in devices
    ]
    for r in report["rows"]:
        assert r["updates"] == len(r["ms_per_update_all"]) == 2
        assert r["gradient_steps_per_update"] == (20 if r["case"] == "ppo-cartpole" else 1)
    assert sorted(report["speedups"]) == (
        [] if devices == ["cpu"] else ["ppo-cartpole", "sac-pendulum"]
    )


def test_gpu_check_without_cuda_stops_at_once_saying_why(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: benchmarks/gpu_check.sh would run in full")
    env = {**_env(tmp_path), "PYTHON": sys.executable, "OUT": str(tmp_path)}
    env.pop("EVTRAIN_TEST_ACCELERATOR", None)
    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_check.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2,
        "gpu_check: torch sees no CUDA device here; nothing to check "
        "(EVTRAIN_TEST_ACCELERATOR=cpu runs the same steps on the CPU)",
    )
    assert f"torch {torch.__version__} CUDA None" in (tmp_path / "device.txt").read_text()


def test_writers_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "writers.json"
    args = ["--events", "100", "--torch-events", "100", "--cases", "no-subscribers"]
    cases = ["tensorboard", "tensorboard-alone"]
    done = _run("bench_writers.py", *args, *cases, "--out", str(out), out=tmp_path)
    assert " ".join(done.stdout.split("\n")[0].split()) == (
        "case paced emit p50/p99/p99.9 us burst emit p50/p99 us scalars/s e2e vs torch "
        "read back lost peak RSS MB"
    )
    assert f"JSON: {out}" in done.stdout
    report = json.loads(out.read_text())
    assert sorted(report) == ["cases", "meta"]
    assert sorted(report["meta"]) == ["cpus", "date", "events", "machine", "python", "torch_events"]
    assert (report["meta"]["events"], report["meta"]["torch_events"]) == (100, 100)
    floor, tensorboard, alone = report["cases"]
    assert (floor["case"], tensorboard["case"]) == ("no-subscribers", "tensorboard")
    assert (floor["scalars"], tensorboard["read_back"], tensorboard["lost"]) == (1000, 1000, 0)
    # the writer without a bus: its files hold every scalar, its time per event is its own
    assert (alone["case"], alone["read_back"], alone["lost"]) == ("tensorboard-alone", 1000, 0)
    assert alone["first_us_per_event"] > 0 and alone["warm_us_per_event"] > 0
    assert "tensorboard-alone: write_stats without a bus, thread CPU" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["writers.json"]


def test_ppo_end_to_end(tmp_path: Path) -> None:
    done = _run("bench_ppo.py", "--steps", "512", "--seeds", "0", out=tmp_path)
    assert re.search(r"^evtrain  seed 0: +\d+ steps/s, 475 at None, final mean-20 ", done.stdout)
    report = _report(tmp_path, "bench_ppo-*.json")
    assert sorted(report) == ["args", "runs", "summary"]
    (run,) = report["runs"]
    assert sorted(run) == [
        "episodes",
        "final_mean_20",
        "library",
        "seconds",
        "seed",
        "stats_events",
        "steps",
        "steps_per_cpu_s",
        "steps_per_s",
        "steps_to_475",
    ]
    assert (run["library"], run["seed"], run["steps"], run["steps_to_475"]) == (
        "evtrain",
        0,
        512,
        None,
    )
    assert run["episodes"] > 0
    assert sorted(report["summary"]["evtrain"]) == [
        "median_steps_per_cpu_s",
        "median_steps_per_s",
        "median_steps_to_475",
        "seeds_reaching_475",
    ]
    assert report["summary"]["evtrain"]["seeds_reaching_475"] == 0


@pytest.mark.slow
def test_vector_end_to_end(tmp_path: Path) -> None:
    args = ["--steps", "128", "--num-envs", "2", "--delay-ms", "0.1", "--repeats", "1"]
    done = _run("bench_vector.py", *args, out=tmp_path)
    assert "| 2 envs, 0.1 ms/step, " in done.stdout
    report = _report(tmp_path, "vector.json")
    assert sorted(report) == ["args", "runs", "summary"]
    assert [(r["mode"], r["steps"], r["num_envs"]) for r in report["runs"]] == [
        ("sync", 128, 2),
        ("async", 128, 2),
    ]
    assert sorted(report["summary"]) == ["async", "async_vs_sync", "sync"]
    assert report["summary"]["sync"]["floor_steps_per_s"] == 10_000


@pytest.mark.slow
def test_curiosity_end_to_end(tmp_path: Path) -> None:
    # 16 MountainCars of 200-step episodes: 4,096 steps end one episode each
    args = ["--steps", "4096", "--seeds", "0", "--providers", "extrinsic", "rnd"]
    done = _run("bench_curiosity.py", *args, out=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0] == "provider   seed first goal  success  mean ret      s"
    assert [line.split()[:3] for line in lines[1:3]] == [
        ["extrinsic", "0", "None"],
        ["rnd", "0", "None"],
    ]
    report = _report(tmp_path, "curiosity.json")
    assert sorted(report) == ["args", "runs"]
    assert [(r["provider"], r["steps"], r["episodes"]) for r in report["runs"]] == [
        ("extrinsic", 4096, 16),
        ("rnd", 4096, 16),
    ]
    assert sorted(report["runs"][0]) == [
        "episodes",
        "mean_return_last_100",
        "provider",
        "seconds",
        "seed",
        "steps",
        "steps_to_first_goal",
        "success_last_100",
    ]


def test_cooperation_end_to_end(tmp_path: Path) -> None:
    args = ["--steps", "450", "--seeds", "0", "--envs", "2", "--variants", "poca", "random"]
    done = _run("bench_cooperation.py", *args, out=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["variant", "seed", "steps", "last-100", "return", "steps/s", "s"]
    assert [line.split()[:3] for line in lines[1:3]] == [
        ["poca", "0", "450"],
        ["random", "0", "450"],
    ]
    report = _report(tmp_path, "cooperation.json")
    assert sorted(report) == ["args", "env", "runs", "summary"]
    assert report["env"] == {
        "id": "mpe2.simple_spread_v3:parallel_env",
        "N": 3,
        "local_ratio": 0.5,
        "max_cycles": 25,
        "continuous_actions": False,
    }
    assert [(r["variant"], r["steps"]) for r in report["runs"]] == [("poca", 450), ("random", 450)]
    for run in report["runs"]:
        assert {"episodes", "mean_return_last_100", "seconds", "steps_per_s"} <= set(run)
        assert run["episodes"] == 450 // 25  # agent episodes of 25 steps
    assert sorted(report["summary"]) == ["poca", "random"]
    assert sorted(report["summary"]["poca"]) == [
        "max_last_100",
        "median_last_100",
        "median_steps_per_s",
        "min_last_100",
    ]


@pytest.mark.slow
def test_memory_end_to_end(tmp_path: Path) -> None:
    args = ["--steps", "512", "--seeds", "0", "--envs", "2", "--policies", "feedforward"]
    done = _run("bench_memory.py", *args, out=tmp_path)
    assert (
        done.stdout.splitlines()[0] == "policy       seed  last-100  best-20  steps to 195      s"
    )
    report = _report(tmp_path, "memory.json")
    assert sorted(report) == ["args", "median_last_100", "runs"]
    (run,) = report["runs"]
    assert sorted(run) == [
        "best_mean_20",
        "episodes",
        "mean_return_last_100",
        "policy",
        "seconds",
        "seed",
        "steps",
        "steps_to_mean_20_of_195",
    ]
    assert (run["policy"], run["steps"]) == ("feedforward", 512)
    assert list(report["median_last_100"]) == ["feedforward"]


@pytest.mark.slow
def test_pixels_end_to_end(tmp_path: Path) -> None:
    args = ["--steps", "512", "--seeds", "0", "--size", "20", "--kinds", "vector", "simple"]
    done = _run("bench_pixels.py", *args, out=tmp_path)
    assert done.stdout.splitlines()[0].split() == [
        *["kind", "seed", "steps/s", "s", "mean", "return", "of", "the", "last", "20", "at"]
    ]
    report = _report(tmp_path, "pixels.json")
    assert sorted(report) == ["args", "runs"]
    assert [(r["kind"], r["size"], r["steps"]) for r in report["runs"]] == [
        ("vector", 20, 512),
        ("simple", 20, 512),
    ]
    assert [list(r["mean_return_last_20"]) for r in report["runs"]] == [["512"], ["512"]]


@pytest.mark.slow
def test_threaded_end_to_end(tmp_path: Path) -> None:
    args = ["--cases", "ppo-cartpole", "--steps", "512", "--segment", "0.2"]
    done = _run("bench_threaded.py", *args, out=tmp_path)
    assert done.stdout.splitlines()[0].split() == [
        *["case", "threaded", "seed", "steps", "seconds", "cpu", "s", "steps/s"],
        *["update", "s", "waited", "s", "final", "return"],
    ]
    report = _report(tmp_path, "threaded.json")
    assert sorted(report) == ["cpus", "runs", "segment", "summary"]
    assert [(r["case"], r["threaded"], r["steps"]) for r in report["runs"]] == [
        ("ppo-cartpole", False, 512),
        ("ppo-cartpole", True, 512),
    ]
    assert sorted(report["summary"]["ppo-cartpole"]) == [
        "speedup",
        "speedups",
        "threaded_final_return",
        "threaded_steps_per_s",
        "unthreaded_final_return",
        "unthreaded_steps_per_s",
    ]


@pytest.mark.slow
def test_startup_end_to_end(tmp_path: Path) -> None:
    done = _run("bench_startup.py", "--repeats", "1", out=tmp_path)
    assert "/ bare import: " in done.stdout
    assert (
        "| case (median of 1) | first env step s | whole process s | loaded then |" in done.stdout
    )
    report = _report(tmp_path, "startup.json")
    assert sorted(report) == ["args", "learn_over_bare_import", "runs", "summary"]
    assert list(report["summary"]) == [
        "python",
        "import torch",
        "import torch, gymnasium",
        "torch + gymnasium",
        "evtrain learn",
    ]
    assert sorted(report["summary"]["evtrain learn"]) == [
        "loaded_at_first_step",
        "median_first_step_s",
        "median_wall_s",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "worker"),
    [
        ("bench_sac.py", ["evtrain", "300", "0"]),
        ("bench_sac_discrete.py", ["sac", "1200", "0"]),
        ("bench_sac_discrete.py", ["ppo", "1024", "0"]),
    ],
)
def test_sac_workers(script: str, worker: list[str], tmp_path: Path) -> None:
    # The whole scripts also run Stable-Baselines3 and fixed-size floors: their workers only.
    done = _run(script, "--worker", *worker, out=tmp_path)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == int(worker[1])
    assert result["seed"] == 0
    assert isinstance(result["final_mean_return"], float)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "worker", "floor"),
    [
        ("bench_sac.py", "floor-evtrain", "evtrain update"),
        ("bench_sac_discrete.py", "floor-update", "discrete SAC update"),
    ],
)
def test_sac_update_floors(script: str, worker: str, floor: str, tmp_path: Path) -> None:
    # The update floors call the off-policy loop's own learning step, a private method, so a
    # change to the loop can break them: both once called a method the loop no longer had.
    done = _run(script, "--worker", worker, "3", out=tmp_path)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["floor"] == floor
    assert result["seconds_per"] > 0


@pytest.mark.slow
def test_sweep_end_to_end(tmp_path: Path) -> None:
    args = ["--trials", "2", "--workers", "2", "--steps", "400", "--seeds", "0"]
    done = _run("bench_sweep.py", *args, out=tmp_path)
    assert done.stdout.split()[:4] == ["trial", "state", "score", "steps"]
    report = _report(tmp_path, "sweep.json")
    assert sorted(report) == ["args", "confirm", "folder", "machine", "summary", "trials"]
    assert sorted(r["trial"] for r in report["trials"]) == [0, 1]
    summary = report["summary"]
    assert summary["steps_budget"] == 800 and summary["rl_zoo"] == {"mean": -157.0, "std": 89.0}
    assert summary["steps_saved_share"] == 1 - summary["steps_run"] / 800
    assert sorted(summary["best_eval"]) == ["eval_mean", "eval_std"]
    assert [c["seed"] for c in report["confirm"]] == [0]
    assert isinstance(report["confirm"][0]["eval_mean"], float)


@pytest.mark.slow
def test_distributed_end_to_end(tmp_path: Path) -> None:
    done = _run("bench_distributed.py", "--steps", "512", "--repeats", "1", out=tmp_path)
    assert " ".join(done.stdout.split("\n\n")[-1].splitlines()[0].split()) == (
        "setup steps/s (median) speed-up efficiency wall s"
    )
    report = _report(tmp_path, "bench_distributed-*.json")
    assert sorted(report) == ["args", "runs", "summary"]
    setups = ["1 rank", "2 ranks, per-rank", "2 ranks, same-batch"]
    assert list(report["runs"]) == setups
    assert [[r["steps"] for r in runs] for runs in report["runs"].values()] == [[512]] * 3
    assert sorted(report["summary"]["1 rank"]) == ["efficiency", "speedup", "steps_per_s", "wall"]


@pytest.mark.slow
def test_trackers_end_to_end(tmp_path: Path) -> None:
    args = ["--steps", "512", "--repeats", "1", "--variants", "none", "evtrain"]
    _run("bench_trackers.py", *args, out=tmp_path)
    report = _report(tmp_path, "trackers.json")
    assert sorted(report) == ["median_steps_per_s", "runs"]
    none, evtrain = report["runs"]["none"][0], report["runs"]["evtrain"][0]
    assert (none["variant"], none["steps"], none["mlflow_run_id"]) == ("none", 512, None)
    assert (evtrain["variant"], evtrain["steps"]) == ("evtrain", 512)
    assert evtrain["missing_points"] == evtrain["duplicated_points"] == 0


@pytest.mark.slow
def test_imitation_end_to_end(tmp_path: Path) -> None:
    import yaml

    config = yaml.safe_load((ROOT / "examples" / "configs" / "cartpole_ppo.yaml").read_text())
    config["behaviors"]["CartPole"]["max_steps"] = 512
    (tmp_path / "expert.yaml").write_text(yaml.safe_dump(config))
    demo = tmp_path / "demo.npz"
    evtrain = ["-m", "evtrain"]
    where = ["expert.yaml", "--run-id", "expert", "--results-dir", str(tmp_path / "results")]
    for command in (
        [*evtrain, "learn", *where],
        [*evtrain, "record", *where, "--episodes", "2", "--output", str(demo)],
    ):
        made = subprocess.run(
            [sys.executable, *command], cwd=tmp_path, env=_env(tmp_path), capture_output=True
        )
        assert made.returncode == 0, made.stderr[-3000:]
    args = ["--demo", str(demo), "--steps", "512", "--seeds", "0", "--variants", "ppo", "gail_bc"]
    done = _run("bench_imitation.py", *args, out=tmp_path)
    assert done.stdout.splitlines()[:2] == [
        f"(given) {demo}",
        "variant  seed steps to 475 episodes      s",
    ]
    report = _report(tmp_path, "imitation.json")
    assert sorted(report) == ["args", "expert", "runs", "settings", "summary"]
    assert [(r["variant"], r["steps"], r["steps_to_475"]) for r in report["runs"]] == [
        ("ppo", 512, None),
        ("gail_bc", 512, None),
    ]
    assert report["summary"]["ppo"] == {
        "median_steps_to_475": None,
        "seeds_reaching_475": 0,
        "seeds": 1,
    }


@pytest.mark.slow
def test_ppo_whole_process_evtrain_half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SB3 half needs Stable-Baselines3 (the `bench` extra): evtrain's half on its own.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    for name, value in _env(tmp_path).items():
        monkeypatch.setenv(name, value)
    whole_process = runpy.run_path(str(BENCHMARKS / "bench_ppo.py"))["whole_process"]
    run = whole_process("evtrain", 512, 0, tmp_path)
    assert sorted(run) == [
        "episodes",
        "final_mean_20",
        "library",
        "model",
        "rollout_s",
        "seconds",
        "seed",
        "steps",
        "steps_per_s",
        "steps_to_475",
        "update_s",
    ]
    assert (run["library"], run["steps"], run["steps_to_475"], run["model"]) == (
        "evtrain",
        512,
        None,
        True,
    )
    episodes = json.loads((tmp_path / "returns-evtrain-0.json").read_text())
    assert run["episodes"] == len(episodes) > 0


def test_selfplay_end_to_end(tmp_path: Path) -> None:
    """Both games, a few hundred steps: tic-tac-toe's tree of a perfect player's optimal moves
    played out in each seat, connect four's matches; the goals judged from those figures."""
    args = ("--steps", "256", "--seeds", "0", "--games", "2")
    done = _run("bench_selfplay.py", *args, out=tmp_path)
    for game, opponent in (
        ("tictactoe", "perfect"),
        ("connect_four", "one_ply"),
        ("connect_four", "two_ply"),
    ):
        assert re.search(
            rf"^{game} +0 +2,048 +\d+\.\d +{opponent} +[\d,]+ +(\d\.\d{{3}} +){{5}}[\d,]+$",
            done.stdout,
            flags=re.MULTILINE,
        ), done.stdout
    report = _report(tmp_path, "selfplay.json")
    connect_four, tictactoe = sorted(report["runs"], key=lambda r: str(r["game"]))
    assert sorted(tictactoe) == ["game", "perfect", "random", "seconds", "seed", "steps"]
    assert sorted(connect_four) == [
        "game",
        "one_ply",
        "random",
        "seconds",
        "seed",
        "steps",
        "two_ply",
    ]
    for seats in (
        tictactoe["random"],
        connect_four["random"],
        connect_four["one_ply"],
        connect_four["two_ply"],
    ):
        played = [sum(seats[side].get(k, 0) for k in ("win", "draw", "loss")) for side in seats]
        assert played == [2, 2]
    # each of the perfect first player's optimal first moves (all 9 cells) is a game of its own
    second = tictactoe["perfect"]["second"]
    assert sum(second.get(k, 0) for k in ("win", "draw", "loss")) >= 9
    lost = sum(seats.get("loss", 0) for seats in tictactoe["perfect"].values())
    assert report["summary"]["tictactoe"]["games_lost_vs_perfect"] == [lost]
    assert report["summary"]["tictactoe"]["no_loss_vs_perfect"] == (lost == 0)
    assert sorted(report["summary"]["connect_four"]) == [
        "trained_within_12_min",
        "win_vs_one_ply",
        "win_vs_one_ply_met",
        "win_vs_random",
        "win_vs_random_met",
        "win_vs_two_ply",
    ]
