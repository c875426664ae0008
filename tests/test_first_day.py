"""What a new user hits on the first day: custom environments, older ML-Agents configs, the
command line's odd corners, demonstrations, `--inference`, a reused bus, logging, progress.

The CLI runs as the user runs it: the installed ``evtrain`` console script (whose
``sys.path[0]`` is its ``bin`` folder, not the working folder), in the isolated interpreter of
:func:`tests.helpers.isolated_python`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import ROOT, isolated_python

CONSOLE_SCRIPT = Path(sys.executable).parent / "evtrain"
"""The ``evtrain`` script pip installed next to this venv's python."""


def evtrain(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``evtrain ARGS`` through the console script, in ``cwd``."""
    return subprocess.run(
        [isolated_python(), str(CONSOLE_SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def tiny(results: Path, run_id: str = "run", **env: Any) -> dict[str, Any]:
    """A CartPole PPO run of 256 steps (4 envs x 32 steps a rollout)."""
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": 256,
                "time_horizon": 32,
                "summary_freq": 128,
                "checkpoint_interval": 256,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3, **env},
        "checkpoint_settings": {"run_id": run_id, "results_dir": str(results)},
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


ENV_MODULE = """
import gymnasium as gym

def make_env(**kwargs):
    return gym.make("CartPole-v1", **kwargs)

def not_an_env():
    return 42
"""


# -- 1. custom environments ------------------------------------------------------------------


def test_console_script_imports_the_env_module_from_the_working_folder(tmp_path: Path) -> None:
    (tmp_path / "mymodule.py").write_text(ENV_MODULE)
    write(tmp_path / "run.yaml", tiny(tmp_path / "results", env_id="mymodule:make_env"))
    result = evtrain("learn", "run.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"CartPole: 256 steps, policy exported to {tmp_path}/results/run/CartPole.onnx"
    )


def test_the_custom_env_example_runs_from_the_repository_root(tmp_path: Path) -> None:
    result = evtrain(
        "learn", "examples/custom_env/corridor.yaml", "--results-dir", str(tmp_path), cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"Corridor: 2,048 steps, policy exported to {tmp_path}/corridor/Corridor.onnx"
    )


def test_masked_cartpole_example_runs_as_its_comment_says(tmp_path: Path) -> None:
    example = ROOT / "examples/configs/masked_cartpole_lstm.yaml"
    assert "# evtrain learn examples/configs/masked_cartpole_lstm.yaml" in example.read_text()
    options = yaml.safe_load(example.read_text())
    behavior = options["behaviors"]["MaskedCartPole"]
    behavior.update(max_steps=256, summary_freq=256, checkpoint_interval=256, time_horizon=16)
    behavior["hyperparameters"].update(buffer_size=128, batch_size=64, num_epoch=1)
    options["checkpoint_settings"] = {"results_dir": str(tmp_path)}
    config = write(tmp_path / "masked.yaml", options)
    result = evtrain("learn", str(config), "--run-id", "masked", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "masked/MaskedCartPole.onnx").is_file()


# -- 2. a factory that returns no environment ------------------------------------------------


def test_a_factory_returning_no_environment_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "mymodule.py").write_text(ENV_MODULE)
    write(tmp_path / "run.yaml", tiny(tmp_path / "results", env_id="mymodule:not_an_env"))
    result = evtrain("learn", "run.yaml", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: env_settings.env_id: 'mymodule:not_an_env' returned 42 (a int), not a "
        "gymnasium.Env; make it return an environment, e.g. gymnasium.make(...) or an instance "
        "of a gymnasium.Env subclass (see docs/environments.md)\n",
    )
