"""ONNX export of recurrent policies: the memory as explicit inputs and outputs, onnxruntime
step for step equal to torch over whole episodes, and :class:`~evtrain.export.OnnxPolicy`
carrying the memory."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import onnx
import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain import Bus, StatsReporter
from evtrain.export import MEMORY_IN, MEMORY_OUT, Exporter, PolicyExporter, onnx_policy
from evtrain.trainers import (
    MemorySettings,
    NetworkSettings,
    PPOSettings,
    SACSettings,
    make_vector_env,
)
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer
from tests.pixel_envs import pixel_vector_cartpole
from tests.trainers.helpers import masked_envs, small_ppo, small_sac


def recurrent_trainer(bus: Bus, env_id: str = "masked") -> PPOTrainer:
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=32, buffer_size=64, num_epoch=2),
        network_settings=NetworkSettings(
            hidden_units=16,
            num_layers=1,
            normalize=True,
            memory=MemorySettings(memory_size=12, sequence_length=8),
        ),
    )
    envs = (
        masked_envs(AutoresetMode.SAME_STEP, num_envs=2, limit=500)
        if env_id == "masked"
        else make_vector_env(env_id, 2)
    )
    trainer = PPOTrainer("Test", settings, envs, StatsReporter(bus, "Test"), seed=0)
    for _ in range(2):
        trainer.advance()  # trained weights and normaliser statistics, not the initial ones
    return trainer


def graph_io(path: Path) -> tuple[list[tuple[str, list[str | int]]], list[str]]:
    graph = onnx.load(str(path)).graph

    def shape(value: onnx.ValueInfoProto) -> list[str | int]:
        dims = value.type.tensor_type.shape.dim
        return [d.dim_param or d.dim_value for d in dims]

    return [(i.name, shape(i)) for i in graph.input], [o.name for o in graph.output]


@pytest.mark.parametrize("exporter_name", ["torchscript", "dynamo"])
def test_recurrent_policy_exports_memory_in_and_out(
    tmp_path: Path, bus: Bus, exporter_name: Exporter
) -> None:
    trainer = recurrent_trainer(bus)
    exporter = PolicyExporter(exporter=exporter_name)
    # a batch of one, as a run exports with (torch.export would make a size-1 axis static)
    example = torch.as_tensor(trainer.next_obs[:1], dtype=torch.float32)
    path = exporter.export(trainer.policy_module(), example, tmp_path / "p.onnx")
    inputs, outputs = graph_io(path)
    batch = inputs[0][1][0]
    assert isinstance(batch, str)  # a dynamic axis, shared by both inputs
    assert inputs == [("obs", [batch, 2]), (MEMORY_IN, [batch, 12])]
    assert outputs == ["action", MEMORY_OUT]
    if exporter_name == "dynamo":  # a checkpoint's export puts new weights into the graph
        trainer.advance()
        exporter.export(trainer.policy_module(), example, tmp_path / "p.onnx")
        assert (exporter.traced, exporter.reused) == (1, 1)
    trainer.envs.close()


def test_onnxruntime_acts_as_torch_over_whole_episodes(tmp_path: Path, bus: Bus) -> None:
    trainer = recurrent_trainer(bus)
    policy = trainer.policy_module()
    path = PolicyExporter(exporter="torchscript").export(
        policy, torch.as_tensor(trainer.next_obs, dtype=torch.float32), tmp_path / "p.onnx"
    )
    runtime = onnx_policy(path, threads=1)
    assert runtime.recurrent and runtime.memory_size == 12
    envs = masked_envs(AutoresetMode.SAME_STEP, num_envs=3, limit=40)
    obs, _ = envs.reset(seed=5)
    memory = torch.zeros(3, 12)
    ended_episodes = 0
    for _ in range(100):
        with torch.no_grad():
            want, memory = policy(torch.as_tensor(obs), memory)
        got = runtime(obs)
        np.testing.assert_array_equal(got, want.numpy())
        assert runtime.memory is not None
        np.testing.assert_allclose(runtime.memory, memory.numpy(), rtol=1e-4, atol=1e-5)
        obs, _, terminated, truncated, _ = envs.step(got)
        ended = terminated | truncated
        ended_episodes += int(ended.sum())
        runtime.reset(ended)
        memory[torch.from_numpy(ended)] = 0.0
        assert not runtime.memory[ended].any()
    assert ended_episodes >= 3  # the memories were reset, and the next episodes still agree
    # one observation, answered with one action; a new batch size starts afresh
    single = runtime(obs[0])
    assert single.shape == () and runtime.memory is not None
    assert runtime.memory.shape == (1, 12)
    runtime.reset()
    assert runtime.memory is None
    envs.close()
    trainer.envs.close()


def test_recurrent_sac_policy_acts_as_torch_over_an_episode(tmp_path: Path, bus: Bus) -> None:
    settings = small_sac(
        hyperparameters=SACSettings(batch_size=16, buffer_init_steps=20),
        network_settings=NetworkSettings(
            hidden_units=16, num_layers=1, memory=MemorySettings(memory_size=6, sequence_length=4)
        ),
    )
    envs = make_vector_env("Pendulum-v1", 2)
    trainer = SACTrainer("Test", settings, envs, StatsReporter(bus, "Test"), seed=0)
    while trainer.step < 60:
        trainer.advance()  # some gradient steps: weights that are not the initial ones
    policy = trainer.policy_module()
    obs = np.asarray(trainer.next_obs, dtype=np.float32)
    path = PolicyExporter().export(policy, torch.as_tensor(obs), tmp_path / "sac.onnx")
    assert graph_io(path)[1] == ["action", MEMORY_OUT]
    runtime = onnx_policy(path, threads=1)
    memory = torch.zeros(2, 6)
    for _ in range(30):
        with torch.no_grad():
            want, memory = policy(torch.as_tensor(obs), memory)
        got = runtime(obs)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        assert runtime.memory is not None
        np.testing.assert_allclose(runtime.memory, memory.numpy(), rtol=1e-4, atol=1e-5)
        obs = np.asarray(envs.step(got)[0], dtype=np.float32)
    envs.close()


def test_feed_forward_policies_stay_plain_functions(tmp_path: Path, bus: Bus) -> None:
    trainer = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), StatsReporter(bus, "Test"), seed=0
    )
    path = PolicyExporter().export(trainer.policy_module(), torch.zeros(1, 4), tmp_path / "p.onnx")
    assert graph_io(path) == ([("obs", ["batch", 4])], ["action"])
    runtime = onnx_policy(path)
    assert not runtime.recurrent and runtime.memory_size == 0
    assert runtime(np.zeros((3, 4))).shape == (3,)
    assert runtime.memory is None
    trainer.envs.close()


@pytest.mark.parametrize("trainer_type", ["ppo", "sac"])
def test_recurrent_policy_of_image_and_vector_inputs(
    tmp_path: Path, bus: Bus, trainer_type: str
) -> None:
    # A Dict observation (a 24x24 image and a vector): the image goes through its encoder
    # before the LSTM, and the graph takes each part and the memory.
    network = NetworkSettings(
        hidden_units=16, num_layers=1, memory=MemorySettings(memory_size=6, sequence_length=4)
    )
    sac = trainer_type == "sac"
    envs = gym.vector.SyncVectorEnv(
        [lambda: pixel_vector_cartpole(size=24, continuous=sac)] * 2,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    reporter = StatsReporter(bus, "Test")
    trainer: PPOTrainer | SACTrainer
    if sac:
        settings = small_sac(
            hyperparameters=SACSettings(batch_size=8, buffer_init_steps=8), network_settings=network
        )
        trainer = SACTrainer("Test", settings, envs, reporter, seed=0)
        while trainer.step < 16:
            trainer.advance()
    else:
        settings = small_ppo(
            hyperparameters=PPOSettings(batch_size=8, buffer_size=16, num_epoch=1),
            network_settings=network,
        )
        trainer = PPOTrainer("Test", settings, envs, reporter, seed=0)
        trainer.advance()
    policy = trainer.policy_module()
    example = {k: np.asarray(v[:1], np.float32) for k, v in trainer.next_obs.items()}
    path = PolicyExporter().export(policy, example, tmp_path / "p.onnx")
    inputs, outputs = graph_io(path)
    assert [name for name, _ in inputs] == ["image", "vector", MEMORY_IN]
    assert outputs == ["action", MEMORY_OUT]
    runtime = onnx_policy(path, threads=1)
    obs = trainer.next_obs
    memory = torch.zeros(2, 6)
    for _ in range(5):
        with torch.no_grad():
            parts = [torch.as_tensor(np.asarray(obs[k], np.float32)) for k in ("image", "vector")]
            want, memory = policy(*parts, memory)
        got = runtime(obs)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        obs = envs.step(got)[0]
    envs.close()
