"""Image encoders for ``network_settings.vis_encode_type``, with ML-Agents' architectures and
minimum resolutions.  Each takes a float batch laid out ``(N, C, H, W)`` and returns
``(N, hidden_units)`` features.

The policies put them in front of their hidden layers through
:mod:`evtrain.trainers.observations`, which splits an observation into its images and vectors.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from evtrain.errors import ConfigError
from evtrain.trainers.settings import VisEncodeType

__all__ = ["MIN_RESOLUTION", "VisEncodeType", "build_encoder", "too_small"]

MIN_RESOLUTION: dict[VisEncodeType, int] = {
    "simple": 20,
    "nature_cnn": 36,
    "resnet": 15,
    "match3": 5,
    "fully_connected": 1,
}
"""Smallest height and width each encoder accepts, as in ML-Agents."""


def _conv_out(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _dense(in_features: int, out_features: int, generator: torch.Generator | None) -> nn.Linear:
    # ML-Agents initialises its encoder's dense layer with Kaiming-normal weights, gain 1.41.
    layer = nn.Linear(in_features, out_features)
    nn.init.kaiming_normal_(layer.weight, generator=generator)
    layer.weight.data.mul_(1.41)
    nn.init.zeros_(layer.bias)
    return layer


def _redraw_convolutions(module: nn.Module, generator: torch.Generator) -> None:
    """Draw every convolution's weights again as PyTorch's default does (ML-Agents keeps the
    default), but from ``generator``: a seed then builds the same encoder, whatever torch's
    global random state."""
    for conv in module.modules():
        if isinstance(conv, nn.Conv2d):
            nn.init.kaiming_uniform_(conv.weight, a=math.sqrt(5), generator=generator)
            if conv.bias is not None:
                fan_in = conv.weight[0].numel()
                bound = 1 / math.sqrt(fan_in)
                nn.init.uniform_(conv.bias, -bound, bound, generator=generator)


def too_small(kind: VisEncodeType, height: int, width: int) -> bool:
    """Whether an image of ``height`` x ``width`` is below ``kind``'s minimum resolution."""
    minimum = MIN_RESOLUTION[kind]
    return height < minimum or width < minimum


class _ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv1(torch.nn.functional.silu(x))
        residual: torch.Tensor = self.conv2(torch.nn.functional.silu(out))
        return x + residual


def build_encoder(
    kind: VisEncodeType,
    shape: tuple[int, int, int],
    out_features: int,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """The ``kind`` encoder for ``(C, H, W)`` images, ending in ``out_features`` features.

    :param generator: draws the initial weights (``None``: torch's global generator).
    :raises ConfigError: when ``H`` or ``W`` is below ``kind``'s minimum resolution (the
        trainers check first, with the behavior's full key path and the fix).
    """
    channels, height, width = shape
    minimum = MIN_RESOLUTION[kind]
    if too_small(kind, height, width):
        raise ConfigError(
            [
                f"network_settings.vis_encode_type: {kind!r} needs images of at least "
                f"{minimum}x{minimum}, the observation has shape {shape} (C, H, W); "
                f"choose an encoder with a smaller minimum or a larger observation"
            ]
        )
    act: nn.Module = nn.LeakyReLU()
    layers: list[nn.Module]
    if kind == "fully_connected":
        flat = channels * height * width
        layers = []
    elif kind == "simple" or kind == "nature_cnn":
        spec = (
            [(16, 8, 4), (32, 4, 2)] if kind == "simple" else [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
        )
        layers = []
        c, h, w = channels, height, width
        for out_c, k, s in spec:
            layers += [nn.Conv2d(c, out_c, k, s), nn.LeakyReLU()]
            c, h, w = out_c, _conv_out(h, k, s), _conv_out(w, k, s)
        flat = c * h * w
    elif kind == "match3":
        layers = [nn.Conv2d(channels, 35, 3), nn.LeakyReLU(), nn.Conv2d(35, 144, 3), nn.LeakyReLU()]
        flat = 144 * (height - 4) * (width - 4)
    else:
        layers = []
        c, h, w = channels, height, width
        for out_c in (16, 32, 32):
            layers += [
                nn.Conv2d(c, out_c, 3, padding=1),
                nn.MaxPool2d(3, 2, padding=1),
                _ResBlock(out_c),
                _ResBlock(out_c),
            ]
            c, h, w = out_c, _conv_out(h, 3, 2, 1), _conv_out(w, 3, 2, 1)
        layers.append(nn.SiLU())
        flat = c * h * w
        act = nn.SiLU()
    encoder = nn.Sequential(*layers, nn.Flatten(), _dense(flat, out_features, generator), act)
    if generator is not None:
        _redraw_convolutions(encoder, generator)
    return encoder
