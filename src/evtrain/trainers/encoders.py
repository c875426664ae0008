"""Image encoders for ``network_settings.vis_encode_type``, with ML-Agents' architectures and
minimum resolutions.  Each takes a float batch laid out ``(N, C, H, W)`` and returns
``(N, hidden_units)`` features.

Not yet wired into the policies: see issue 11.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from evtrain.errors import ConfigError

VisEncodeType = Literal["simple", "nature_cnn", "resnet", "match3", "fully_connected"]

MIN_RESOLUTION: dict[str, int] = {
    "simple": 20,
    "nature_cnn": 36,
    "resnet": 15,
    "match3": 5,
    "fully_connected": 1,
}
"""Smallest height and width each encoder accepts, as in ML-Agents."""


def _conv_out(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _dense(in_features: int, out_features: int) -> nn.Linear:
    # ML-Agents initialises its encoder's dense layer with Kaiming-normal weights, gain 1.41.
    layer = nn.Linear(in_features, out_features)
    nn.init.kaiming_normal_(layer.weight)
    layer.weight.data.mul_(1.41)
    nn.init.zeros_(layer.bias)
    return layer


class _ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv1(torch.nn.functional.silu(x))
        residual: torch.Tensor = self.conv2(torch.nn.functional.silu(out))
        return x + residual


def build_encoder(kind: VisEncodeType, shape: tuple[int, int, int], out_features: int) -> nn.Module:
    """The ``kind`` encoder for ``(C, H, W)`` images, ending in ``out_features`` features.

    :raises ConfigError: when ``H`` or ``W`` is below ``kind``'s minimum resolution.
    """
    channels, height, width = shape
    minimum = MIN_RESOLUTION[kind]
    if height < minimum or width < minimum:
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
    return nn.Sequential(*layers, nn.Flatten(), _dense(flat, out_features), act)
