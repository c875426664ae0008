"""The clipped surrogate objective and the policy's distributions against hand-computed values."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from evtrain.trainers import NetworkSettings, clipped_surrogate_loss
from evtrain.trainers.networks.policies import ActorCritic


def test_clipped_surrogate_loss_by_hand() -> None:
    # ratios 1.5, 0.5, 1.1, 0.7; advantages +1, +1, -1, -1; clip 0.2
    # r*A           = 1.5,  0.5, -1.1, -0.7
    # clip(r)*A     = 1.2,  0.8, -1.1, -0.8
    # min           = 1.2,  0.5, -1.1, -0.8    mean = -0.05    loss = 0.05
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7], dtype=torch.float64)
    new_logprob = ratio.log().requires_grad_()
    old_logprob = torch.zeros(4, dtype=torch.float64)
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)

    loss = clipped_surrogate_loss(new_logprob, old_logprob, advantages, clip_coef=0.2)
    assert loss.item() == pytest.approx(0.05)

    # Gradient flows only where the unclipped term is the minimum: d/dlogp = -A r / 4.
    # 0: clipped (1.2 < 1.5) -> 0;  1: -0.5/4;  2: inside the range -> +1.1/4;  3: clipped -> 0
    torch.autograd.backward(loss)
    assert new_logprob.grad is not None
    np.testing.assert_allclose(new_logprob.grad.numpy(), [0.0, -0.125, 0.275, 0.0])


def test_unchanged_policy_gives_minus_mean_advantage() -> None:
    logprob = torch.tensor([-0.3, -1.2, -0.7])
    advantages = torch.tensor([2.0, -1.0, 0.5])
    loss = clipped_surrogate_loss(logprob, logprob, advantages, clip_coef=0.1)
    assert loss.item() == pytest.approx(-0.5)


def agent(action_space: gym.spaces.Space[Any]) -> ActorCritic:
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    network = NetworkSettings(hidden_units=8, num_layers=1)
    return ActorCritic(observation_space, action_space, network, torch.Generator().manual_seed(0))


def test_categorical_policy_matches_torch_distributions() -> None:
    ac = agent(gym.spaces.Discrete(3))
    x = torch.randn(5, 3)
    action, logprob = ac.act(x, torch.Generator().manual_seed(1))
    reference: Any = torch.distributions.Categorical(logits=ac.actor(x))  # untyped in torch
    torch.testing.assert_close(logprob, reference.log_prob(action))

    new_logprob, entropy, _ = ac.evaluate(x, action)
    torch.testing.assert_close(new_logprob, reference.log_prob(action))
    assert entropy is not None
    torch.testing.assert_close(entropy, reference.entropy())


def test_categorical_sampling_follows_the_probabilities() -> None:
    ac = agent(gym.spaces.Discrete(3))
    with torch.no_grad():
        ac.actor.out.bias.copy_(torch.tensor([0.0, math.log(2.0), math.log(7.0)]))
        ac.actor.out.weight.zero_()
    x = torch.zeros(100_000, 3)
    action, _ = ac.act(x, torch.Generator().manual_seed(2))
    frequencies = torch.bincount(action, minlength=3).double() / action.numel()
    torch.testing.assert_close(
        frequencies, torch.tensor([0.1, 0.2, 0.7]).double(), atol=5e-3, rtol=0
    )


def test_gaussian_policy_matches_torch_distributions() -> None:
    ac = agent(gym.spaces.Box(-2.0, 2.0, (2,), np.float32))
    with torch.no_grad():
        ac.log_std.copy_(torch.tensor([-0.5, 0.3]))
    x = torch.randn(5, 3)
    action, logprob = ac.act(x, torch.Generator().manual_seed(1))
    reference: Any = torch.distributions.Normal(ac.actor(x), ac.log_std.exp())
    torch.testing.assert_close(logprob, reference.log_prob(action).sum(-1))

    new_logprob, entropy, _ = ac.evaluate(x, action)
    torch.testing.assert_close(new_logprob, reference.log_prob(action).sum(-1))
    assert entropy is not None
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))


def test_entropy_can_stay_out_of_the_graph() -> None:
    ac = agent(gym.spaces.Discrete(2))
    x = torch.randn(4, 3)
    action = torch.tensor([0, 1, 1, 0])
    _, entropy, _ = ac.evaluate(x, action, entropy_grad=False)
    assert entropy is not None and not entropy.requires_grad
    _, entropy, _ = ac.evaluate(x, action, entropy=False)
    assert entropy is None


def test_unsupported_action_space_is_refused() -> None:
    with pytest.raises(TypeError) as info:
        agent(gym.spaces.MultiBinary(2))
    assert str(info.value) == (
        "the on-policy trainers take a Box, Discrete, MultiDiscrete or hybrid "
        "Dict(continuous=Box, discrete=MultiDiscrete) action space, got MultiBinary(2)"
    )
