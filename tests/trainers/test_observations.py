"""Observation layouts: which parts are images, the flat row, the encoders at the networks' front,
the vector-only normaliser, and the replay buffer's bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from evtrain.errors import ConfigError, SpaceMismatchError
from evtrain.trainers import NetworkSettings
from evtrain.trainers.loops.replay import ReplayBuffer
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import (
    ObservationPart,
    VectorNormalizer,
    behavior_layout,
    observation_layout,
    policy_inputs,
)

IMAGE = spaces.Box(0, 255, (24, 20, 3), np.uint8)
DICT = spaces.Dict(
    {
        "pixels": IMAGE,
        "depth": spaces.Box(0.0, 1.0, (1, 22, 21), np.float32),
        "speed": spaces.Box(-1.0, 1.0, (2,), np.float32),
        "goal": spaces.Box(-1.0, 1.0, (3,), np.float32),
    }
)
"""Gymnasium sorts a dict's keys: depth, goal, pixels, speed."""


def dict_batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "depth": rng.random((n, 1, 22, 21), dtype=np.float32),
        "goal": rng.normal(size=(n, 3)).astype(np.float32),
        "pixels": rng.integers(0, 256, (n, 24, 20, 3), dtype=np.uint8),
        "speed": rng.normal(size=(n, 2)).astype(np.float32),
    }


def test_box_layouts_vectors_and_both_image_layouts() -> None:
    vector = observation_layout(spaces.Box(-1.0, 1.0, (2, 3), np.float32))
    assert vector.parts == (ObservationPart(key=None, shape=(2, 3), start=0, image=False),)
    assert (vector.size, vector.vector_size, vector.byte_size, vector.images) == (6, 6, 0, ())
    assert vector.input_names == ("obs",)

    (last,) = observation_layout(IMAGE).parts
    assert (last.image, last.channels_first, last.chw, last.scale) == (
        True,
        False,
        (3, 24, 20),
        1 / 255,
    )
    (first,) = observation_layout(spaces.Box(0.0, 1.0, (4, 36, 40), np.float32)).parts
    assert (first.image, first.channels_first, first.chw, first.scale) == (
        True,
        True,
        (4, 36, 40),
        1.0,
    )


def test_dict_layout_puts_vectors_first_and_uint8_images_last() -> None:
    layout = observation_layout(DICT)
    assert layout.keys == ("depth", "goal", "pixels", "speed")
    assert [(p.key, p.start, p.size) for p in layout.parts] == [
        ("goal", 0, 3),
        ("speed", 3, 2),
        ("depth", 5, 462),
        ("pixels", 467, 1440),
    ]
    assert (layout.size, layout.vector_size, layout.byte_size) == (1907, 5, 1440)
    obs = dict_batch(4)
    rows = layout.rows(obs)
    assert rows.shape == (4, 1907) and rows.dtype == np.float32
    np.testing.assert_array_equal(rows[:, :3], obs["goal"])
    np.testing.assert_array_equal(rows[:, 467:], obs["pixels"].reshape(4, -1))
    np.testing.assert_array_equal(layout.tensor(obs, torch.device("cpu")).numpy(), rows)


def test_the_flattener_takes_the_inputs_in_key_order_and_gives_the_row() -> None:
    layout = observation_layout(DICT)
    obs = dict_batch(3)
    inputs = policy_inputs(DICT, obs)
    assert list(inputs) == ["depth", "goal", "pixels", "speed"]
    row = layout.flattener()(*(torch.as_tensor(x, dtype=torch.float32) for x in inputs.values()))
    np.testing.assert_array_equal(row.numpy(), layout.rows(obs))


def test_box_rows_are_the_flat_observations_as_before() -> None:
    layout = observation_layout(spaces.Box(-5.0, 5.0, (4,), np.float64))
    obs = np.random.default_rng(0).normal(size=(3, 4))
    np.testing.assert_array_equal(layout.rows(obs), obs.astype(np.float32))
    same = obs.astype(np.float32)
    assert np.shares_memory(layout.rows(same), same)
    assert not np.shares_memory(layout.rows(same, copy=True), same)
    (name, inputs), *_ = policy_inputs(spaces.Box(-5.0, 5.0, (4,)), obs).items()
    assert name == "obs" and inputs is obs


def test_spaces_other_than_box_discrete_and_dicts_of_them_are_refused() -> None:
    with pytest.raises(SpaceMismatchError) as info:
        observation_layout(spaces.Dict({"a": spaces.MultiDiscrete([3, 2])}))
    assert str(info.value) == (
        "evtrain trainers need a Box or Discrete observation space, or a Dict of them, got "
        "MultiDiscrete (key 'a'); wrap the environment with "
        "gymnasium.wrappers.FlattenObservation"
    )


def test_an_image_below_the_encoder_minimum_names_the_key_the_image_and_what_fits() -> None:
    space = spaces.Dict({"camera": spaces.Box(0, 255, (16, 18, 3), np.uint8)})
    with pytest.raises(ConfigError) as info:
        behavior_layout(space, NetworkSettings(vis_encode_type="nature_cnn"), "Walker")
    assert str(info.value) == (
        "behaviors.Walker.network_settings.vis_encode_type: 'nature_cnn' needs images of at "
        "least 36x36, observation 'camera' is 16x18 (shape (16, 18, 3), channels last); "
        "choose a vis_encode_type whose minimum fits (resnet: 15x15, match3: 5x5, "
        "fully_connected: 1x1) or give the environment larger images"
    )
    assert behavior_layout(space, NetworkSettings(vis_encode_type="resnet"), "W").size == 864


def test_encoder_scales_uint8_images_and_passes_vectors_through() -> None:
    network = NetworkSettings(hidden_units=8, vis_encode_type="fully_connected")
    float_twin = spaces.Dict(
        {"pixels": spaces.Box(0.0, 1.0, IMAGE.shape, np.float32), "v": spaces.Box(-1, 1, (2,))}
    )
    uint8 = spaces.Dict({"pixels": IMAGE, "v": spaces.Box(-1, 1, (2,))})
    encoders = [
        observation_layout(space).encoder(network, torch.Generator().manual_seed(0))
        for space in (uint8, float_twin)
    ]
    assert encoders[0] is not None and encoders[1] is not None
    pixels = np.random.default_rng(0).integers(0, 256, (5, 24, 20, 3), dtype=np.uint8)
    vector = np.ones((5, 2), dtype=np.float32)
    raw = observation_layout(uint8).rows({"pixels": pixels, "v": vector})
    scaled = observation_layout(float_twin).rows({"pixels": pixels / 255.0, "v": vector})
    with torch.no_grad():
        a, b = encoders[0](torch.from_numpy(raw)), encoders[1](torch.from_numpy(scaled))
    assert a.shape == (5, 2 + 8)
    np.testing.assert_array_equal(a[:, :2].numpy(), vector)
    torch.testing.assert_close(a, b)


def test_an_encoder_is_drawn_from_the_generator_alone() -> None:
    layout = observation_layout(IMAGE)
    network = NetworkSettings(hidden_units=8, vis_encode_type="resnet")
    first = layout.encoder(network, torch.Generator().manual_seed(5))
    torch.manual_seed(123)  # torch's global generator has no say
    second = layout.encoder(network, torch.Generator().manual_seed(5))
    assert first is not None and second is not None
    for (name, a), (_, b) in zip(
        first.state_dict().items(), second.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert observation_layout(spaces.Box(-1, 1, (7,))).encoder(network, torch.Generator()) is None


def test_normalize_standardises_the_vectors_only() -> None:
    layout = observation_layout(spaces.Dict({"pixels": IMAGE, "v": spaces.Box(-9, 9, (2,))}))
    normalizer = layout.normalizer(enabled=True)
    assert isinstance(normalizer, VectorNormalizer) and normalizer.mean.shape == (2,)
    rows = torch.from_numpy(
        layout.rows(
            {
                "pixels": np.full((4, 24, 20, 3), 200, np.uint8),
                "v": np.array([[1, 10], [3, 20], [5, 30], [7, 40]], np.float32),
            }
        )
    )
    normalizer.update(rows)
    out = normalizer(rows)
    torch.testing.assert_close(out[:, :2].mean(0), torch.zeros(2), atol=1e-6, rtol=0)
    assert torch.equal(out[:, 2:], rows[:, 2:])
    images_only = observation_layout(IMAGE).normalizer(enabled=True)
    assert not images_only.enabled
    vectors = observation_layout(spaces.Box(-1, 1, (3,))).normalizer(enabled=True)
    assert type(vectors) is ObservationNormalizer and vectors.mean.shape == (3,)


def test_replay_buffer_keeps_uint8_images_as_bytes_and_gives_them_back_exactly() -> None:
    layout = observation_layout(DICT)
    replay = ReplayBuffer(50, layout.size, 2, byte_columns=layout.byte_size)
    plain = ReplayBuffer(50, layout.size, 2)
    obs, next_obs = layout.rows(dict_batch(10, 1)), layout.rows(dict_batch(10, 2))
    actions = np.arange(20, dtype=np.float32).reshape(10, 2)
    for buffer in (replay, plain):
        buffer.add(obs, actions, np.arange(10), next_obs, np.zeros(10))
    # float32 rows of the non-image part, bytes of the uint8 images: 4x less for those
    assert replay._rows.shape[1] == 2 * (layout.size - 1440) + 2 + 2
    assert replay._pixels.dtype == torch.uint8 and replay._pixels.shape == (50, 2 * 1440)
    got = replay.sample(64, np.random.default_rng(0))
    want = plain.sample(64, np.random.default_rng(0))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)

    restored = ReplayBuffer(50, layout.size, 2, byte_columns=layout.byte_size)
    restored.load_state_dict(replay.state_dict())
    again = restored.sample(64, np.random.default_rng(0))
    for a, b in zip(again, want, strict=True):
        assert torch.equal(a, b)
