from __future__ import annotations

import pytest
import torch

from evtrain.errors import ConfigError
from evtrain.trainers.networks.encoders import MIN_RESOLUTION, VisEncodeType, build_encoder

KINDS: list[VisEncodeType] = ["simple", "nature_cnn", "resnet", "match3", "fully_connected"]


@pytest.mark.parametrize("kind", KINDS)
def test_encoder_output_shape_at_minimum_and_larger(kind: VisEncodeType) -> None:
    for size in (MIN_RESOLUTION[kind], 40):
        encoder = build_encoder(kind, (3, size, size), 24)
        assert encoder(torch.rand(2, 3, size, size)).shape == (2, 24)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "fully_connected"])
def test_encoder_refuses_images_below_its_minimum(kind: VisEncodeType) -> None:
    minimum = MIN_RESOLUTION[kind]
    with pytest.raises(ConfigError) as info:
        build_encoder(kind, (1, minimum - 1, 40), 8)
    assert str(info.value) == (
        f"network_settings.vis_encode_type: {kind!r} needs images of at least "
        f"{minimum}x{minimum}, the observation has shape (1, {minimum - 1}, 40) (C, H, W); "
        f"choose an encoder with a smaller minimum or a larger observation"
    )
