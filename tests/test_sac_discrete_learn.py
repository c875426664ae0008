"""SAC with discrete actions through the CLI and the runner: CartPole-v1 trained, checkpointed,
exported (ONNX read back in onnxruntime), resumed and run with ``--inference``; ML-Agents'
branches (``MultiDiscrete``); reward providers and behavioral cloning; image observations; an
LSTM policy (``network_settings.memory``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from gymnasium.vector import AutoresetMode

from evtrain import Bus, SaveEvent, StatsEvent, StatsReporter
from evtrain.export import PolicyExporter, onnx_policy
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from evtrain.trainers import MemorySettings, NetworkSettings, SACSettings, SACTrainer
from tests.helpers import run_config
from tests.helpers import tensorboard_steps as scalar_steps
from tests.pixel_envs import frames, input_shapes, torch_actions, trained_policy
from tests.pixel_envs import options as image_options
from tests.trainers.helpers import cartpole_demo, masked_envs, small_sac

UPDATE_TAGS = (
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Losses/Policy Loss",
    "Policy/Entropy",
    "Policy/Discrete Entropy Coeff",
    "Policy/Extrinsic Value Estimate",
    "Policy/Learning Rate",
)
"""What a discrete SAC's summaries hold once it updates (ML-Agents' names)."""


def sac_config(
    max_steps: int, env_id: str = "CartPole-v1", results: str = "results", **behavior: Any
) -> dict[str, Any]:
    """SAC on 2 environments: 100 random steps, then a gradient step per environment step."""
    settings = {
        "trainer_type": "sac",
        "hyperparameters": {"batch_size": 32, "buffer_size": 2000, "buffer_init_steps": 100},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": max_steps,
        "time_horizon": 50,
        "summary_freq": 200,
        "checkpoint_interval": 200,
        "keep_checkpoints": 5,
        **behavior,
    }
    return {
        "behaviors": {"CartPole": settings},
        "env_settings": {"env_id": env_id, "num_envs": 2, "seed": 3},
        "checkpoint_settings": {"run_id": "run", "results_dir": results},
    }


def policy_actions(state: dict[str, Any], obs: np.ndarray) -> np.ndarray:
    """The checkpoint's actor by hand: one tanh layer, the logits' argmax per branch."""
    actor = {k: v.double() for k, v in state["actor"].items()}
    x = torch.from_numpy(obs).double()
    h = torch.tanh(x @ actor["net.hidden.0.weight"].T + actor["net.hidden.0.bias"])
    logits = h @ actor["net.out.weight"].T + actor["net.out.bias"]
    actions: np.ndarray = logits.argmax(-1).numpy()
    return actions


def test_discrete_sac_trains_exports_resumes_and_runs_inference_through_the_cli(
    tmp_path: Path,
) -> None:
    result = run_config(tmp_path, sac_config(400))
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert [f for f in files if "tfevents" not in f] == [
        ".evtrain-lock",
        ".evtrain-run",
        "CartPole.onnx",
        "CartPole/CartPole-200.onnx",
        "CartPole/CartPole-200.pt",
        "CartPole/CartPole-400.onnx",
        "CartPole/CartPole-400.pt",
        "CartPole/checkpoint.pt",
        "configuration.yaml",
        "run_logs/timers.json",
        "run_logs/training_status.json",
    ]
    trainer = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert trainer["num_updates"] == 300  # 400 steps, the first 100 random
    assert trainer["log_alpha"].shape == (1,) and trainer["log_alpha"].item() < 0.0
    for tag in UPDATE_TAGS:
        assert scalar_steps(run / "CartPole", tag) == [200, 400], tag
    assert scalar_steps(run / "CartPole", "Environment/Cumulative Reward") == [200, 400]

    # the exported policy: CartPole's actions, each the actor's most likely one
    act = onnx_policy(run / "CartPole.onnx")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    actions = act(obs)
    assert actions.dtype == np.int64 and actions.shape == (64,)
    assert actions.tolist() == policy_actions(trainer, obs).tolist()
    assert 0 < actions.sum() < 64  # both actions occur

    # --resume continues to 600: two more summaries, 200 more updates
    options = sac_config(600)
    result = run_config(tmp_path, options, "--resume")
    assert result.returncode == 0, result.stderr
    resumed = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert resumed["num_updates"] == 500
    for tag in UPDATE_TAGS:
        assert scalar_steps(run / "CartPole", tag) == [200, 400, 600], tag
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    assert status["CartPole"]["final_checkpoint"]["steps"] == 600

    # --inference plays the exported policy's actions, learning and saving nothing
    options = sac_config(200, results=str(tmp_path / "results"))
    options["checkpoint_settings"]["inference"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    (summary,) = recorder.of(StatsEvent)
    assert summary.step == 200 and summary.values["Is Training"].aggregated_value == 0.0
    assert "Environment/Cumulative Reward" in summary.values
    assert recorder.of(SaveEvent) == []
    after = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert all(torch.equal(resumed["actor"][k], after["actor"][k]) for k in resumed["actor"])


def test_branches_of_a_multi_discrete_space_train_and_export(tmp_path: Path) -> None:
    options = sac_config(300, "tests.action_envs:branched_cartpole", str(tmp_path / "results"))
    learn(options)
    run = tmp_path / "results" / "run"
    state = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert state["log_alpha"].shape == (2,)  # one coefficient per branch
    assert state["actor"]["net.out.weight"].shape == (5, 16)  # logits of 2 + 3 actions
    assert state["qf"]["weights.1"].shape == (2, 16, 5)  # each critic: Q of every action
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    actions = onnx_policy(run / "CartPole.onnx")(obs)
    assert actions.dtype == np.int64 and actions.shape == (32, 2)
    assert set(actions[:, 0]) <= {0, 1} and set(actions[:, 1]) <= {0, 1, 2}


def test_discrete_sac_with_gail_curiosity_rnd_and_cloning_reports_them(tmp_path: Path) -> None:
    demo = str(cartpole_demo(2, max_steps=100).write(tmp_path / "cartpole.npz"))
    options = sac_config(
        400,
        results=str(tmp_path / "results"),
        reward_signals={
            "extrinsic": {"strength": 1.0},
            "gail": {"demo_path": demo, "strength": 0.1, "use_actions": True},
            "curiosity": {"strength": 0.1},
            "rnd": {"strength": 0.1},
        },
        behavioral_cloning={"demo_path": demo, "samples_per_update": 64},
    )
    options["behaviors"]["CartPole"]["hyperparameters"]["reward_signal_steps_per_update"] = 4
    learn(options)
    folder = tmp_path / "results" / "run" / "CartPole"
    state = load_checkpoint(folder / "checkpoint.pt")
    assert sorted(state["reward_signals"]) == ["curiosity", "gail", "rnd"]
    # 300 steps after buffer_init_steps: a model update per 4; a cloning update per 50 steps
    # of both environments, at steps 100, 200, 300, 400
    assert (state["signal_updates"], state["cloning_updates"]) == (75, 4)
    for tag in (
        "Losses/GAIL Loss",
        "Losses/Curiosity Forward Loss",
        "Losses/Curiosity Inverse Loss",
        "Losses/RND Loss",
        "Losses/Pretraining Loss",
        "Losses/Q1 Loss",
    ):
        assert scalar_steps(folder, tag) == [200, 400], tag
    configuration = yaml.safe_load((tmp_path / "results/run/configuration.yaml").read_text())
    assert configuration["behaviors"]["CartPole"]["trainer_type"] == "sac"


def test_discrete_sac_on_pixels_exports_the_image_input_and_the_argmax(tmp_path: Path) -> None:
    run = image_options(tmp_path, "sac", "simple", "pixel_cartpole", size=20)
    del run["env_settings"]["env_kwargs"]["continuous"]  # CartPole's own Discrete(2)
    result = learn(copy.deepcopy(run))
    model = result.models["Pixel"]
    assert input_shapes(model) == [("obs", ["batch", 20, 20, 3])]
    obs = frames({"size": 20}, 24)
    got = onnx_policy(model, threads=1)(obs)
    assert got.dtype == np.int64 and got.shape == (24,)
    np.testing.assert_array_equal(got, torch_actions(trained_policy(run, tmp_path), obs))


def test_recurrent_discrete_sac_exports_memory_and_acts_as_torch(tmp_path: Path) -> None:
    settings = small_sac(
        hyperparameters=SACSettings(batch_size=16, buffer_init_steps=20),
        network_settings=NetworkSettings(
            hidden_units=16, num_layers=1, memory=MemorySettings(memory_size=6, sequence_length=4)
        ),
    )
    envs = masked_envs(AutoresetMode.SAME_STEP, num_envs=2, limit=500)
    with Bus() as bus:
        trainer = SACTrainer("Test", settings, envs, StatsReporter(bus, "Test"), seed=0)
        while trainer.step < 60:
            trainer.advance()
    assert trainer.num_updates == 40 and trainer.algorithm.networks.log_alpha.shape == (1,)
    # the actor: a logit per action, from the LSTM's output (half the memory: h of h and c);
    # each critic: the value of both actions
    assert trainer.algorithm.networks.actor.out.weight.shape == (2, 3)
    assert trainer.algorithm.networks.qf.critics[0].out.weight.shape == (2, 16)
    policy = trainer.policy_module()
    obs = np.asarray(trainer.next_obs, dtype=np.float32)
    path = PolicyExporter().export(policy, torch.as_tensor(obs), tmp_path / "sac.onnx")
    runtime = onnx_policy(path, threads=1)
    memory = torch.zeros(2, 6)
    for _ in range(30):
        with torch.no_grad():
            want, memory = policy(torch.as_tensor(obs), memory)
        got = runtime(obs)
        assert got.dtype == np.int64 and got.tolist() == want.tolist()
        assert runtime.memory is not None
        np.testing.assert_allclose(runtime.memory, memory.numpy(), rtol=1e-4, atol=1e-5)
        obs = np.asarray(envs.step(got)[0], dtype=np.float32)
    envs.close()
