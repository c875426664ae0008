"""``hyperparameters.shared_critic`` (PPO, ML-Agents' option): the value heads on the policy's
body, one body trained by both losses, its checkpoint layout, a real CartPole run through the
CLI exported to ONNX, and the checkpoint of the other layout refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain import ConfigError, RunOptions
from evtrain.errors import CheckpointError
from evtrain.export import onnx_policy
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.trainers import NetworkSettings
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.ppo.gradients import supports
from tests.helpers import config, run_config

CARTPOLE = spaces.Box(-np.inf, np.inf, (4,), np.float32)
NETWORK = NetworkSettings(hidden_units=32, num_layers=2)


def shared_config(tmp_path: Path, shared: bool, max_steps: int) -> dict[str, Any]:
    hp = {"batch_size": 64, "buffer_size": 256, "num_epoch": 4, "learning_rate": 3e-3}
    return config(
        tmp_path,
        max_steps=max_steps,
        summary_freq=1024,
        checkpoint_interval=max_steps,
        hyperparameters={**hp, "shared_critic": shared},
        network_settings={"hidden_units": 32, "num_layers": 2},
    )


def test_the_value_heads_sit_on_the_policys_body_and_both_losses_train_it() -> None:
    generator = torch.Generator().manual_seed(0)
    agent = ActorCritic(CARTPOLE, spaces.Discrete(2), NETWORK, generator, shared_critic=True)
    separate = ActorCritic(CARTPOLE, spaces.Discrete(2), NETWORK, torch.Generator())
    keys = set(agent.state_dict())
    assert keys == set(separate.state_dict()) - {
        f"critic.hidden.{i}.{p}" for i in (0, 1) for p in ("weight", "bias")
    }
    assert tuple(agent.critic.out.weight.shape) == (1, 32)  # a head on the body's 32 units
    count = sum(p.numel() for p in agent.parameters())
    assert count == sum(p.numel() for p in separate.parameters()) - (4 * 32 + 32 + 32 * 32 + 32)
    assert not supports(agent)  # the written-out gradients are the separate networks'

    x = torch.randn(16, 4, generator=generator)
    body = agent.actor.hidden[0]
    assert isinstance(body, torch.nn.Linear)
    value_loss = agent.value(x).square().mean()
    policy_loss = -agent.evaluate(x, (x[:, 0] > 0).long())[0].mean()
    for loss in (value_loss, policy_loss):  # each reaches the body
        (gradient,) = torch.autograd.grad(loss, [body.weight])
        assert gradient.abs().sum() > 0.0
    log_prob, _, value = agent.evaluate(x, torch.zeros(16, dtype=torch.long))
    torch.testing.assert_close(value, agent.value(x))
    assert log_prob.shape == value.shape == (16,)
    # a value head per reward provider, on the same body
    heads = ActorCritic(
        CARTPOLE, spaces.Discrete(2), NETWORK, generator, num_values=3, shared_critic=True
    )
    assert heads.value(x).shape == (16, 3) and tuple(heads.critic.out.weight.shape) == (3, 32)


def test_images_go_through_one_encoder() -> None:
    image = spaces.Box(0, 255, (20, 20, 3), np.uint8)
    network = NetworkSettings(hidden_units=8, num_layers=1, vis_encode_type="simple")
    agent = ActorCritic(image, spaces.Discrete(2), network, torch.Generator(), shared_critic=True)
    assert agent.critic_encoder is None and agent.actor_encoder is not None
    x = torch.rand(3, 20 * 20 * 3) * 255
    assert agent.value(x).shape == (3,) and agent.deterministic(x).shape == (3,)


def test_a_shared_critic_learns_cartpole_through_the_cli_and_exports(tmp_path: Path) -> None:
    result = run_config(tmp_path, shared_config(tmp_path, True, 8192))
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    agent = load_checkpoint(run / "CartPole" / "checkpoint.pt")["agent"]
    assert "critic.hidden.0.weight" not in agent and agent["critic.out.weight"].shape == (1, 32)
    acc = EventAccumulator(str(run / "CartPole"), size_guidance={"scalars": 0})
    acc.Reload()
    returns = [s.value for s in acc.Scalars("Environment/Cumulative Reward")]
    assert len(returns) == 8 and returns[-1] > returns[0], returns  # it learns, slowly
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    actions = onnx_policy(run / "CartPole.onnx", threads=1)(obs)
    assert actions.shape == (32,) and set(actions.tolist()) <= {0, 1}


def test_a_checkpoint_of_separate_networks_is_refused_naming_shared_critic(
    tmp_path: Path,
) -> None:
    learn(shared_config(tmp_path, False, 256))
    resumed = shared_config(tmp_path, True, 512)
    resumed["checkpoint_settings"]["resume"] = True
    with pytest.raises(CheckpointError) as info:
        learn(resumed)
    message = str(info.value)
    assert "behaviors.CartPole.hyperparameters.shared_critic: False -> True" in message


def test_shared_critic_with_memory_is_refused_by_name() -> None:
    memory = {"memory_size": 8, "sequence_length": 4}
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(
            {
                "behaviors": {
                    "B": {
                        "hyperparameters": {"shared_critic": True},
                        "network_settings": {"memory": memory},
                    }
                }
            }
        )
    assert info.value.problems == (
        "behaviors.B.hyperparameters: shared_critic: true with network_settings.memory is not "
        "supported by evtrain yet (the policy and the critic carry memories of their own); set "
        "shared_critic: false or remove memory",
    )
