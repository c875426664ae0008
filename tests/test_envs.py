"""Building the run's environments: errors name the environment and what to install."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError
from evtrain.run.environments.envs import make_envs
from tests.helpers import config, run_config


@pytest.mark.skipif(
    importlib.util.find_spec("Box2D") is not None, reason="needs gymnasium without box2d"
)
def test_cli_env_of_a_missing_extra_names_the_pip_install(tmp_path: Path) -> None:
    options = config(tmp_path)
    options["env_settings"]["env_id"] = "LunarLander-v3"
    result = run_config(tmp_path, options)
    assert result.returncode == 2
    assert result.stderr == (
        "evtrain: error: env_settings.env_id: 'LunarLander-v3' needs a package that is not "
        "installed (DependencyNotInstalled: Box2D is not installed, you can install it by run "
        '`pip install swig` followed by `pip install "gymnasium[box2d]"`); install it with pip '
        'install "gymnasium[box2d]"\n'
    )


@pytest.fixture
def registered() -> Iterator[str]:
    """A registered id whose entry point's module is not installed."""
    env_id = "EvtrainMissingModule-v0"
    gym.register(env_id, entry_point="evtrain_no_such_package.envs:MissingEnv")
    yield env_id
    del gym.registry[env_id]


def test_registered_env_whose_module_is_missing_names_the_module(registered: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_envs(EnvironmentSettings(env_id=registered))
    assert info.value.problems == (
        "env_settings.env_id: 'EvtrainMissingModule-v0' needs a package that is not installed "
        "(ModuleNotFoundError: No module named 'evtrain_no_such_package'); install the package "
        "that provides the module 'evtrain_no_such_package'",
    )
