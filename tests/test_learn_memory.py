"""``network_settings.memory`` end to end: real runs through the CLI (PPO on masked CartPole,
resumed; SAC on Pendulum), run for inference; configuration errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
import torch
import yaml

from evtrain import Bus, ConfigError, RunOptions, StatsEvent
from evtrain.export import onnx_policy
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.run.record import record
from evtrain.testing import Recorder
from evtrain.trainers.demonstrations import load_demonstrations
from tests.helpers import config, run_config
from tests.helpers import tensorboard_steps as scalar_steps
from tests.memory_envs import masked_cartpole

MEMORY = {"memory_size": 16, "sequence_length": 8}
MASKED = masked_cartpole()
"""The environment of the runs here, for its spaces."""


def memory_config(tmp_path: Path, **behavior: Any) -> dict[str, Any]:
    """:func:`tests.test_learn.config` (4 environments x 32 steps per update) on masked
    CartPole with an LSTM of 8 units."""
    network = {"hidden_units": 16, "num_layers": 1, "memory": MEMORY}
    options = config(tmp_path, **{"network_settings": network, **behavior})
    options["env_settings"]["env_id"] = "tests.memory_envs:masked_cartpole"
    return options


def evtrain_learn(tmp_path: Path, options: dict[str, Any], *args: str) -> None:
    """``evtrain learn`` on ``options`` (in this process, which imports ``tests``)."""
    result = run_config(tmp_path, options, *args)
    assert result.returncode == 0, result.stderr


def test_ppo_with_memory_trains_exports_and_resumes_through_the_cli(tmp_path: Path) -> None:
    evtrain_learn(tmp_path, memory_config(tmp_path, max_steps=512))
    run = tmp_path / "results" / "run"
    state = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert state["step"] == 512
    # hidden layer -> LSTM (16 / 2 units) -> output layer, in the policy and in the critic
    for network in ("actor", "critic"):
        assert tuple(state["agent"][f"{network}.memory.lstm.weight_hh_l0"].shape) == (32, 8)
        assert tuple(state["agent"][f"{network}.memory.lstm.weight_ih_l0"].shape) == (32, 16)
    graph = onnx.load(str(run / "CartPole.onnx")).graph
    assert [i.name for i in graph.input] == ["obs", "memory_in"]
    assert [o.name for o in graph.output] == ["action", "memory_out"]
    written = yaml.safe_load((run / "configuration.yaml").read_text())
    assert written["behaviors"]["CartPole"]["network_settings"]["memory"] == MEMORY

    evtrain_learn(tmp_path, memory_config(tmp_path, max_steps=1024), "--resume")
    resumed = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert resumed["step"] == 1024
    changed = [k for k, v in state["agent"].items() if not torch.equal(v, resumed["agent"][k])]
    assert "actor.memory.lstm.weight_hh_l0" in changed  # the LSTM went on learning
    steps = scalar_steps(run / "CartPole", "Environment/Cumulative Reward")
    assert steps == [256, 512, 768, 1024]


def test_sac_with_memory_trains_and_exports_through_the_cli(tmp_path: Path) -> None:
    options = config(
        tmp_path,
        trainer_type="sac",
        hyperparameters={"batch_size": 16, "buffer_size": 1000, "buffer_init_steps": 64},
        network_settings={"hidden_units": 16, "num_layers": 1, "memory": MEMORY},
        max_steps=128,
        summary_freq=64,
        checkpoint_interval=128,
    )
    options["env_settings"].update(env_id="Pendulum-v1", num_envs=2)
    evtrain_learn(tmp_path, options)
    run = tmp_path / "results" / "run"
    state = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert state["step"] == 128 and state["num_updates"] == 64
    for critic in (0, 1):
        assert f"critics.{critic}.memory.lstm.weight_hh_l0" in state["qf"]
    assert "memory.lstm.weight_hh_l0" in state["actor"]
    graph = onnx.load(str(run / "CartPole.onnx")).graph
    assert [i.name for i in graph.input] == ["obs", "memory_in"]
    assert [o.name for o in graph.output] == ["action", "memory_out"]
    # learning starts after the 64 warm-up steps: the summary at 64 has no losses yet
    assert scalar_steps(run / "CartPole", "Losses/Q1 Loss") == [128]


def test_inference_runs_the_recurrent_policy(tmp_path: Path) -> None:
    learn(memory_config(tmp_path, max_steps=256, checkpoint_interval=256))
    options = memory_config(tmp_path, max_steps=512)
    options["checkpoint_settings"]["inference"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    events = recorder.of(StatsEvent)
    assert [e.step for e in events] == [256, 512]
    assert all(e.values["Is Training"].aggregated_value == 0.0 for e in events)
    assert all(e.values["Environment/Cumulative Reward"].num > 0 for e in events)


def test_record_runs_the_recurrent_policy_from_a_fresh_memory_each_episode(
    tmp_path: Path,
) -> None:
    # One update: a policy close to its initial one, whose actions still hinge on the memory
    options = memory_config(tmp_path, max_steps=128)
    learn(options)
    result = record(RunOptions.from_dict(options), episodes=3, output=tmp_path / "demo.npz")
    demo = load_demonstrations(
        result.path, MASKED.observation_space, MASKED.action_space, key="demo_path"
    )
    assert len(demo.episode_returns) == 3
    # the same steps again, the exported policy's memory zeroed after each episode (or not)
    for reset in (True, False):
        policy = onnx_policy(result.policy)
        actions = []
        for obs, done in zip(demo.observations, demo.terminated | demo.truncated, strict=True):
            actions.append(int(policy(obs)))
            if done and reset:
                policy.reset()
        assert (actions == demo.actions.tolist()) is reset


def with_memory(memory: dict[str, Any], **behavior: Any) -> dict[str, Any]:
    return {"network_settings": {"memory": memory}, **behavior}


@pytest.mark.parametrize(
    ("behavior", "problem"),
    [
        (
            with_memory({"memory_size": 63}),
            "behaviors.B.network_settings.memory.memory_size: expected an even number (the "
            "LSTM's hidden and cell state, memory_size / 2 each), got 63; use 64",
        ),
        (
            with_memory({"memory_size": 0}),
            "behaviors.B.network_settings.memory.memory_size: must be > 0, got 0",
        ),
        (
            with_memory({"sequence_length": 0}),
            "behaviors.B.network_settings.memory.sequence_length: must be > 0, got 0",
        ),
        (
            with_memory({"sequence_length": 64}, hyperparameters={"batch_size": 32}),
            "behaviors.B.network_settings: memory.sequence_length (64) must not exceed "
            "hyperparameters.batch_size (32); lower sequence_length or raise batch_size",
        ),
        (
            with_memory({}, behavioral_cloning={"demo_path": "demos/Expert.npz"}),
            "behaviors.B.behavioral_cloning: cloning a recurrent policy "
            "(network_settings.memory) is not supported by evtrain yet; remove "
            "behavioral_cloning or memory",
        ),
        (
            with_memory({}, trainer_type="sac", threaded=True),
            "behaviors.B.threaded: true with a recurrent SAC (network_settings.memory) is not "
            "supported by evtrain yet: its critics step along with the environments; set "
            "threaded: false or remove memory",
        ),
        (
            with_memory({"memory_sise": 64}),
            "behaviors.B.network_settings.memory.memory_sise: unknown key (did you mean "
            "memory_size?)",
        ),
    ],
)
def test_bad_memory_settings_name_the_key_and_the_fix(
    behavior: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"B": behavior}})
    assert info.value.problems == (problem,)


def test_memory_defaults_are_ml_agents_and_absent_memory_writes_no_key() -> None:
    options = RunOptions.from_dict(
        {"behaviors": {"R": {"network_settings": {"memory": {}}}, "F": {}}}
    )
    memory = options.behaviors["R"].network_settings.memory
    assert memory is not None
    assert (memory.memory_size, memory.sequence_length) == (128, 64)
    written = options.as_dict()["behaviors"]
    assert written["R"]["network_settings"]["memory"] == {
        "sequence_length": 64,
        "memory_size": 128,
    }
    assert "memory" not in written["F"]["network_settings"]
    # what ML-Agents writes for a feed-forward behavior reads back as one
    plain = RunOptions.from_dict({"behaviors": {"F": {"network_settings": {"memory": None}}}})
    assert plain.behaviors["F"].network_settings.memory is None
