"""ONNX export: parity with the module, dynamic batch, atomic and checked files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from evtrain import Bus, StatsReporter
from evtrain.export import Exporter, PolicyExporter, export_onnx, onnx_policy
from evtrain.trainers import NetworkSettings, PPOTrainer, SACTrainer, make_vector_env
from tests.export_policies import (
    OBS_DIM,
    DiscretePolicy,
    NormalizedMLP,
    RaisingPolicy,
    observations,
)
from tests.trainers.helpers import small_ppo, small_sac


class ContinuousPolicy(NormalizedMLP):
    """tanh-squashed mean rescaled to the bounds [-2, 2] x [0, 1]: float32 ``[B, 2]``."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, seed: int = 0) -> None:
        super().__init__(2, seed)
        self.register_buffer("low", torch.tensor([-2.0, 0.0]))
        self.register_buffer("high", torch.tensor([2.0, 1.0]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        squashed = torch.tanh(self.logits(obs))
        return self.low + (squashed + 1.0) * (self.high - self.low) / 2


class ScaledPolicy(DiscretePolicy):
    """Reads a tensor that is neither a parameter nor a buffer: a constant of a traced graph."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.tensor([1.0, 1.0, 1.0])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.logits(obs) * self.scale).argmax(-1)


class TwoFacedPolicy(nn.Module):
    """Computes one thing when run, another when exported: the export check must notice."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export():
            return obs[:, :2] * 0.5
        return obs[:, :2]


class NoTorchScriptPolicy(DiscretePolicy):
    """Refuses the TorchScript tracer: ``exporter="auto"`` must fall back to dynamo."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if torch._C._get_tracing_state() is not None:  # the TorchScript tracer is on
            raise RuntimeError("not with TorchScript")
        return super().forward(obs)


def torch_actions(module: nn.Module, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out: torch.Tensor = module(torch.from_numpy(obs))
    return out.numpy()


def test_discrete_policy_parity(tmp_path: Path) -> None:
    module = DiscretePolicy().eval()
    path = export_onnx(module, torch.from_numpy(observations(4)), tmp_path / "d.onnx")

    assert path == tmp_path / "d.onnx"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.onnx"]  # no .data file, no temp
    act = onnx_policy(path, threads=1)
    for n in (1, 7, 64):  # the batch axis is dynamic
        obs = observations(n, seed=n)
        got, want = act(obs), torch_actions(module, obs)
        assert got.dtype == np.int64 and got.shape == (n,)
        np.testing.assert_array_equal(got, want)
        assert len(np.unique(want)) > 1 or n == 1  # the test says something
    single = observations(1)[0]
    assert act(single) == torch_actions(module, single[None])[0]


def test_continuous_policy_parity(tmp_path: Path) -> None:
    module = ContinuousPolicy().train()
    module.net[0].eval()  # submodules keep their own modes
    path = export_onnx(
        module, torch.from_numpy(observations(2)), tmp_path / "c.onnx", input_name="x"
    )

    # Exported in eval mode (no warning about training mode), then left as it came.
    assert module.training and module.net.training and not module.net[0].training
    act = onnx_policy(path, threads=1)
    obs = observations(50)
    got, want = act(obs), torch_actions(module, obs)
    assert got.dtype == np.float32 and got.shape == (50, 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert (got[:, 0] >= -2).all() and (got[:, 0] <= 2).all()
    assert (got[:, 1] >= 0).all() and (got[:, 1] <= 1).all()
    assert act(obs[0]).shape == (2,)


def test_failed_export_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.onnx"
    path.write_bytes(b"previous model")

    with pytest.raises(Exception, match=r"cannot be traced|export"):
        export_onnx(RaisingPolicy(), torch.from_numpy(observations(2)), path)

    assert path.read_bytes() == b"previous model"
    assert [p.name for p in tmp_path.iterdir()] == ["policy.onnx"]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_export_that_computes_something_else_is_rejected(
    tmp_path: Path, exporter: Exporter
) -> None:
    with pytest.raises(ValueError, match="the exported policy's actions differ from the module's"):
        export_onnx(
            TwoFacedPolicy(),
            torch.from_numpy(observations(3)),
            tmp_path / "n.onnx",
            exporter=exporter,
        )
    assert list(tmp_path.iterdir()) == []


def test_auto_falls_back_to_the_dynamo_exporter_for_good(tmp_path: Path) -> None:
    exporter = PolicyExporter()
    module = NoTorchScriptPolicy()
    example = torch.from_numpy(observations(2))
    with pytest.raises(RuntimeError, match="not with TorchScript"):
        PolicyExporter(exporter="torchscript").export(module, example, tmp_path / "t.onnx")
    path = exporter.export(module, example, tmp_path / "a.onnx")
    assert exporter.exporter == "dynamo" and exporter.traced == 1
    obs = observations(40)
    np.testing.assert_array_equal(onnx_policy(path, threads=1)(obs), torch_actions(module, obs))
    exporter.export(module, example, tmp_path / "a.onnx")
    assert (exporter.traced, exporter.reused) == (1, 1)
    with pytest.raises(ValueError, match="exporter must be"):
        PolicyExporter(exporter="jit")  # type: ignore[arg-type]


def test_example_obs_must_be_a_batch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"example_obs must be a batch \[B, \*obs_shape\]"):
        export_onnx(DiscretePolicy(), torch.zeros(OBS_DIM), tmp_path / "x.onnx")


def test_policy_exporter_puts_new_weights_into_the_traced_graph(tmp_path: Path) -> None:
    module = ContinuousPolicy()
    exporter = PolicyExporter(exporter="dynamo")
    obs = observations(50)
    first = exporter.export(module, torch.from_numpy(observations(2)), tmp_path / "1.onnx")
    with torch.no_grad():  # parameters and every kind of buffer change between checkpoints
        for p in module.net.parameters():
            p.mul_(-1.5)
        module.mean.add_(1.0)
        module.std.mul_(2.0)
        module.high.copy_(torch.tensor([1.0, 0.5]))
    second = exporter.export(module, torch.from_numpy(observations(2)), tmp_path / "2.onnx")

    assert (exporter.traced, exporter.reused) == (1, 1)
    got = onnx_policy(second, threads=1)(obs)
    np.testing.assert_allclose(got, torch_actions(module, obs), rtol=0, atol=1e-5)
    assert got[:, 0].max() <= 1.0 and got[:, 1].max() <= 0.5
    assert np.abs(got - onnx_policy(first, threads=1)(obs)).max() > 0.1  # not the old weights


def test_policy_exporter_traces_a_changed_module_anew(tmp_path: Path) -> None:
    exporter = PolicyExporter(exporter="dynamo")
    example = torch.from_numpy(observations(2))
    exporter.export(DiscretePolicy(), example, tmp_path / "d.onnx")
    continuous = ContinuousPolicy()  # other buffers: another structure
    path = exporter.export(continuous, example, tmp_path / "c.onnx")
    assert (exporter.traced, exporter.reused) == (2, 0)
    obs = observations(20)
    np.testing.assert_allclose(
        onnx_policy(path, threads=1)(obs), torch_actions(continuous, obs), rtol=0, atol=1e-5
    )

    # Same structure, but a tensor that is not state changed: the reused graph computes
    # something else, the check notices, and the module is traced again.
    scaled = ScaledPolicy()
    exporter.export(scaled, example, tmp_path / "s.onnx")
    obs = observations(200)
    before = torch_actions(scaled, obs)
    scaled.scale = torch.tensor([1.0, -1.0, 20.0])
    assert (torch_actions(scaled, obs) != before).any()
    path = exporter.export(scaled, example, tmp_path / "s.onnx")
    assert (exporter.traced, exporter.reused) == (4, 0)
    np.testing.assert_array_equal(onnx_policy(path, threads=1)(obs), torch_actions(scaled, obs))


@pytest.mark.parametrize("exporter_name", ["torchscript", "dynamo"])
def test_real_trainer_policies_export(tmp_path: Path, bus: Bus, exporter_name: Exporter) -> None:
    reporter = StatsReporter(bus, "Test")
    ppo_settings = small_ppo(
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, normalize=True)
    )
    trainers = [
        PPOTrainer("Test", ppo_settings, make_vector_env("CartPole-v1", 2), reporter, seed=0),
        SACTrainer("Test", small_sac(), make_vector_env("Pendulum-v1", 2), reporter, seed=0),
    ]
    for trainer in trainers:
        exporter = PolicyExporter(exporter=exporter_name)  # as a checkpoint manager exports
        for checkpoint in range(2):
            for _ in range(2):
                trainer.advance()  # the trainer still trains after its policy was exported
            policy = trainer.policy_module()
            path = exporter.export(
                policy, torch.as_tensor(trainer.next_obs, dtype=torch.float32), tmp_path / "p.onnx"
            )
            # The dynamo exporter traces once, then puts in new weights.
            expected = (1, checkpoint) if exporter_name == "dynamo" else (checkpoint + 1, 0)
            assert (exporter.traced, exporter.reused) == expected
            obs = np.concatenate(
                [trainer.next_obs, observations(30)[:, : trainer.next_obs.shape[1]]]
            )
            obs = obs.astype(np.float32)
            got, want = onnx_policy(path, threads=1)(obs), torch_actions(policy, obs)
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        trainer.envs.close()
