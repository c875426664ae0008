"""``network_settings.vis_encode_type``: PPO and SAC on pixel CartPole with every encoder, Dict
observations end to end through the CLI, the exported ONNX policy against torch, the error for
an image below the encoder's minimum, and vector observations untouched by the key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import torch

from evtrain import Bus, StatsEvent, StatsReporter
from evtrain.export import onnx_policy
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from evtrain.trainers import (
    NetworkSettings,
    PPOTrainer,
    SACSettings,
    SACTrainer,
    make_vector_env,
)
from evtrain.trainers.networks.encoders import MIN_RESOLUTION, VisEncodeType
from evtrain.trainers.observations import VectorNormalizer
from tests.helpers import run_config
from tests.pixel_envs import (
    frames,
    input_shapes,
    options,
    torch_actions,
    trained_policy,
)
from tests.trainers.helpers import small_ppo, small_sac

KINDS: list[VisEncodeType] = ["simple", "nature_cnn", "resnet", "match3", "fully_connected"]


@pytest.mark.parametrize("trainer", ["ppo", "sac"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_encoder_trains_on_pixels_and_exports_the_image_input(
    tmp_path: Path, kind: VisEncodeType, trainer: str
) -> None:
    size = max(MIN_RESOLUTION[kind], 8)  # the encoder's minimum (8: the env's own)
    run = options(tmp_path, trainer, kind, "pixel_cartpole", size=size)
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(copy.deepcopy(run), bus)

    assert result.steps["Pixel"] == 64
    stats = recorder.of(StatsEvent)
    assert [e.step for e in stats] == [32, 64]
    assert ("Losses/Policy Loss" if trainer == "ppo" else "Losses/Q1 Loss") in stats[-1].values
    model = result.models["Pixel"]
    assert input_shapes(model) == [("obs", ["batch", size, size, 3])]
    # The ONNX file takes the images as the environment gives them (uint8 H x W x C) and
    # acts as the trained torch policy does.
    obs = frames(run["env_settings"]["env_kwargs"], 24)
    got, want = (
        onnx_policy(model, threads=1)(obs),
        torch_actions(trained_policy(run, tmp_path), obs),
    )
    if trainer == "ppo":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_dict_observations_train_through_the_cli_export_and_infer(tmp_path: Path) -> None:
    run = options(tmp_path, "ppo", "simple", "pixel_vector_cartpole")  # 40x40 images
    run["checkpoint_settings"] = {"run_id": "pixels", "results_dir": "."}
    result = run_config(tmp_path, run, name="pixels.yaml")
    assert result.returncode == 0, result.stderr
    model = tmp_path / "pixels" / "Pixel.onnx"
    assert input_shapes(model) == [("image", ["batch", 40, 40, 3]), ("vector", ["batch", 2])]

    run["checkpoint_settings"]["results_dir"] = str(tmp_path)
    policy = trained_policy(run, tmp_path)
    assert isinstance(policy.agent.normalizer, VectorNormalizer)  # type: ignore[union-attr]
    assert policy.agent.normalizer.count == 64  # type: ignore[union-attr]
    obs = frames({}, 24, vector=True)
    np.testing.assert_array_equal(onnx_policy(model, threads=1)(obs), torch_actions(policy, obs))

    # --inference runs the image-and-vector policy (in this process: the CLI's path is the same)
    run["checkpoint_settings"]["inference"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(run, bus)
    stats = recorder.of(StatsEvent)
    assert [e.step for e in stats] == [32, 64]
    assert all(e.values["Is Training"].aggregated_value == 0.0 for e in stats)


def test_sac_on_dict_observations_exports_both_inputs(tmp_path: Path) -> None:
    run = options(tmp_path, "sac", "resnet", "pixel_vector_cartpole", size=16)
    result = learn(copy.deepcopy(run))
    model = result.models["Pixel"]
    assert input_shapes(model) == [("image", ["batch", 16, 16, 3]), ("vector", ["batch", 2])]
    obs = frames({"size": 16, "continuous": True}, 24, vector=True)
    got = onnx_policy(model, threads=1)(obs)
    np.testing.assert_allclose(got, torch_actions(trained_policy(run, tmp_path), obs), atol=1e-5)
    assert got.shape == (24, 1) and np.all(np.abs(got) <= 1.0)


def test_an_image_below_the_encoder_minimum_is_exit_2_with_the_key_and_the_fix(
    tmp_path: Path,
) -> None:
    run = options(tmp_path, "ppo", "nature_cnn", "pixel_cartpole", size=24)
    run["checkpoint_settings"] = {"run_id": "small", "results_dir": "."}
    result = run_config(tmp_path, run, name="small.yaml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "evtrain: error: behaviors.Pixel.network_settings.vis_encode_type: 'nature_cnn' needs "
        "images of at least 36x36, the observation is 24x24 (shape (24, 24, 3), channels "
        "last); choose a vis_encode_type whose minimum fits (simple: 20x20, resnet: 15x15, "
        "match3: 5x5, fully_connected: 1x1) or give the environment larger images"
    )


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """``a`` and ``b`` are equal, tensors and all, down to every nested value."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("kind", ["nature_cnn", "match3"])
def test_vector_observations_ignore_vis_encode_type(bus: Bus, kind: VisEncodeType) -> None:
    """ML-Agents' meaning: no effect without images.  The same networks, draws and updates."""
    reporter = StatsReporter(bus, "Vector")
    network = NetworkSettings(hidden_units=16, num_layers=1, normalize=True)
    sac = SACSettings(batch_size=16, buffer_size=200, buffer_init_steps=10)
    cases = [
        (PPOTrainer, small_ppo(network_settings=network), "CartPole-v1", 3),
        (SACTrainer, small_sac(network_settings=network, hyperparameters=sac), "Pendulum-v1", 12),
    ]
    for trainer_cls, settings, env_id, advances in cases:
        states = []
        for vis in ("simple", kind):
            settings.network_settings = attrs.evolve(network, vis_encode_type=vis)
            trainer = trainer_cls("Vector", settings, make_vector_env(env_id, 2), reporter, seed=0)
            assert [n for n, _ in trainer.policy_module().named_modules() if "encoder" in n] == []
            for _ in range(advances):
                trainer.advance()
            states.append(trainer.state_dict())
            trainer.envs.close()
        assert_same(*states)
