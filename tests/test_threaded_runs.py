"""``threaded: true`` in real runs: through the CLI, on Ctrl-C, with a failing update, and
refused under ``torchrun``."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from evtrain import Bus, ExportEvent, RunFinished, RunOptions, RunStatus, SaveEvent, StatsReporter
from evtrain.export import onnx_policy
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer
from tests.helpers import config, isolated_python, run_config
from tests.helpers import tensorboard_steps as scalar_steps
from tests.torchrun_runs import CARTPOLE, ppo, torchrun
from tests.trainers.helpers import make_envs


def adam_steps(state: dict[str, Any], key: str = "optimizer") -> int:
    return int(state[key]["state"][0]["step"])


def checkpoint_actions(run: Path, behavior: str, env_id: str, obs: np.ndarray) -> np.ndarray:
    """The actions of the policy in ``behavior``'s ``checkpoint.pt``, by a trainer built from
    the run's configuration."""
    options = yaml.safe_load((run / "configuration.yaml").read_text())
    settings = RunOptions.from_dict(options).behaviors[behavior]
    trainer_cls = SACTrainer if settings.trainer_type == "sac" else PPOTrainer
    with Bus() as bus:
        trainer = trainer_cls(
            behavior, settings, make_envs(env_id, 1), StatsReporter(bus, behavior), seed=0
        )
        trainer.load_state_dict(load_checkpoint(run / behavior / "checkpoint.pt"))
        with torch.no_grad():
            actions: np.ndarray = trainer.policy_module()(torch.from_numpy(obs)).numpy()
        trainer.close()
        trainer.envs.close()
    return actions


def test_threaded_ppo_through_the_cli_saves_exports_and_summarises_every_update(
    tmp_path: Path,
) -> None:
    # 4 envs x 32 steps per rollout: 8 rollouts, each updated with 2 epochs x 2 minibatches;
    # a summary every 2 rollouts (it waits for the update in flight), a checkpoint every 3
    options = config(tmp_path, threaded=True, keep_checkpoints=5, checkpoint_interval=384)
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    folder = run / "CartPole"
    assert sorted(p.name for p in folder.glob("CartPole-*")) == [
        "CartPole-1024.onnx",
        "CartPole-1024.pt",
        "CartPole-384.onnx",
        "CartPole-384.pt",
        "CartPole-768.onnx",
        "CartPole-768.pt",
    ]
    # each checkpoint holds the update of every rollout its steps count
    for step in (384, 768, 1024):
        state = load_checkpoint(folder / f"CartPole-{step}.pt")
        assert state["step"] == step
        assert adam_steps(state) == step // 128 * 4
        assert "act_generator" in state
    assert load_checkpoint(folder / "checkpoint.pt")["step"] == 1024
    # the final model is the final checkpoint's policy
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    exported = onnx_policy(run / "CartPole.onnx")(obs)
    assert (exported == checkpoint_actions(run, "CartPole", "CartPole-v1", obs)).all()
    assert set(exported) == {0, 1}
    # one summary per 256 steps, the losses of the updates of its period in each
    assert scalar_steps(folder, "Losses/Policy Loss") == [256, 512, 768, 1024]
    assert scalar_steps(folder, "Environment/Cumulative Reward") == [256, 512, 768, 1024]
    configuration = yaml.safe_load((run / "configuration.yaml").read_text())
    assert configuration["behaviors"]["CartPole"]["threaded"] is True


def test_threaded_sac_through_the_cli_takes_the_gradient_steps_of_steps_per_update(
    tmp_path: Path,
) -> None:
    options = {
        "behaviors": {
            "Pendulum": {
                "trainer_type": "sac",
                "threaded": True,
                "hyperparameters": {
                    "batch_size": 32,
                    "buffer_size": 1000,
                    "buffer_init_steps": 100,
                    "steps_per_update": 1.5,
                },
                "network_settings": {"hidden_units": 32, "normalize": True},
                "max_steps": 300,
                "summary_freq": 100,
                "checkpoint_interval": 200,
                "keep_checkpoints": 5,
            }
        },
        "env_settings": {"env_id": "Pendulum-v1", "num_envs": 2, "seed": 1},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    folder = run / "Pendulum"
    # int((step - 100) / 1.5) gradient steps at every step, as unthreaded
    for step, updates in ((200, 66), (300, 133)):
        state = load_checkpoint(folder / f"Pendulum-{step}.pt")
        assert state["num_updates"] == updates
        assert adam_steps(state, "q_optimizer") == adam_steps(state, "actor_optimizer") == updates
        # every observation of the steps counted is in the saved normaliser
        assert float(state["normalizer"]["count"]) == step
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    exported = onnx_policy(run / "Pendulum.onnx")(obs)
    expected = checkpoint_actions(run, "Pendulum", "Pendulum-v1", obs)
    assert exported.shape == (64, 1) and np.allclose(exported, expected, atol=1e-5)
    assert scalar_steps(folder, "Losses/Q1 Loss") == [200, 300]  # learning starts after 100
    assert scalar_steps(folder, "Policy/Learning Rate") == [200, 300]


def test_threaded_sac_trains_its_reward_providers_on_the_update_thread(tmp_path: Path) -> None:
    # rnd's model trains every 2 steps after warm-up, on the update thread after the gradient
    # steps (it samples the replay buffer with the generator they use): as many updates as
    # unthreaded, and the run's numbers are those of the threaded run alone
    options = {
        "behaviors": {
            "Pendulum": {
                "trainer_type": "sac",
                "threaded": True,
                "hyperparameters": {
                    "batch_size": 32,
                    "buffer_size": 1000,
                    "buffer_init_steps": 100,
                    "reward_signal_steps_per_update": 2,
                },
                "network_settings": {"hidden_units": 32},
                "reward_signals": {"rnd": {"strength": 0.1, "encoding_size": 16}},
                "max_steps": 300,
                "summary_freq": 100,
            }
        },
        "env_settings": {"env_id": "Pendulum-v1", "num_envs": 2, "seed": 1},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "results" / "run" / "Pendulum"
    state = load_checkpoint(folder / "checkpoint.pt")
    assert state["num_updates"] == 200
    assert state["signal_updates"] == 100
    assert adam_steps(state["reward_signals"]["rnd"], "optimizer") == 100
    assert scalar_steps(folder, "Losses/RND Loss") == [200, 300]


FAILING = """
from evtrain.trainers.ppo import PPOTrainer


class FailingPPO(PPOTrainer):
    def _update(self, batch):
        self.updates = getattr(self, "updates", 0) + 1
        if self.updates == 3:
            raise FloatingPointError("update 3 failed on purpose")
        super()._update(batch)


def trainer_types():
    return {"failing_ppo": FailingPPO}


EVTRAIN_PLUGINS = {"evtrain.trainer": {"failing": trainer_types}}
"""


def test_an_error_in_a_threaded_update_fails_the_run_with_it(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "failing_trainers.py").write_text(FAILING)
    options = config(tmp_path, trainer_type="failing_ppo", threaded=True, summary_freq=10**6)
    options["plugins"] = {"paths": [str(plugins)]}
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        with pytest.raises(FloatingPointError, match="update 3 failed on purpose") as raised:
            learn(options, bus)
    [note] = getattr(raised.value, "__notes__", [])
    assert "behavior 'CartPole' on its own thread" in note
    [finished] = recorder.of(RunFinished)
    # raised where rollout 4 waited for update 3: 4 rollouts of 128 steps were counted
    assert finished.status is RunStatus.FAILED and finished.steps == 512
    # the checkpoint at 512 is not written: the runner waits for update 3 before saving
    assert recorder.of(SaveEvent) == [] and recorder.of(ExportEvent) == []


def test_ctrl_c_during_a_threaded_run_saves_every_update_and_exits_zero(tmp_path: Path) -> None:
    long = config(tmp_path, threaded=True, max_steps=10**7, summary_freq=512)
    long["behaviors"]["CartPole"]["checkpoint_interval"] = 10**7
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(long))
    proc = subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", "long.yaml"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # the first summary: training is under way, updates overlap
        lines.append(line)
        if "CartPole. Step:" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    stderr = "".join(lines) + err
    assert proc.returncode == 0, stderr
    assert "SIGINT received: finishing the current update, then saving and exporting." in stderr
    run = tmp_path / "results" / "run"
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    final = status["CartPole"]["final_checkpoint"]
    state = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert state["step"] == final["steps"] > 0 and state["step"] % 128 == 0
    # the update in flight was waited for: every rollout counted was trained on
    assert adam_steps(state) == state["step"] // 128 * 4
    assert (run / "CartPole.onnx").exists()


def test_threaded_is_refused_in_a_distributed_run(tmp_path: Path) -> None:
    behavior = {**ppo(256), "trainer_type": "ppo", "threaded": True}
    run = torchrun(tmp_path, behavior, CARTPOLE, timeout=150)
    assert run.result.returncode != 0
    assert (
        "behaviors.Agent.threaded: true is not supported in a distributed run (world size 2)"
        in run.result.stderr
    ), run.result.stderr[-3000:]
    assert "set threaded: false" in run.result.stderr
    assert not (run.run / "Agent" / "checkpoint.pt").exists()
