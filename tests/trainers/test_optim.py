"""FlatAdam: torch.optim.Adam's update and state layout, without torch.optim."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evtrain.trainers.networks.mlp import flatten_parameters, zero_grad_
from evtrain.trainers.optim import FlatAdam


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))


def _loss(net: nn.Module, step: int) -> torch.Tensor:
    x = torch.linspace(-1, 1, 32).reshape(8, 4) * (step + 1)
    out: torch.Tensor = net(x)
    return out.square().mean()


def test_flat_adam_matches_torch_fused_adam_bit_for_bit() -> None:
    ours, theirs = _net(0), _net(0)
    flat, flat_ref = flatten_parameters(ours), flatten_parameters(theirs)
    adam = FlatAdam(flat, 3e-3, eps=1e-5)
    reference = torch.optim.Adam([flat_ref], lr=3e-3, eps=1e-5, fused=True)
    for step in range(25):
        adam.lr = reference.param_groups[0]["lr"] = 3e-3 * (1 - step / 50)
        for net, params in ((ours, flat), (theirs, flat_ref)):
            zero_grad_(params)
            torch.autograd.backward(_loss(net, step))
        adam.step()
        reference.step()
    assert torch.equal(flat, flat_ref)
    assert flat.abs().sum() > 0
    ref_state = reference.state_dict()
    state = adam.state_dict()
    assert state["param_groups"][0].keys() == ref_state["param_groups"][0].keys()
    for key in ("step", "exp_avg", "exp_avg_sq"):
        assert torch.equal(state["state"][0][key], ref_state["state"][0][key])


def test_flat_adam_resumes_from_a_torch_optim_state_and_back() -> None:
    net = _net(1)
    flat = flatten_parameters(net)
    reference = torch.optim.Adam([flat], lr=1e-3, fused=True)
    for step in range(3):
        zero_grad_(flat)
        torch.autograd.backward(_loss(net, step))
        reference.step()
    adam = FlatAdam(flat, 0.5)
    adam.load_state_dict(reference.state_dict())
    assert adam.lr == 1e-3 and int(adam.step_count) == 3
    assert torch.equal(adam.exp_avg, reference.state_dict()["state"][0]["exp_avg"])
    # The state it gives is a copy, and torch.optim loads it.
    saved = adam.state_dict()
    adam.step()
    assert int(saved["state"][0]["step"]) == 3
    again = torch.optim.Adam([flat], lr=1.0, fused=True)
    again.load_state_dict(saved)
    assert again.param_groups[0]["lr"] == 1e-3


def test_flat_adam_skips_a_parameter_without_gradient_and_refuses_a_wrong_state() -> None:
    scalar = nn.Parameter(torch.tensor(0.25))
    adam = FlatAdam(scalar, 0.1)
    adam.step()
    assert scalar.item() == 0.25 and int(adam.step_count) == 0
    assert adam.state_dict()["state"] == {}
    torch.autograd.backward(scalar * 2.0)
    adam.step()
    assert scalar.item() == pytest.approx(0.15)
    adam.zero_grad()
    assert scalar.grad is None
    other = FlatAdam(nn.Parameter(torch.zeros(3)), 0.1)
    with pytest.raises(ValueError, match="shape"):
        other.load_state_dict(adam.state_dict())
