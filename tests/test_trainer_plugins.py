"""Trainer types from plugins (here a ``--plugins`` module): validated in config, run by learn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evtrain import Bus, ConfigError, PluginError, RunOptions, StatsEvent
from evtrain.run.learn import learn
from evtrain.run.options import options_from_data
from evtrain.testing import Recorder

MODULE = """
from evtrain.trainers.ppo import PPOTrainer


class TinyPPO(PPOTrainer):
    '''PPO that also reports a marker, to tell it from the built-in.'''

    def advance(self):
        self.reporter.add_stat("Tiny/Marker", 1.0)
        super().advance()


def trainer_types():
    return {"tiny_ppo": TinyPPO}


def replaces_ppo():
    return {"ppo": TinyPPO}


EVTRAIN_PLUGINS = {"evtrain.trainer": {"tiny": trainer_types, "shadow": replaces_ppo}}
"""


def options(tmp_path: Path, trainer_type: str, **plugins: Any) -> dict[str, Any]:
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": trainer_type,
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "max_steps": 256,
                "time_horizon": 32,
                "summary_freq": 128,
                "checkpoint_interval": 10**6,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 1},
        "checkpoint_settings": {"run_id": trainer_type, "results_dir": str(tmp_path / "r")},
        "plugins": {"paths": [str(tmp_path / "plugins")], **plugins},
    }


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "tiny_trainers.py").write_text(MODULE)
    return folder


def test_plugin_trainer_type_validates_and_runs(tmp_path: Path, plugin_dir: Path) -> None:
    data = options(tmp_path, "tiny_ppo", disabled=["shadow"])
    assert options_from_data(data).behaviors["CartPole"].trainer_type == "tiny_ppo"
    with pytest.raises(ConfigError):  # structuring alone is pure: it loads no plugin
        RunOptions.from_dict(data)
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(data, bus)
    assert result.steps == {"CartPole": 256}
    assert all("Tiny/Marker" in e.values for e in recorder.of(StatsEvent))


def test_a_clash_with_a_built_in_must_be_settled(tmp_path: Path, plugin_dir: Path) -> None:
    with pytest.raises(PluginError) as info:
        options_from_data(options(tmp_path, "ppo"))
    assert str(info.value) == (
        f"trainer type 'ppo' is provided by evtrain and by path:{plugin_dir}; say which one to "
        f"use with plugins.trainer_types: {{ppo: <one of ['evtrain', 'path:{plugin_dir}']>}}"
    )
    data = options(tmp_path, "ppo", trainer_types={"ppo": f"path:{plugin_dir}"})
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(data, bus)
    assert all("Tiny/Marker" in e.values for e in recorder.of(StatsEvent))  # the plugin's won
    builtin = options(tmp_path, "ppo", trainer_types={"ppo": "evtrain"})
    builtin["checkpoint_settings"]["run_id"] = "builtin"
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(builtin, bus)
    assert not any("Tiny/Marker" in e.values for e in recorder.of(StatsEvent))


def test_unknown_trainer_type_lists_plugin_types(tmp_path: Path, plugin_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        options_from_data(options(tmp_path, "dqn", disabled=["shadow"]))
    assert info.value.problems == (
        "behaviors.CartPole.trainer_type: expected a registered trainer type, got 'dqn'; "
        "available: ppo (evtrain), sac (evtrain), poca (evtrain), mappo (evtrain), "
        f"tiny_ppo (path:{plugin_dir})",
    )


COUNTING = """
from evtrain.trainers.ppo import PPOTrainer

CALLS = []


def trainer_types():
    CALLS.append(1)
    return {"counted_ppo": PPOTrainer}


EVTRAIN_PLUGINS = {"evtrain.trainer": {"counted": trainer_types}}
"""


def test_a_run_loads_its_trainer_plugins_once(tmp_path: Path) -> None:
    """Structuring the config and running it share one load (a failing plugin's warning
    would otherwise be logged twice)."""
    import importlib

    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "counted_trainers.py").write_text(COUNTING)
    data = options(tmp_path, "counted_ppo")
    assert learn(data).steps == {"CartPole": 256}
    assert importlib.import_module("counted_trainers").CALLS == [1]
