"""The fused twin critics: two ``nn.Linear`` stacks computed as one, and older checkpoints."""

from __future__ import annotations

import io

import torch
from torch import nn

from evtrain.trainers import NetworkSettings, SACTrainer, make_vector_env
from evtrain.trainers.networks.mlp import MLP, flatten_parameters
from evtrain.trainers.sac.twin_q import TwinQ
from tests.trainers.helpers import Recording, small_sac

NETWORK = NetworkSettings(hidden_units=8, num_layers=2, activation="relu")


class TwoNetworks(nn.Module):
    """The critics' layout before they were fused: two MLPs on ``[s, a]``."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.q1 = MLP(4, 1, NETWORK, out_gain=1.0, generator=generator)
        self.q2 = MLP(4, 1, NETWORK, out_gain=1.0, generator=generator)

    def forward(self, xa: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.q1(xa).squeeze(-1), self.q2(xa).squeeze(-1)])


def fused_state(two: TwoNetworks, *, grads: bool = False) -> dict[str, torch.Tensor]:
    """``two``'s weights (or their gradients) in TwinQ's layout, written out by hand."""

    def value(p: torch.Tensor) -> torch.Tensor:
        assert not grads or p.grad is not None
        return (p.grad if grads else p).detach()  # type: ignore[union-attr]

    state = {}
    layers = zip([*two.q1.hidden, two.q1.out], [*two.q2.hidden, two.q2.out], strict=True)
    for i, (q1, q2) in enumerate(layers):
        state[f"weights.{i}"] = torch.stack([value(q1.weight).t(), value(q2.weight).t()])
        state[f"biases.{i}"] = torch.stack([value(q1.bias), value(q2.bias)]).unsqueeze(1)
    return state


def test_initialised_as_two_separate_networks_from_the_same_draws() -> None:
    two = TwoNetworks(torch.Generator().manual_seed(3))
    fused = TwinQ(3, 1, NETWORK, torch.Generator().manual_seed(3))
    for name, tensor in fused.state_dict().items():
        assert torch.equal(tensor, fused_state(two)[name]), name


def test_forward_and_gradients_equal_two_linear_stacks() -> None:
    two = TwoNetworks(torch.Generator().manual_seed(0))
    with torch.no_grad():  # non-zero biases, so that they are checked too
        for p in two.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    fused = TwinQ(3, 1, NETWORK, torch.Generator().manual_seed(1))
    fused.load_state_dict(fused_state(two))
    draws = torch.Generator().manual_seed(2)  # not the global generator: other tests move it
    x = torch.randn(5, 3, generator=draws)
    action = torch.randn(5, 1, generator=draws).requires_grad_()
    q1, q2 = fused(x, action)
    expected = two(torch.cat([x, action], dim=-1))
    torch.testing.assert_close(torch.stack([q1, q2]), expected)

    weights = torch.tensor([[1.0], [-2.0]])  # a different loss weight per critic
    torch.autograd.backward((torch.stack([q1, q2]) * weights).square().sum())
    action_grad = action.grad
    action.grad = None
    torch.autograd.backward((expected * weights).square().sum())
    torch.testing.assert_close(action_grad, action.grad)
    expected_grads = fused_state(two, grads=True)
    for name, p in fused.named_parameters():
        # float32 sums in another order: rounding relative to the largest gradient (~1e3 here)
        scale = expected_grads[name].abs().max().item()
        torch.testing.assert_close(
            p.grad, expected_grads[name], rtol=1e-5, atol=1e-6 * scale, msg=name
        )


def test_a_checkpoint_of_the_two_network_layout_loads(recording: Recording) -> None:
    """Weights and the critics' Adam moments of a pre-fusion checkpoint land where they belong."""
    settings = small_sac(network_settings=NETWORK)
    trainer = SACTrainer(
        "Test", settings, make_vector_env("Pendulum-v1", 1), recording.reporter, seed=0
    )
    for _ in range(110):  # past warm-up: the optimizers have state
        trainer.advance()
    state = trainer.state_dict()
    # The same state as the old layout wrote it: its own weights, and moments equal to the
    # flattened weights, so that a misplaced moment shows as a mismatch below.
    old, old_target = (
        TwoNetworks(torch.Generator().manual_seed(5)),
        TwoNetworks(torch.Generator().manual_seed(6)),
    )
    flat = flatten_parameters(old)
    state["qf"], state["qf_target"] = old.state_dict(), old_target.state_dict()
    moments = state["q_optimizer"]["state"][0]
    moments["exp_avg"], moments["exp_avg_sq"] = flat.detach().clone(), 2 * flat.detach()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)

    resumed = SACTrainer(
        "Test", settings, make_vector_env("Pendulum-v1", 1), recording.reporter, seed=1
    )
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    xa = torch.randn(6, 4)
    with torch.no_grad():
        torch.testing.assert_close(
            resumed.algorithm.networks.qf.values(xa[:, :3], xa[:, 3:]), old(xa)
        )
        torch.testing.assert_close(
            resumed.algorithm.networks.qf_target.values(xa[:, :3], xa[:, 3:]), old_target(xa)
        )
    adam = resumed.algorithm.networks.q_optimizer
    torch.testing.assert_close(adam.exp_avg, resumed.algorithm.networks.qf_params.detach())
    torch.testing.assert_close(adam.exp_avg_sq, 2 * resumed.algorithm.networks.qf_params.detach())
    resumed.advance()  # and it trains on
