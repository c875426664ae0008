"""PPO's written-out gradients against autograd's, and a trainer using either."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from evtrain import Bus
from evtrain.trainers import NetworkSettings, PPOSettings, PPOTrainer
from evtrain.trainers.networks.mlp import flatten_parameters, zero_grad_
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.ppo.gradients import ppo_gradients, supports
from evtrain.trainers.ppo.update import autograd_backward
from tests.trainers.helpers import Recording, make_envs, small_ppo, zoo_cartpole

DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def minibatch(agent: ActorCritic, num_values: int, seed: int) -> tuple[torch.Tensor, ...]:
    """256 samples whose old log-probabilities are the agent's own, shifted by noise wide
    enough for the ratio to leave the clip range on both sides (and stay inside for some)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(256, 5, generator=g)
    with torch.no_grad():
        actions, logprobs = agent.act(obs, g)
    old = logprobs + 0.3 * torch.randn(256, generator=g)
    old[:32] = logprobs[:32]  # ratio exactly 1: minimum's tie between the two terms
    advantages = torch.randn(256, generator=g)
    returns = torch.randn(256, num_values, generator=g).squeeze(-1)
    return obs, actions, old, advantages, returns


def autograd_reference(
    agent: ActorCritic, mb: tuple[torch.Tensor, ...], ent_coef: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """PPO's loss as its autograd path computes it, backpropagated by autograd."""
    hp = small_ppo().hyperparameters
    assert isinstance(hp, PPOSettings)
    vf_coef = hp.vf_coef
    return autograd_backward(
        agent,
        mb,
        None,
        clip_coef=0.2,
        vf_coef=vf_coef,
        ent_coef=ent_coef,
        with_entropy=with_entropy,
    )


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("action_space", [DISCRETE, BOX], ids=["discrete", "box"])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
@pytest.mark.parametrize("num_values", [1, 3])
@pytest.mark.parametrize("num_layers", [1, 3])
def test_gradients_are_autograds(
    activation: str,
    action_space: gym.spaces.Space[Any],
    ent_coef: float,
    num_values: int,
    num_layers: int,
) -> None:
    network = NetworkSettings(hidden_units=16, num_layers=num_layers, activation=activation)  # type: ignore[arg-type]
    observation_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    agent = ActorCritic(
        observation_space,
        action_space,
        network,
        torch.Generator().manual_seed(0),
        num_values=num_values,
    )
    if not agent.discrete:
        with torch.no_grad():
            agent.log_std.copy_(torch.tensor([-0.3, 0.2]))
    twin = copy.deepcopy(agent)
    flat, twin_flat = flatten_parameters(agent), flatten_parameters(twin)
    assert supports(agent)
    mb = minibatch(agent, num_values, seed=1)
    # the trainer measures the entropy whenever it enters the loss
    for with_entropy in (True,) if ent_coef > 0 else (True, False):
        zero_grad_(flat)
        zero_grad_(twin_flat)
        expected = autograd_reference(twin, mb, ent_coef, with_entropy)
        got = ppo_gradients(
            agent, mb, clip_coef=0.2, vf_coef=0.5, ent_coef=ent_coef, with_entropy=with_entropy
        )
        assert twin_flat.grad is not None and flat.grad is not None
        assert twin_flat.grad.abs().max() > 0
        if agent.discrete and ent_coef == 0.0:
            # the same operations in the same order: the same bits
            assert torch.equal(flat.grad, twin_flat.grad)
        else:
            torch.testing.assert_close(flat.grad, twin_flat.grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)
        if with_entropy or ent_coef > 0:
            assert got[2] is not None and expected[2] is not None
            torch.testing.assert_close(got[2], expected[2], rtol=0, atol=0)
        else:
            assert got[2] is None and expected[2] is None


def test_other_activations_use_autograd() -> None:
    observation_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    for activation in ("elu", "silu"):
        network = NetworkSettings(hidden_units=8, num_layers=1, activation=activation)
        agent = ActorCritic(observation_space, DISCRETE, network, torch.Generator())
        assert not supports(agent)


def test_a_trainer_learns_the_same_numbers_either_way() -> None:
    """rl-zoo CartPole, 6 updates of 20 epochs: written-out gradients vs autograd."""
    weights = []
    for analytic in (True, False):
        settings = zoo_cartpole(max_steps=6 * 256)
        envs = make_envs("CartPole-v1", 8)
        with Bus() as bus:
            trainer = PPOTrainer(
                "CartPole", settings, envs, Recording(bus, "CartPole").reporter, seed=3
            )
            assert trainer.algorithm.analytic_gradients
            trainer.algorithm.analytic_gradients = analytic
            while not trainer.should_stop:
                trainer.advance()
        envs.close()
        weights.append(trainer.algorithm.flat_params.detach().clone())
    assert torch.equal(weights[0], weights[1])


def test_image_observations_use_autograd() -> None:
    image = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    network = NetworkSettings(hidden_units=8, num_layers=1, vis_encode_type="simple")
    agent = ActorCritic(image, DISCRETE, network, torch.Generator().manual_seed(0))
    assert agent.actor_encoder is not None
    assert not supports(agent)
