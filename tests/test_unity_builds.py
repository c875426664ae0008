"""Launching Unity builds as ML-Agents does, and their faults: the executable found as
ML-Agents finds it, the command line it gets, a build that never connects (one line naming the
build, its port and its log), a port in use, and no build process left behind."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from evtrain.config.options import EngineSettings, EnvironmentSettings
from evtrain.errors import UnityPortInUseError, UnityTimeoutError
from evtrain.run.environments.unity_builds import build_command, find_executable, make_unity_env
from tests.helpers import end_with_the_suite, free_port, run_cli
from tests.unity_fakes import all_gone, never_connecting_build


def wait_for(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_the_executable_is_found_as_ml_agents_finds_it(tmp_path: Path) -> None:
    build = never_connecting_build(tmp_path / "builds", "Basic")
    assert find_executable(str(tmp_path / "builds/Basic")) == build
    assert find_executable(str(tmp_path / "builds/Basic.x86_64")) == build
    assert find_executable(str(tmp_path / "builds/Other")) is None


def test_the_command_line_is_ml_agents(tmp_path: Path) -> None:
    settings = EnvironmentSettings(env_path="Basic", base_port=6000, env_args=["--level", "2"])
    engine = EngineSettings(no_graphics=True)
    assert build_command(Path("/b/Basic"), settings, engine, 1, tmp_path) == [
        *("/b/Basic", "-nographics", "-batchmode", "--mlagents-port", "6001"),
        *("-logFile", str(tmp_path / "Player-1.log"), "--level", "2"),
    ]
    own_log = EnvironmentSettings(env_path="Basic", env_args=["-logfile", "x.log"])
    assert build_command(Path("/b/Basic"), own_log, EngineSettings(), 0, tmp_path) == [
        *("/b/Basic", "--mlagents-port", "5005", "-logfile", "x.log"),
    ]


def test_a_build_that_never_connects_is_one_line_and_ends(tmp_path: Path) -> None:
    build = never_connecting_build(tmp_path)
    port = free_port()
    settings = EnvironmentSettings(env_path=str(build), base_port=port, timeout_wait=1.0)
    with pytest.raises(UnityTimeoutError) as info:
        make_unity_env(settings, EngineSettings(), {"Basic": None}, tmp_path / "run_logs")
    assert str(info.value) == (
        f"the Unity build {build} did not connect to port {port} within 1 s; see its log "
        f"{tmp_path / 'run_logs/Player-0.log'}, or raise env_settings.timeout_wait "
        "(--timeout-wait)"
    )
    record = json.loads((tmp_path / "Never.json").read_text())
    assert record["argv"] == [
        *("--mlagents-port", str(port), "-logFile", str(tmp_path / "run_logs/Player-0.log"))
    ]
    assert all_gone(record["pids"])  # the build and its child


def test_a_port_in_use_is_said_naming_the_port(tmp_path: Path) -> None:
    build = never_connecting_build(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = EnvironmentSettings(env_path=str(build), base_port=port, timeout_wait=1.0)
        with pytest.raises(UnityPortInUseError, match=str(port)):
            make_unity_env(settings, EngineSettings(), {"Basic": None}, tmp_path / "run_logs")
    assert not (tmp_path / "Never.json").exists()  # the server binds before the build starts


def test_evtrain_learn_with_a_build_that_never_connects_exits_1_in_one_line(
    tmp_path: Path,
) -> None:
    build = never_connecting_build(tmp_path)
    port = free_port()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"behaviors": {"Basic": {}}}))
    result = run_cli(
        *("run.yaml", "--env", str(build), "--base-port", str(port), "--timeout-wait", "1"),
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"evtrain: error: the Unity build {build} did not connect to port {port} within 1 s; "
        f"see its log {tmp_path / 'results/evtrain/run_logs/Player-0.log'}, or raise "
        "env_settings.timeout_wait (--timeout-wait)"
    )
    assert all_gone(json.loads((tmp_path / "Never.json").read_text())["pids"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_builds_run_leaves_no_build_behind(
    tmp_path: Path, signum: signal.Signals
) -> None:
    build = never_connecting_build(tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"behaviors": {"Basic": {}}}))
    command = [sys.executable, "-m", "evtrain", "learn", "run.yaml", "--env", str(build)]
    command += ["--base-port", str(free_port()), "--timeout-wait", "120"]
    process = end_with_the_suite(
        subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    )
    wait_for(tmp_path / "Never.json", timeout_s=60)
    pids = json.loads((tmp_path / "Never.json").read_text())["pids"]
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0, stderr
    assert all_gone(pids), stderr
