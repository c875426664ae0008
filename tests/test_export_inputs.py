"""ONNX export of policies with several inputs (a Dict observation's parts): one named graph
input each, parity with the module in onnxruntime, ``onnx_policy`` taking a mapping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from evtrain.export import PolicyExporter, export_onnx, onnx_policy


class ImageAndVector(nn.Module):
    """A conv over an ``H x W x C`` image and a linear over a vector: argmax of 3 logits."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, stride=2)
        self.head = nn.Linear(4 * 3 * 3 + 2, 3)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=generator))

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        image, vector = obs
        features = self.conv(image.permute(0, 3, 1, 2) / 255.0).flatten(1)
        logits: torch.Tensor = self.head(torch.cat([features, vector], dim=1))
        return logits.argmax(-1)


class TwoArguments(ImageAndVector):
    """The same policy with a named argument per input."""

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        return self.both(obs[0], obs[1])

    def both(self, image: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
        return super().forward(image, vector)


def batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "camera": rng.integers(0, 256, (n, 8, 8, 3)).astype(np.uint8),
        "speed": rng.normal(size=(n, 2)).astype(np.float32),
    }


def torch_actions(module: nn.Module, obs: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        out: torch.Tensor = module(*(torch.as_tensor(x, dtype=torch.float32) for x in obs.values()))
    return out.numpy()


def input_shapes(path: Path) -> list[tuple[str, list[int | str]]]:
    """The graph's inputs: name and shape (``batch`` for a symbolic axis)."""
    return [
        (i.name, [d.dim_value or "batch" for d in i.type.tensor_type.shape.dim])
        for i in onnx.load(path).graph.input
    ]


def test_a_policy_of_two_inputs_exports_with_one_named_input_each(tmp_path: Path) -> None:
    module = ImageAndVector().eval()
    example = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in batch(2).items()}
    path = export_onnx(module, example, tmp_path / "p.onnx")

    assert input_shapes(path) == [("camera", ["batch", 8, 8, 3]), ("speed", ["batch", 2])]
    act = onnx_policy(path, threads=1)
    for n in (1, 9):
        obs = batch(n, seed=n)  # uint8 images as the environment gives them
        np.testing.assert_array_equal(act(obs), torch_actions(module, obs))
    one = {k: v[0] for k, v in batch(1, seed=4).items()}  # one observation, one action
    assert act(one) == torch_actions(module, batch(1, seed=4))[0]


def test_the_dynamo_exporter_traces_two_inputs_and_reuses_the_graph(tmp_path: Path) -> None:
    module = TwoArguments().eval()  # named arguments behind *obs: one batch axis for all
    exporter = PolicyExporter(exporter="dynamo")
    example = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in batch(1).items()}
    exporter.export(module, example, tmp_path / "p.onnx")
    with torch.no_grad():
        module.head.weight.mul_(-1.0)
    path = exporter.export(module, example, tmp_path / "p.onnx")
    assert (exporter.traced, exporter.reused) == (1, 1)
    assert [name for name, _ in input_shapes(path)] == ["camera", "speed"]
    obs = batch(16, seed=3)
    np.testing.assert_array_equal(onnx_policy(path, threads=1)(obs), torch_actions(module, obs))


def test_onnx_policy_of_two_inputs_needs_both_by_name(tmp_path: Path) -> None:
    module = ImageAndVector().eval()
    example = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in batch(1).items()}
    act = onnx_policy(export_onnx(module, example, tmp_path / "p.onnx"), threads=1)
    with pytest.raises(ValueError, match=r"^the policy's inputs are \['camera', 'speed'\]: "):
        act(batch(1)["camera"])
    with pytest.raises(
        ValueError, match=r"^the policy's inputs are \['camera', 'speed'\]; missing \['speed'\]$"
    ):
        act({"camera": batch(1)["camera"]})


def test_example_batches_must_agree_in_size(tmp_path: Path) -> None:
    example = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in batch(2).items()}
    example["speed"] = example["speed"][:1]
    with pytest.raises(ValueError, match=r"^example_obs must be batches of one size, got shapes "):
        export_onnx(ImageAndVector(), example, tmp_path / "p.onnx")
    assert not (tmp_path / "p.onnx").exists()
