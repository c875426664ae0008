"""Network building blocks: flattened parameters, gradient clipping, observation normaliser."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from evtrain.trainers import NetworkSettings
from evtrain.trainers.networks.mlp import MLP, clip_grad_norm_, flatten_parameters, zero_grad_
from evtrain.trainers.networks.normalizer import ObservationNormalizer


def mlp() -> MLP:
    network = NetworkSettings(hidden_units=8, num_layers=2)
    return MLP(3, 2, network, out_gain=1.0, generator=torch.Generator().manual_seed(0))


def test_flattened_parameters_get_the_same_gradients() -> None:
    plain, flat_module = mlp(), mlp()
    flat = flatten_parameters(flat_module)
    assert (
        flat.numel()
        == sum(p.numel() for p in plain.parameters())
        == 3 * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2
    )
    x = torch.randn(5, 3)
    for _ in range(2):  # the second pass checks that zero_grad_ really clears
        zero_grad_(flat)
        plain.zero_grad()
        plain(x).square().sum().backward()
        flat_module(x).square().sum().backward()
    assert flat.grad is not None
    expected = torch.cat([p.grad.reshape(-1) for p in plain.parameters() if p.grad is not None])
    torch.testing.assert_close(flat.grad, expected)


def test_an_optimizer_step_on_the_buffer_moves_the_module() -> None:
    module = mlp()
    before = copy.deepcopy(module.state_dict())
    flat = flatten_parameters(module)
    optimizer = torch.optim.SGD([flat], lr=0.1)
    module(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    after = module.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in ("hidden.0.weight", "out.bias"))
    # Loading a state writes through the views into the buffer.
    module.load_state_dict(before)
    torch.testing.assert_close(flat.detach(), torch.cat([t.reshape(-1) for t in before.values()]))


def test_target_networks_flatten_without_gradients() -> None:
    module = mlp().requires_grad_(False)
    flat = flatten_parameters(module)
    assert flat.grad is None and not flat.requires_grad
    with pytest.raises(ValueError, match="has no gradient buffer"):
        zero_grad_(flat)


@pytest.mark.parametrize("max_norm", [0.01, 1000.0])
def test_clip_grad_norm_matches_torch(max_norm: float) -> None:
    flat = nn.Parameter(torch.zeros(10))
    flat.grad = torch.linspace(-1.0, 2.0, 10)
    reference = flat.grad.clone().requires_grad_()
    reference.grad = flat.grad.clone()
    expected_norm = nn.utils.clip_grad_norm_([reference], max_norm)
    norm = clip_grad_norm_(flat, max_norm)
    torch.testing.assert_close(norm, expected_norm)
    torch.testing.assert_close(flat.grad, reference.grad)


def test_normalizer_merges_batches_into_running_mean_and_variance() -> None:
    normalizer = ObservationNormalizer((2,), enabled=True)
    normalizer.update(torch.tensor([[1.0, 10.0], [3.0, 10.0]]))
    normalizer.update(torch.tensor([[5.0, 40.0]]))
    # column 0: 1, 3, 5 -> mean 3, population variance 8/3; column 1: 10, 10, 40 -> 20, 200
    assert normalizer.count.item() == 3
    torch.testing.assert_close(normalizer.mean, torch.tensor([3.0, 20.0], dtype=torch.float64))
    torch.testing.assert_close(normalizer.var, torch.tensor([8 / 3, 200.0], dtype=torch.float64))
    out = normalizer(torch.tensor([[3.0 + (8 / 3) ** 0.5, 20.0 + 1000.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 5.0]]))  # clipped at 5 std


def test_disabled_normalizer_is_the_identity() -> None:
    normalizer = ObservationNormalizer((2,), enabled=False)
    x = torch.randn(3, 2)
    normalizer.update(x)
    assert normalizer(x) is x
    assert normalizer.count.item() == 0
