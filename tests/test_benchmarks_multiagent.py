"""The multi-agent benchmarks run end to end at tiny sizes and write the keys docs/benchmark.md
names: ``bench_cooperation.py --game kaz`` (knights_archers_zombies, agents that die) and
``bench_multiagent_speed.py``.  Timings and returns are never asserted: the machine is shared
and a few thousand steps learn nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_runs import BENCHMARKS, _env, _report, _run

KAZ_AGENTS = ["archer_0", "archer_1", "knight_0", "knight_1"]


@pytest.mark.slow
def test_cooperation_on_knights_archers_zombies_scores_the_team(tmp_path: Path) -> None:
    args = ["--game", "kaz", "--steps", "2048", "--envs", "1", "--seeds", "0"]
    done = _run("bench_cooperation.py", *args, "--variants", "ppo", "random", out=tmp_path)
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines[1:3]] == [["ppo", "0"], ["random", "0"]]
    assert lines[3].startswith("ppo: median last-100 team return ")
    report = _report(tmp_path, "cooperation_kaz.json")
    assert sorted(report) == ["args", "env", "runs", "summary"]
    assert report["env"] == {
        "id": "pettingzoo.butterfly.knights_archers_zombies_v11:parallel_env",
        "agent_behaviors": dict.fromkeys(KAZ_AGENTS, "agent"),
    }
    ppo, random = report["runs"]
    assert ppo["steps"] == 2048 and random["steps"] >= 2048
    for run in (ppo, random):
        # the team's return is its four agents': 4 x the mean agent episode return
        assert run["score"] == pytest.approx(4 * run["mean_return_last_100"], abs=0.01)
    assert ppo["episodes"] > 0
    assert random["episodes"] % 4 == 0  # whole games, one episode of each agent
    assert random["mean_return_all"] == pytest.approx(random["score"], abs=0.01)
    assert [step for step, _ in ppo["curve"]] == sorted(step for step, _ in ppo["curve"])
    assert sorted(report["summary"]["ppo"]) == [
        "max_team_last_100",
        "median_steps_per_s",
        "median_team_last_100",
        "min_team_last_100",
    ]


def test_a_run_that_ends_no_episode_says_to_give_more_steps(tmp_path: Path) -> None:
    args = ["--worker", "random", "--game", "kaz", "--steps", "8", "--seeds", "0"]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_cooperation.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith("--steps 8 ended no episode: give more steps")


@pytest.mark.slow
def test_multiagent_speed_end_to_end(tmp_path: Path) -> None:
    # max_steps below one rollout: each trainer runs one rollout (3,600 agent steps) and update
    cases = ["poca", "ppo", "ppo-cartpole", "env-spread"]
    done = _run(
        "bench_multiagent_speed.py",
        "--steps",
        "450",
        "--repeats",
        "1",
        "--cases",
        *cases,
        out=tmp_path,
    )
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        *["case", "agent", "steps/s", "env", "steps/s", "rollout", "s", "update", "s"],
        *["train", "s", "wall", "s", "process", "s"],
    ]
    assert [line.split()[0] for line in lines[1:5]] == cases
    assert lines[6].startswith("median over ppo's, update / process: poca ")
    report = _report(tmp_path, "multiagent_speed.json")
    assert sorted(report) == ["args", "machine", "runs", "summary"]
    poca, _, cartpole, env = report["runs"]
    assert (poca["steps"], cartpole["steps"], env["steps"]) == (3600, 3600, 450)
    assert poca["env_steps_per_s"] == pytest.approx(poca["steps_per_s"] / 3, rel=0.01)
    assert cartpole["env_steps_per_s"] == cartpole["steps_per_s"]
    assert poca["rollout_s"] + poca["update_s"] <= poca["train_s"] <= poca["seconds"]
    assert poca["seconds"] < poca["process_s"]
    assert env["rollout_s"] is None
    assert sorted(report["summary"]) == sorted(cases)
    assert sorted(report["summary"]["poca"]) == [
        *["median_env_steps_per_s", "median_process_s", "median_steps_per_s", "median_update_s"],
        *["process_over_ppo", "update_over_ppo"],
    ]
    summary = report["summary"]
    assert summary["env-spread"]["median_update_s"] is None
    assert summary["poca"]["update_over_ppo"] == pytest.approx(
        summary["poca"]["median_update_s"] / summary["ppo"]["median_update_s"], abs=0.01
    )
    assert summary["ppo"]["process_over_ppo"] == 1.0
