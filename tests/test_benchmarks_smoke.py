"""The benchmark scripts still run after sharing ``benchmarks/common.py``.

Every script answers ``--help`` with its documented options; a few run end to end with tiny
settings (never a benchmark's default size) and write the JSON keys docs/benchmark.md and
their docstrings name, into a temporary folder given as ``EVTRAIN_BENCH_OUT``.  Timings are
never asserted: the machine is shared.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

OPTIONS: dict[str, list[str]] = {
    "bench_bus_overhead.py": ["--steps", "--repeats"],
    "bench_curiosity.py": ["--steps", "--seeds", "--strength", "--signals"],
    "bench_distributed.py": ["--steps", "--repeats", "--hidden-units"],
    "bench_imitation.py": ["--steps", "--seeds", "--variants", "--demo"],
    "bench_memory.py": ["--steps", "--seeds", "--envs", "--policies"],
    "bench_pixels.py": ["--steps", "--seeds", "--size", "--kinds"],
    "bench_ppo.py": ["--steps", "--seeds", "--summary-freq", "--sb3", "--whole-process"],
    "bench_sac.py": ["--steps", "--seeds", "--updates"],
    "bench_sac_discrete.py": ["--steps", "--seeds", "--updates"],
    "bench_startup.py": ["--repeats", "--sb3"],
    "bench_threaded.py": ["--cases", "--seeds", "--steps", "--scale", "--segment"],
    "bench_trackers.py": ["--steps", "--repeats", "--variants"],
    "bench_vector.py": ["--steps", "--num-envs", "--delay-ms", "--repeats"],
    "bench_writers.py": ["--events", "--torch-events", "--quick", "--cases", "--out"],
}
"""Each script's documented options, in the order ``--help`` lists them (hidden ones left out)."""


def _env(out: Path) -> dict[str, str]:
    """This checkout's evtrain first on the path, reports to ``out``."""
    path = [str(ROOT / "src"), str(ROOT / "writers"), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "LOCAL_RANK", "WORLD_SIZE"}}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, path)), EVTRAIN_BENCH_OUT=str(out))
    return env


def _run(script: str, *args: str, out: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(out),
        cwd=out,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _report(out: Path, pattern: str) -> dict[str, Any]:
    (path,) = out.glob(pattern)
    report: dict[str, Any] = json.loads(path.read_text())
    return report


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


def test_bus_overhead_end_to_end(tmp_path: Path) -> None:
    done = _run("bench_bus_overhead.py", "--steps", "512", "--repeats", "1", out=tmp_path)
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
        assert run["steps"] == {"CartPole": 512}
    assert sorted(report["median_s"]) == ["defaults+slow", "none"]


def test_writers_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "writers.json"
    args = ["--events", "100", "--torch-events", "100", "--cases", "no-subscribers"]
    done = _run("bench_writers.py", *args, "tensorboard", "--out", str(out), out=tmp_path)
    assert " ".join(done.stdout.split("\n")[0].split()) == (
        "case paced emit p50/p99/p99.9 us burst emit p50/p99 us scalars/s e2e vs torch "
        "read back lost peak RSS MB"
    )
    assert f"JSON: {out}" in done.stdout
    report = json.loads(out.read_text())
    assert sorted(report) == ["cases", "meta"]
    assert sorted(report["meta"]) == ["cpus", "date", "events", "machine", "python", "torch_events"]
    assert (report["meta"]["events"], report["meta"]["torch_events"]) == (100, 100)
    floor, tensorboard = report["cases"]
    assert (floor["case"], tensorboard["case"]) == ("no-subscribers", "tensorboard")
    assert (floor["scalars"], tensorboard["read_back"], tensorboard["lost"]) == (1000, 1000, 0)
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
