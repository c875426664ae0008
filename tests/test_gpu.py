"""The GPU path: PPO and SAC trained on CUDA through the real CLI (``--torch-device cuda``),
with Box and Discrete actions, with memory (an LSTM) and with an image encoder; checkpoints
carried from CUDA to the CPU and back with ``--resume``; and each exported ONNX policy
against torch's on both devices.

Marked ``gpu``, and skipped, saying why, where torch has no CUDA: nothing in CI needs a GPU.
``pytest -m gpu`` runs these alone; ``benchmarks/gpu_check.sh`` runs them and
``benchmarks/bench_gpu.py`` on a CUDA machine in one command.

The device trained on is read from ``EVTRAIN_TEST_ACCELERATOR`` (default ``cuda``; any torch
device string, e.g. ``cuda:1``).  ``EVTRAIN_TEST_ACCELERATOR=cpu`` runs every step of the
module on a machine without a GPU (the "accelerator" is then the CPU too, so a tensor on the
wrong device cannot show, but everything else the tests do runs): how the module was checked
where it was written, which had no GPU::

    EVTRAIN_TEST_ACCELERATOR=cpu python -m pytest -m gpu tests/test_gpu.py
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from evtrain import Bus, RunOptions, StatsReporter
from evtrain.export import memory_size_of, onnx_policy
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.environments.envs import make_envs
from evtrain.trainers import PPOTrainer, SACTrainer, Trainer
from evtrain.trainers.networks.encoders import MIN_RESOLUTION
from tests.helpers import ROOT, clean_env, python, tensorboard_steps

ACCELERATOR = os.environ.get("EVTRAIN_TEST_ACCELERATOR", "cuda")
"""The device the runs train on (``EVTRAIN_TEST_ACCELERATOR``)."""


def _unavailable() -> str | None:
    """Why :data:`ACCELERATOR` cannot be used here, or ``None`` when it can."""
    device = torch.device(ACCELERATOR)
    if device.type == "cuda" and not torch.cuda.is_available():
        return (
            f"no CUDA device for torch {torch.__version__} (EVTRAIN_TEST_ACCELERATOR="
            f"{ACCELERATOR}; set it to cpu to run these paths on the CPU)"
        )
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        return f"{ACCELERATOR} is past the {torch.cuda.device_count()} CUDA device(s) here"
    return None


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable())),
]

BEHAVIOR = "Agent"
STEPS = 128
"""Environment steps of one run (2 environments): PPO 2 updates, SAC 24 gradient steps."""
TRAINERS: dict[str, type[Trainer]] = {"ppo": PPOTrainer, "sac": SACTrainer}
MEMORY = {"memory_size": 16, "sequence_length": 8}
IMAGE = MIN_RESOLUTION["nature_cnn"]
CASES: dict[str, dict[str, dict[str, Any]]] = {
    # case: {trainer: environment and network}
    "box": {
        "ppo": {"env_id": "Pendulum-v1"},
        "sac": {"env_id": "Pendulum-v1"},
    },
    "discrete": {
        "ppo": {"env_id": "CartPole-v1"},
        "sac": {"env_id": "CartPole-v1"},
    },
    "memory": {
        "ppo": {"env_id": "tests.memory_envs:masked_cartpole", "network": {"memory": MEMORY}},
        "sac": {"env_id": "Pendulum-v1", "network": {"memory": MEMORY}},
    },
    "image": {
        "ppo": {
            "env_id": "tests.pixel_envs:pixel_cartpole",
            "env_kwargs": {"size": IMAGE},
            "network": {"vis_encode_type": "nature_cnn"},
        },
        "sac": {
            "env_id": "tests.pixel_envs:pixel_cartpole",
            "env_kwargs": {"size": IMAGE, "continuous": True},
            "network": {"vis_encode_type": "nature_cnn"},
        },
    },
}


@pytest.fixture(autouse=True)
def full_precision() -> Iterator[None]:
    """torch's own answers in float32 on CUDA too (TF32 convolutions would differ from
    onnxruntime's by ~1e-3, enough to tip an argmax between near-equal logits)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def options(tmp_path: Path, trainer: str, case: str, max_steps: int = STEPS) -> dict[str, Any]:
    """A run of 2 environments, a summary every 64 steps and a checkpoint at the end, tiny
    networks."""
    env = CASES[case][trainer]
    if trainer == "ppo":
        hyperparameters: dict[str, Any] = {"batch_size": 32, "buffer_size": 64, "num_epoch": 2}
    else:
        hyperparameters = {
            "batch_size": 16,
            "buffer_size": 1000,
            "buffer_init_steps": 32,
            "steps_per_update": 4,
            "save_replay_buffer": True,
        }
    network = {"hidden_units": 16, "num_layers": 1, "normalize": True, **env.get("network", {})}
    return {
        "behaviors": {
            BEHAVIOR: {
                "trainer_type": trainer,
                "hyperparameters": hyperparameters,
                "network_settings": network,
                "max_steps": max_steps,
                "time_horizon": 16,
                "summary_freq": 64,
                "checkpoint_interval": STEPS,
            }
        },
        "env_settings": {
            "env_id": env["env_id"],
            "env_kwargs": env.get("env_kwargs", {}),
            "num_envs": 2,
            "seed": 1,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }


def learn_cli(tmp_path: Path, run: dict[str, Any], device: str, *args: str) -> Path:
    """``evtrain learn run.yaml --torch-device device ARGS`` in a subprocess that imports this
    checkout and ``tests``; the run folder."""
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    path = os.pathsep.join(str(p) for p in (ROOT / "src", ROOT / "writers", ROOT))
    result = python(
        "-m",
        "evtrain",
        "learn",
        "run.yaml",
        "--torch-device",
        device,
        *args,
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=path),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / "results" / "run"


def checkpoint(run: Path) -> dict[str, Any]:
    """``checkpoint.pt`` read as anyone would, with no ``map_location``: it must hold CPU
    tensors only, wherever it was trained."""
    state: dict[str, Any] = torch.load(run / BEHAVIOR / "checkpoint.pt", weights_only=True)
    devices = {t.device.type for t in _tensors(state)}
    assert devices == {"cpu"}
    return state


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def updates(state: dict[str, Any]) -> int:
    """Gradient steps the state has taken: Adam's step count of PPO's one optimizer, SAC's
    update count."""
    if state["trainer_type"] == "sac":
        return int(state["num_updates"])
    return int(state["optimizer"]["state"][0]["step"])


def policy_on(run: dict[str, Any], state: dict[str, Any], device: str) -> torch.nn.Module:
    """The policy of ``state`` in a trainer built afresh on ``device``."""
    run_options = RunOptions.from_dict(copy.deepcopy(run))
    settings = run_options.behaviors[BEHAVIOR]
    with Bus() as bus:
        trainer = TRAINERS[settings.trainer_type](
            BEHAVIOR,
            settings,
            make_envs(run_options.env_settings),
            StatsReporter(bus, BEHAVIOR),
            seed=0,
            device=device,
        )
    trainer.load_weights(state)
    trainer.envs.close()
    # the view's own buffers (action bounds) are made on the CPU, as begin_inference knows
    policy: torch.nn.Module = trainer.policy_module().to(device).eval()
    return policy


def assert_export_matches_torch(run_folder: Path, run: dict[str, Any], device: str) -> None:
    """The run's final ``.onnx`` answers as its checkpoint's policy does in torch on
    ``device``, for two steps of a batch of 8 observations (a recurrent policy's second step
    from the memory of its first)."""
    policy = policy_on(run, load_checkpoint(run_folder / BEHAVIOR / "checkpoint.pt"), device)
    exported = onnx_policy(run_folder / f"{BEHAVIOR}.onnx", threads=1)
    envs = make_envs(RunOptions.from_dict(copy.deepcopy(run)).env_settings)
    space = envs.single_observation_space
    envs.close()
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(8)])
    x = torch.as_tensor(obs, dtype=torch.float32, device=device)
    memory = torch.zeros((len(obs), memory_size_of(policy)), device=device)
    for _ in range(2):
        with torch.no_grad():
            out = policy(x, memory) if memory.shape[1] else policy(x)
        want, memory = out if isinstance(out, tuple) else (out, memory)
        got, expected = exported(obs), want.cpu().numpy()
        if np.issubdtype(expected.dtype, np.integer):
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_trains_on_the_accelerator_and_exports_what_torch_computes_on_both_devices(
    tmp_path: Path, case: str, trainer: str
) -> None:
    run = options(tmp_path, trainer, case)
    folder = learn_cli(tmp_path, run, ACCELERATOR)

    state = checkpoint(folder)
    assert (state["step"], state["generator_device"]) == (STEPS, torch.device(ACCELERATOR).type)
    assert updates(state) >= 2
    assert tensorboard_steps(folder / BEHAVIOR, "Policy/Learning Rate") == [64, 128]
    for device in (ACCELERATOR, "cpu"):
        assert_export_matches_torch(folder, run, device)


RESUMED = [("ppo", "memory"), ("sac", "memory"), ("sac", "image")]


@pytest.mark.parametrize(("trainer", "case"), RESUMED)
def test_resumes_on_the_cpu_from_an_accelerator_checkpoint_and_back(
    tmp_path: Path, trainer: str, case: str
) -> None:
    folder = learn_cli(tmp_path, options(tmp_path, trainer, case), ACCELERATOR)
    first = checkpoint(folder)

    learn_cli(tmp_path, options(tmp_path, trainer, case, 2 * STEPS), "cpu", "--resume")
    second = checkpoint(folder)
    assert (second["step"], second["generator_device"]) == (2 * STEPS, "cpu")
    assert updates(second) > updates(first)  # the optimizer's state came along, and went on

    run = options(tmp_path, trainer, case, 3 * STEPS)
    learn_cli(tmp_path, run, ACCELERATOR, "--resume")
    third = checkpoint(folder)
    assert third["step"] == 3 * STEPS
    assert third["generator_device"] == torch.device(ACCELERATOR).type
    assert updates(third) > updates(second)
    if trainer == "sac":  # the replay buffer went along both ways
        assert int(third["replay_buffer"]["size"]) > int(second["replay_buffer"]["size"])
    # every summary once, across the three processes on two devices
    steps = tensorboard_steps(folder / BEHAVIOR, "Policy/Learning Rate")
    assert steps == list(range(64, 3 * STEPS + 1, 64))
    for device in (ACCELERATOR, "cpu"):
        assert_export_matches_torch(folder, run, device)
