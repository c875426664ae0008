"""ML-Agents' Unity keys and flags, read as ML-Agents reads them: each flag writes its key, the
defaults are ML-Agents', and a Unity build beside a Gymnasium environment's keys is refused in
one line naming both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain import ConfigError, RunOptions
from evtrain.cli.overrides import cli_data, interrupted_line
from evtrain.cli.parser import parse
from tests.helpers import run_cli

FLAGS = [
    *("--env", "builds/Basic", "--base-port", "6000", "--num-areas", "2"),
    *("--timeout-wait", "7.5", "--max-lifetime-restarts", "3", "--restarts-rate-limit-n", "2"),
    *("--restarts-rate-limit-period-s", "30", "--no-graphics", "--width", "100"),
    *("--height", "90", "--quality-level", "1", "--time-scale", "4", "--target-frame-rate", "30"),
    *("--capture-frame-rate", "50", "--num-envs", "2", "--seed", "9"),
    *("--env-args", "--level", "3"),
]


def test_each_unity_flag_writes_its_ml_agents_key(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"behaviors": {"Basic": {}}}))
    args = parse(["learn", str(tmp_path / "run.yaml"), *FLAGS])
    options = RunOptions.from_dict(cli_data(args))
    env, engine = options.env_settings, options.engine_settings
    assert (env.env_path, env.base_port, env.num_areas, env.timeout_wait) == (
        "builds/Basic",
        6000,
        2,
        7.5,
    )
    assert (env.max_lifetime_restarts, env.restarts_rate_limit_n) == (3, 2)
    assert (env.restarts_rate_limit_period_s, env.num_envs, env.seed) == (30, 2, 9)
    assert env.env_args == ["--level", "3"]
    assert env.shared_env and env.unity and not env.editor
    assert [env.port(i) for i in range(2)] == [6000, 6001]
    assert (engine.width, engine.height, engine.quality_level, engine.time_scale) == (
        100,
        90,
        1,
        4,
    )
    assert (engine.target_frame_rate, engine.capture_frame_rate, engine.no_graphics) == (
        30,
        50,
        True,
    )
    line = interrupted_line(args, "run", {"Basic": 10})
    assert line.endswith("--run-id run --resume --env-args --level 3")
    assert "--env builds/Basic" in line and "--capture-frame-rate 50 --no-graphics" in line


def test_the_defaults_are_ml_agents() -> None:
    options = RunOptions.from_dict({"env_settings": {"env_path": "Basic"}})
    env, engine = options.env_settings, options.engine_settings
    assert (env.base_port, env.num_areas, env.timeout_wait, env.env_args) == (5005, 1, 60, None)
    assert (env.max_lifetime_restarts, env.restarts_rate_limit_n) == (10, 1)
    assert env.restarts_rate_limit_period_s == 60
    assert (engine.width, engine.height, engine.quality_level, engine.time_scale) == (84, 84, 5, 20)
    assert (engine.target_frame_rate, engine.capture_frame_rate, engine.no_graphics) == (
        -1,
        60,
        False,
    )
    assert not RunOptions().env_settings.unity  # no env_path: CartPole, as before


def test_base_port_5004_without_env_path_waits_for_the_editor() -> None:
    env = RunOptions.from_dict({"env_settings": {"base_port": 5004}}).env_settings
    assert env.editor and env.unity and env.shared_env


def test_a_unity_runs_configuration_reads_back_as_it_was() -> None:
    options = RunOptions.from_dict({"env_settings": {"env_path": "Basic", "num_envs": 2}})
    assert "env_id" not in options.as_dict()["env_settings"]
    assert RunOptions.from_dict(options.as_dict()) == options


@pytest.mark.parametrize(
    ("env_settings", "problems"),
    [
        (
            {"env_path": "Basic", "env_id": "CartPole-v1"},
            [
                "env_settings.env_path and env_settings.env_id: a run trains a Unity build or "
                "a Gymnasium environment (env_id), not both; remove one of them"
            ],
        ),
        (
            {"base_port": 5004, "env_id": "CartPole-v1"},
            [
                "env_settings.base_port 5004 (the Unity Editor) and env_settings.env_id: a run "
                "trains a Unity build or a Gymnasium environment (env_id), not both; remove one "
                "of them"
            ],
        ),
        (
            {"env_path": "Basic", "env_kwargs": {}, "vectorization": "async"},
            [
                "env_settings.env_kwargs: has no meaning with env_settings.env_path: it sets "
                "the keyword arguments of env_id (a build takes env_args); remove it",
                "env_settings.vectorization: has no meaning with env_settings.env_path: it sets "
                "how copies of env_id step (each build instance is a process already); remove it",
            ],
        ),
        ({"env_args": "-x"}, ["env_settings.env_args: expected a list, got '-x'"]),
        (
            {"base_port": 70000},
            ["env_settings.base_port: expected a port from 1 to 65535, got 70000"],
        ),
        ({"num_areas": 0}, ["env_settings.num_areas: expected an integer of at least 1, got 0"]),
        (
            {"timeout_wait": 0},
            ["env_settings.timeout_wait: expected a finite number of seconds above 0, got 0.0"],
        ),
        (
            {"max_lifetime_restarts": -2},
            [
                "env_settings.max_lifetime_restarts: expected an integer of at least 0, or -1 "
                "for no limit, got -2"
            ],
        ),
        (
            {"restarts_rate_limit_n": -3},
            [
                "env_settings.restarts_rate_limit_n: expected an integer of at least 0, or -1 "
                "for no limit, got -3"
            ],
        ),
        (
            {"restarts_rate_limit_period_s": -1},
            [
                "env_settings.restarts_rate_limit_period_s: expected a finite number of seconds "
                "above 0, got -1.0"
            ],
        ),
    ],
)
def test_bad_unity_keys_are_one_line_each_naming_the_key(
    env_settings: dict[str, Any], problems: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"env_settings": env_settings})
    assert list(info.value.problems) == problems


@pytest.mark.parametrize(
    ("engine_settings", "problem"),
    [
        ({"width": 0}, "engine_settings.width: expected an integer of at least 1, got 0"),
        ({"height": -5}, "engine_settings.height: expected an integer of at least 1, got -5"),
        (
            {"quality_level": -1},
            "engine_settings.quality_level: expected an integer of at least 0, got -1",
        ),
        (
            {"time_scale": 0},
            "engine_settings.time_scale: expected a finite number above 0, got 0.0",
        ),
    ],
)
def test_bad_engine_keys_name_the_key(engine_settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"engine_settings": engine_settings})
    assert list(info.value.problems) == [problem]


def test_env_on_the_command_line_beside_a_configs_env_id_is_one_line_exit_2(
    tmp_path: Path,
) -> None:
    data = {"behaviors": {"Basic": {}}, "env_settings": {"env_id": "CartPole-v1"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("run.yaml", "--env", "Basic", cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "env_settings.env_path and env_settings.env_id: a run trains a Unity build or a "
            "Gymnasium environment (env_id), not both; remove one of them"
        )
    )
