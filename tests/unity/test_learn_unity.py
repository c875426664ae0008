"""``evtrain learn`` trains a Unity build: the stand-in corridor (ML-Agents' Basic) over two
instances, the build receiving ML-Agents' arguments and engine settings; and Ctrl-C (SIGINT)
while the builds run leaves no build process behind."""

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


def test_a_build_that_crashes_mid_run_is_one_line_naming_its_log(tmp_path: Path) -> None:
    build = make_build(tmp_path / "builds", "crash", "Basic", args=("--crash-after", "100"))
    data = {
        "behaviors": {"Basic": BASIC},
        "env_settings": {"env_path": str(build), "base_port": free_port()},
        "checkpoint_settings": {"run_id": "basic", "results_dir": str(tmp_path / "results")},
    }
    (tmp_path / "basic.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("basic.yaml", cwd=tmp_path)
    assert result.returncode == 1
    line = result.stderr.splitlines()[-1]
    assert line.startswith(f"evtrain: error: the Unity build {build} (instance 0, port "), line
    assert line.endswith(
        f"; see its log {tmp_path / 'results/basic/run_logs/Player-0.log'} (a crashed build is "
        "not restarted yet)"
    )
