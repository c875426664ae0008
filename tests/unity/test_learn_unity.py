"""``evtrain learn`` trains a Unity build: the stand-in corridor (ML-Agents' Basic) over two
instances, the build receiving ML-Agents' arguments and engine settings; Ctrl-C (SIGINT) while
the builds run leaves no build process behind; a build that crashes is restarted within the
restart limits, and past them the run saves its models and exits in one line."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import onnx
import yaml

from tests.helpers import end_with_the_suite, free_port, run_cli
from tests.standin import make_build

BASIC: dict[str, Any] = {
    "trainer_type": "ppo",
    "hyperparameters": {
        **{"batch_size": 32, "buffer_size": 256, "learning_rate": 0.003, "beta": 0.005},
        **{"epsilon": 0.2, "lambd": 0.95, "num_epoch": 3},
    },
    "network_settings": {"normalize": False, "hidden_units": 20, "num_layers": 2},
    "reward_signals": {"extrinsic": {"gamma": 0.9, "strength": 1.0}},
    "max_steps": 3072,
    "time_horizon": 16,
    "summary_freq": 512,
}
BEST_RETURN = 0.93
"""The corridor's best return: the far goal (1.0) reached in 8 steps of -0.01 (ML-Agents'
Basic)."""


def basic_config(tmp_path: Path, **env_settings: Any) -> Path:
    build = make_build(tmp_path / "builds", "corridor", "Basic")
    data = {
        "behaviors": {"Basic": BASIC},
        "env_settings": {"env_path": str(build), "seed": 1, **env_settings},
        "checkpoint_settings": {"run_id": "basic", "results_dir": str(tmp_path / "results")},
        "writers": {"csv": {}},
    }
    (tmp_path / "basic.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "basic.yaml"


def test_evtrain_learn_trains_the_corridor_over_two_instances(tmp_path: Path) -> None:
    basic_config(tmp_path, num_envs=2, base_port=free_port())
    result = run_cli("basic.yaml", "--time-scale", "3", "--no-graphics", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results/basic"
    with (run / "Basic/progress.csv").open() as f:
        rewards = [float(row["Environment/Cumulative Reward"]) for row in csv.DictReader(f)]
    assert rewards[-1] >= 0.9 * BEST_RETURN, rewards
    outputs = [o.name for o in onnx.load(str(run / "Basic.onnx")).graph.output]
    assert "version_number" in outputs and "discrete_actions" in outputs  # Unity's contract
    for worker_id in (0, 1):
        log = (run / f"run_logs/Player-{worker_id}.log").read_text().splitlines()
        assert "-nographics -batchmode --mlagents-port " in log[0]
        assert log[0].endswith(f"-logFile {run / f'run_logs/Player-{worker_id}.log'}")
        assert f"seed={1 + worker_id}" in log[1]
        assert "engine: time_scale=3.0" in log


def test_ctrl_c_while_the_builds_train_leaves_no_build_behind(tmp_path: Path) -> None:
    config = basic_config(tmp_path, num_envs=2, base_port=free_port())
    command = [sys.executable, "-m", "evtrain", "learn", str(config)]
    process = end_with_the_suite(
        subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    )
    logs = [tmp_path / f"results/basic/run_logs/Player-{i}.log" for i in (0, 1)]
    deadline = time.monotonic() + 60
    while not all(log.exists() and "engine" in log.read_text() for log in logs):
        assert time.monotonic() < deadline and process.poll() is None, "the builds never started"
        time.sleep(0.05)
    pids = builds_of(tmp_path)
    assert len(pids) >= 2
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr  # stopped cleanly: saved and exported
    assert (tmp_path / "results/basic/Basic.onnx").exists()
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], stderr


def builds_of(folder: Path) -> list[int]:
    """The processes of the stand-in builds whose command line names ``folder`` (this test's
    run logs)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        if b"--mlagents-port" in text and str(folder).encode() in text:
            found.append(int(cmdline.parent.name))
    return found


def crashing_run(tmp_path: Path, *args: str, **env_settings: Any) -> tuple[Path, int]:
    """The corridor build given ``args``, in a run of 512 steps (summaries every 128); the
    build and its port."""
    build = make_build(tmp_path / "builds", "crash", "Basic", args=args)
    port = free_port()
    data = {
        "behaviors": {"Basic": {**BASIC, "max_steps": 512, "summary_freq": 128}},
        "env_settings": {"env_path": str(build), "base_port": port, **env_settings},
        "checkpoint_settings": {"run_id": "basic", "results_dir": str(tmp_path / "results")},
        "writers": {"csv": {}},
    }
    (tmp_path / "basic.yaml").write_text(yaml.safe_dump(data))
    return build, port


def test_a_build_that_crashes_once_is_restarted_and_the_run_goes_on(tmp_path: Path) -> None:
    crash_once = ("--crash-after", "100", "--crash-once", str(tmp_path / "crashed"))
    crashing_run(tmp_path, *crash_once)
    result = run_cli("basic.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results/basic"
    with (run / "Basic/progress.csv").open() as f:
        restarts = [float(row["Environment/Worker Restarts"]) for row in csv.DictReader(f)]
    assert sum(restarts) == 1, restarts
    crashed = (run / "run_logs/Player-0.crash-1.log").read_text().splitlines()
    assert crashed[-1] == "crash: after 100 steps"
    again = (run / "run_logs/Player-0.log").read_text().splitlines()
    assert again[0].startswith("args: ") and again[-1] == "quit: status 400"  # told to quit
    assert (run / "Basic.onnx").exists()
    assert not builds_of(tmp_path)


def test_a_build_crashing_past_max_lifetime_restarts_saves_and_exits_in_one_line(
    tmp_path: Path,
) -> None:
    build, port = crashing_run(
        tmp_path, "--crash-after", "30", max_lifetime_restarts=1, restarts_rate_limit_n=-1
    )
    result = run_cli("basic.yaml", cwd=tmp_path)
    assert result.returncode == 1
    run = tmp_path / "results/basic"
    assert result.stderr.splitlines()[-1] == (
        f"evtrain: error: the Unity build {build} (instance 0, port {port}) exited during the "
        "run with status 3 after 1 restart(s), past env_settings.max_lifetime_restarts (1 per "
        "instance over the run; raise it, --max-lifetime-restarts, -1 for no limit): the models "
        f"are saved; see its log {run / 'run_logs/Player-0.log'}"
    )
    assert (run / "run_logs/Player-0.crash-1.log").exists()
    assert (run / "run_logs/Player-0.log").read_text().splitlines()[-1] == "crash: after 30 steps"
    assert (run / "Basic.onnx").exists()
    assert (run / "Basic/checkpoint.pt").exists()
    assert not builds_of(tmp_path)


def test_the_restart_rate_limit_stops_the_run_at_the_second_crash(tmp_path: Path) -> None:
    crashing_run(
        tmp_path,
        *("--crash-after", "30"),
        max_lifetime_restarts=-1,
        restarts_rate_limit_n=1,
        restarts_rate_limit_period_s=3600,
    )
    result = run_cli("basic.yaml", cwd=tmp_path)
    assert result.returncode == 1
    line = result.stderr.splitlines()[-1]
    assert " after 1 restart(s), past env_settings.restarts_rate_limit_n (1 within " in line
    assert "restarts_rate_limit_period_s, 3600 s; raise it, --restarts-rate-limit-n, " in line
    logs = sorted(p.name for p in (tmp_path / "results/basic/run_logs").glob("Player-*"))
    assert logs == ["Player-0.crash-1.log", "Player-0.log"]
    assert (tmp_path / "results/basic/Basic.onnx").exists()
    assert not builds_of(tmp_path)
