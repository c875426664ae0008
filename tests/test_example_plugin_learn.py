"""The example plugin's trainer type and initializer, installed with pip, run by ``evtrain learn``.

Installed, the package brings a second initializer (``slurm``) next to evtrain's ``torch``;
each applies only where its launcher started the process, so plain runs name neither.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from evtrain.run.checkpoints.checkpoint import load_checkpoint
from tests.helpers import clean_env, free_port, isolated_python, python


def write_config(tmp_path: Path, **hyperparameters: Any) -> Path:
    """CartPole with ``ppo_reward_clip``: 4 envs x 32 steps per update, 512 steps."""
    config = {
        "behaviors": {
            "Agent": {
                "trainer_type": "ppo_reward_clip",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, **hyperparameters},
                "network_settings": {"hidden_units": 16},
                "max_steps": 512,
                "time_horizon": 32,
                "summary_freq": 256,
                "checkpoint_interval": 512,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 2},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def evtrain_learn(site: Path, config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``python -m evtrain learn`` with the example plugin installed in ``site``."""
    env = clean_env(PYTHONPATH=str(site))
    return python("-m", "evtrain", "learn", str(config), *flags, env=env, timeout=120)


def test_the_example_trainer_type_trains(plugin_site: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, reward_clip=0.5)
    result = evtrain_learn(plugin_site, config)  # neither slurm nor torch applies: no choice
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    assert result.stdout == (
        f"Agent: 512 steps, policy exported to {run / 'Agent.onnx'}\n"
        f"TensorBoard: tensorboard --logdir {run.parent}\n"
    )
    resolved = yaml.safe_load((run / "configuration.yaml").read_text())
    assert resolved["behaviors"]["Agent"]["hyperparameters"]["reward_clip"] == 0.5
    assert load_checkpoint(run / "Agent" / "checkpoint.pt")["trainer_type"] == "ppo_reward_clip"
    timers = json.loads((run / "run_logs" / "timers.json").read_text())
    advance = timers["children"]["train"]["children"]["advance"]
    assert advance["children"]["reward_clip"]["count"] == advance["count"] > 0  # its own timer


def test_a_misspelt_plugin_hyperparameter_is_a_config_error(
    plugin_site: Path, tmp_path: Path
) -> None:
    result = evtrain_learn(plugin_site, write_config(tmp_path, reward_clp=0.5))
    assert result.returncode == 2
    assert result.stderr == (
        "evtrain: error: behaviors.Agent.hyperparameters.reward_clp: unknown key "
        "(did you mean reward_clip?)\n"
    )


def test_two_initializers_that_apply_need_a_choice(plugin_site: Path, tmp_path: Path) -> None:
    """torchrun's and srun's variables both set: slurm and torch both apply."""
    env = clean_env(PYTHONPATH=str(plugin_site), SLURM_PROCID="0", WORLD_SIZE="1")
    result = python("-m", "evtrain", "learn", str(write_config(tmp_path)), env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr == (
        "evtrain: error: 2 initializers apply to this process ('slurm' (evtrain.initializer, "
        "from evtrain-example-plugin 0.1.0), 'torch' (evtrain.initializer, from evtrain 0.1.0)) "
        "and at most one may be used. Choose one with plugins.initializer in the config or "
        "--initializer NAME, or disable the others in plugins.disabled.\n"
    )
    assert not (tmp_path / "results").exists()


def test_the_slurm_initializer_joins_two_ranks(plugin_site: Path, tmp_path: Path) -> None:
    """Two processes started the way srun starts tasks; the example trainer runs on both."""
    config = write_config(tmp_path, reward_clip=0.5)
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [isolated_python(), "-m", "evtrain", "learn", str(config)],  # slurm applies: no flag
            env=clean_env(
                PYTHONPATH=str(plugin_site),
                SLURM_PROCID=str(rank),
                SLURM_NTASKS="2",
                SLURM_LOCALID=str(rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [process.communicate(timeout=180) for process in ranks]
    for process, (_, stderr) in zip(ranks, outputs, strict=True):
        assert process.returncode == 0, stderr
    for rank, (_, stderr) in enumerate(outputs):
        assert f"SLURM task {rank} of 2 joined at tcp://127.0.0.1:{port} (gloo)" in stderr
        assert "Agent. Step: 512. " in stderr and f"Rank: {rank}." in stderr
    run = tmp_path / "results" / "run"
    # 512 global steps: 256 per rank, on rank 0's one set of files
    assert load_checkpoint(run / "Agent" / "checkpoint.pt")["step"] == 512
    assert len(list((run / "Agent").glob("events.out.tfevents.*"))) == 1
    assert outputs[0][0] == (
        f"Agent: 512 steps, policy exported to {run / 'Agent.onnx'}\n"
        f"TensorBoard: tensorboard --logdir {run.parent}\n"
    )
    assert outputs[1][0] == ""
