"""A Unity build instance that crashes mid-run is started again within ML-Agents' restart
limits: its agents' episodes end as interrupted, the other instances go on, its crashed log is
kept; and the limits counted as ML-Agents counts them."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest

from evtrain.config.options import EngineSettings, EnvironmentSettings
from evtrain.errors import UnityRestartLimitError
from evtrain.run.environments.unity_builds import make_unity_env
from evtrain.run.environments.unity_restarts import RestartQuota
from evtrain.unity.side_channels import EnvironmentParametersChannel
from tests.helpers import free_port
from tests.standin import make_build
from tests.unity_fakes import all_gone

CRASH_AFTER = 5


def test_a_crashed_instance_restarts_and_its_episodes_end_interrupted(tmp_path: Path) -> None:
    build = make_build(tmp_path / "builds", "crash", "Basic")
    marker = tmp_path / "crashed"
    env_args = ["--crash-after", str(CRASH_AFTER), "--crash-once", str(marker)]
    settings = EnvironmentSettings(
        env_path=str(build), base_port=free_port(), num_envs=2, env_args=env_args
    )
    logs = tmp_path / "run_logs"
    builds = make_unity_env(settings, EngineSettings(time_scale=7.0), {"Basic": None}, logs)
    view = builds.view("Basic")
    pids = [p.pid for p in builds.processes if p is not None]
    try:
        stay = {"Basic": np.zeros_like(view.action_space.sample())}
        for _ in range(CRASH_AFTER - 1):
            record = builds.step(stay)["Basic"]
            assert not record.truncated.any() and not record.terminated.any()
        record = builds.step(stay)["Basic"]  # the first instance to get there crashed in it
        (k,) = [i for i in (0, 1) if (logs / f"Player-{i}.crash-1.log").exists()]
        assert record.truncated.tolist() == [i == k for i in (0, 1)]
        assert not record.terminated.any() and record.rewards[k] == 0.0
        assert record.active.all() and record.has_final[k]
        start = record.obs[1 - k]["obs_0"]  # every agent stayed at the start cell
        assert np.array_equal(record.final_obs[k]["obs_0"], start)
        after = builds.step(stay)["Basic"]
        assert after.active.all() and not after.truncated.any()  # the new agent acted on
        assert builds.restarts == 1
        assert (view.take_worker_restarts(), view.take_worker_restarts()) == (1, 0)
        crashed = (logs / f"Player-{k}.crash-1.log").read_text().splitlines()
        assert crashed[-1] == f"crash: after {CRASH_AFTER} steps"
        again = (logs / f"Player-{k}.log").read_text().splitlines()
        assert again[0].startswith("args: ") and "engine: time_scale=7.0" in again
        assert again.count("command: RESET") == 1
        other = (logs / f"Player-{1 - k}.log").read_text().splitlines()
        assert other.count("command: RESET") == 1  # the other instance went on, not reset
        pids += [p.pid for p in builds.processes if p is not None]
    finally:
        builds.close()
    assert all_gone(pids)


def test_a_build_that_stops_answering_is_restarted_and_counted_for_every_behavior(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build = make_build(tmp_path / "builds", "multi", "Multi")
    hang_once = ["--crash-after", "3", "--crash-how", "hang", "--crash-once", str(tmp_path / "m")]
    settings = EnvironmentSettings(env_path=str(build), base_port=free_port(), env_args=hang_once)
    logs = tmp_path / "run_logs"
    builds = make_unity_env(settings, EngineSettings(), {"Striker": None, "Coop": None}, logs)
    hung = builds.processes[0]
    assert hung is not None
    try:
        views = {name: builds.view(name) for name in ("Striker", "Coop")}
        actions = {name: np.zeros_like(v.action_space.sample()) for name, v in views.items()}
        for _ in range(2):
            builds.step(actions)
        builds.connections[0].timeout = 1.0  # how long a step waits for its answer (timeout_wait)
        records = builds.step(actions)
        assert all(records[name].truncated.all() for name in views)  # every agent was in it
        assert [v.take_worker_restarts() for v in views.values()] == [1, 1]
        assert "stopped answering during the run (the Unity build on port " in caplog.text
        kept = (logs / "Player-0.crash-1.log").read_text().splitlines()
        assert kept[-1] == "hang: after 3 steps"
        builds.step(actions)  # the restarted instance steps on
    finally:
        builds.close()
    assert all_gone([hung.pid])


def test_a_restart_that_does_not_connect_counts_as_a_crash(tmp_path: Path) -> None:
    build = make_build(tmp_path / "builds", "crash", "Basic")
    marker = str(tmp_path / "crashed")
    once = ["--crash-after", "3", "--crash-once", marker, "--never-again", marker]
    port = free_port()
    settings = EnvironmentSettings(env_path=str(build), base_port=port, env_args=once)
    logs = tmp_path / "run_logs"
    builds = make_unity_env(settings, EngineSettings(), {"Basic": None}, logs)
    assert builds.launch is not None  # the restart waits 3 s for the build to connect
    builds.launch = attrs.evolve(builds.launch, settings=attrs.evolve(settings, timeout_wait=3.0))
    pids = [p.pid for p in builds.processes if p is not None]
    try:
        stay = {"Basic": np.zeros_like(builds.view("Basic").action_space.sample())}
        with pytest.raises(UnityRestartLimitError) as info:
            for _ in range(3):
                builds.step(stay)
        pids += [p.pid for p in builds.processes if p is not None]
    finally:
        builds.close()
    assert str(info.value) == (
        f"the Unity build {build} (instance 0, port {port}) did not start again (the Unity build "
        f"{build} did not connect to port {port} within 3 s; see its log {logs / 'Player-0.log'}"
        ", or raise env_settings.timeout_wait (--timeout-wait)) after 1 restart(s), past "
        "env_settings.restarts_rate_limit_n (1 within restarts_rate_limit_period_s, 60 s; raise "
        f"it, --restarts-rate-limit-n, -1 for no limit): the models are saved; see its log "
        f"{logs / 'Player-0.log'}"
    )  # the defaults: one restart a minute
    assert (logs / "Player-0.crash-1.log").read_text().splitlines()[-1] == "crash: after 3 steps"
    assert all_gone(pids) and len(pids) == 2


def test_a_restarted_instance_gets_the_environment_parameters_again(tmp_path: Path) -> None:
    build = make_build(tmp_path / "builds", "crash", "Basic")
    once = ["--crash-after", "2", "--crash-once", str(tmp_path / "crashed")]
    settings = EnvironmentSettings(env_path=str(build), base_port=free_port(), env_args=once)
    logs = tmp_path / "run_logs"

    def parameters(channel: EnvironmentParametersChannel) -> None:
        channel.set_float_parameter("level", 2.0)

    builds = make_unity_env(
        settings, EngineSettings(), {"Basic": None}, logs, parameters=parameters
    )
    try:
        stay = {"Basic": np.zeros_like(builds.view("Basic").action_space.sample())}
        for _ in range(2):
            builds.step(stay)
        assert builds.restarts == 1
    finally:
        builds.close()
    for log in ("Player-0.crash-1.log", "Player-0.log"):
        assert "env_param: level=2.0" in (logs / log).read_text().splitlines()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_lifetime_limit_counts_each_instance_over_the_run() -> None:
    settings = EnvironmentSettings(max_lifetime_restarts=2, restarts_rate_limit_n=-1)
    quota = RestartQuota(settings, 2, _Clock())
    assert quota.limit_hit(0) is None and quota.record(0) == 1
    assert quota.limit_hit(0) is None and quota.record(0) == 2
    assert quota.limit_hit(0) == (
        "env_settings.max_lifetime_restarts (2 per instance over the run; raise it, "
        "--max-lifetime-restarts, -1 for no limit)"
    )
    assert quota.limit_hit(1) is None  # each instance has its own
    assert RestartQuota(EnvironmentSettings(max_lifetime_restarts=0), 1).limit_hit(0) is not None


def test_the_rate_limit_counts_the_restarts_within_its_period() -> None:
    settings = EnvironmentSettings(
        max_lifetime_restarts=-1, restarts_rate_limit_n=2, restarts_rate_limit_period_s=60.0
    )
    clock = _Clock()
    quota = RestartQuota(settings, 1, clock)
    for _ in range(2):
        assert quota.limit_hit(0) is None
        quota.record(0)
        clock.now += 10.0
    assert quota.limit_hit(0) == (
        "env_settings.restarts_rate_limit_n (2 within restarts_rate_limit_period_s, 60 s; raise "
        "it, --restarts-rate-limit-n, -1 for no limit)"
    )
    clock.now += 41.0  # the first restart is out of the period now
    assert quota.limit_hit(0) is None


def test_no_limits_allow_every_restart() -> None:
    settings = EnvironmentSettings(max_lifetime_restarts=-1, restarts_rate_limit_n=-1)
    quota = RestartQuota(settings, 1, _Clock())
    for count in range(1, 50):
        assert quota.limit_hit(0) is None and quota.record(0) == count
