"""NaN and infinity in training: real ``evtrain learn`` runs of PPO and SAC on environments that
return a NaN (or a reward that overflows the loss) at a chosen step
(``tests.probe_envs:poisoned``); and the refusal to write non-finite weights."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information
import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain import Bus, StatsReporter
from evtrain.errors import NonFiniteError
from evtrain.export import PolicyExporter
from evtrain.run.checkpoints.checkpoint import CheckpointManager, load_checkpoint
from evtrain.trainers.finite import SKIPPED_STAT, FiniteGuard, nonfinite_tensors
from tests.helpers import run_evtrain
from tests.probe_envs import count_steps_anew

FIX = (
    "expected finite numbers; the run stops, and nothing trained from it is saved. Check the "
    "environment and the hyperparameters, or set behaviors.{name}.on_nonfinite: skip to skip "
    "such updates"
)


def ppo(**env_kwargs: Any) -> dict[str, Any]:
    """PPO on 4 CartPoles, 128 steps a rollout, a checkpoint after each; the 300th
    environment step of the process is poisoned."""
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 2},
                "network_settings": {"hidden_units": 32},
                "max_steps": 512,
                "time_horizon": 32,
                "summary_freq": 256,
                "checkpoint_interval": 128,
                "keep_checkpoints": 10,
            }
        },
        "env_settings": {
            "env_id": "tests.probe_envs:poisoned",
            "env_kwargs": {"at": 300, **env_kwargs},
            "num_envs": 4,
            "seed": 3,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
    }


def sac(**env_kwargs: Any) -> dict[str, Any]:
    """SAC on 2 Pendulums, learning after 100 random steps, a checkpoint every 100 steps; the
    300th environment step of the process is poisoned."""
    return {
        "behaviors": {
            "Pendulum": {
                "trainer_type": "sac",
                "hyperparameters": {
                    "batch_size": 32,
                    "buffer_size": 2000,
                    "buffer_init_steps": 100,
                    "save_replay_buffer": True,
                },
                "network_settings": {"hidden_units": 16, "num_layers": 1},
                "max_steps": 400,
                "summary_freq": 200,
                "checkpoint_interval": 100,
                "keep_checkpoints": 10,
            }
        },
        "env_settings": {
            "env_id": "tests.probe_envs:poisoned",
            "env_kwargs": {"env_id": "Pendulum-v1", "at": 300, **env_kwargs},
            "num_envs": 2,
            "seed": 3,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
    }


def learn(tmp_path: Path, config: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    """``evtrain FLAGS learn`` of ``config``, in this process: its poisoned environment counts
    the steps from zero, as in a process of the run's own."""
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    count_steps_anew()
    return run_evtrain(*flags, "learn", "run.yaml", cwd=tmp_path)


def assert_every_file_finite(run: Path, name: str) -> list[int]:
    """Every checkpoint and ONNX on disk has finite weights; returns the checkpoints' steps."""
    steps = []
    for pt in sorted((run / name).glob("*.pt")):
        assert nonfinite_tensors(load_checkpoint(pt)) == [], pt
        steps.append(load_checkpoint(pt)["step"])
    import onnx
    from onnx import numpy_helper

    for path in (run / name).glob("*.onnx"):
        for initializer in onnx.load(str(path)).graph.initializer:
            assert np.isfinite(numpy_helper.to_array(initializer)).all(), path
    return steps


@pytest.mark.parametrize(
    ("config", "quantity", "step"),
    [
        (ppo(), "reward", 296),
        (ppo(what="observation"), "observation", 296),
        (ppo(value=3e38), "loss", 384),  # finite, but its return squared is not
        (sac(), "reward", 298),
        (sac(value=3e38), "loss", 302),
    ],
    ids=["ppo-reward", "ppo-observation", "ppo-loss", "sac-reward", "sac-loss"],
)
def test_a_non_finite_number_stops_the_run_with_one_line_naming_it(
    tmp_path: Path, config: dict[str, Any], quantity: str, step: int
) -> None:
    [name] = config["behaviors"]
    result = learn(tmp_path, config)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"evtrain: error: behavior {name}: non-finite {quantity} (NaN or infinity) at step "
        f"{step}, " + FIX.format(name=name)
    )
    run = tmp_path / "results" / "run"
    # The checkpoints before it are on disk, whole and finite; no final save after it.
    steps = assert_every_file_finite(run, name)
    assert steps and max(steps) < step
    assert not (run / f"{name}.onnx").exists()


def test_debug_shows_the_traceback_of_a_non_finite_number(tmp_path: Path) -> None:
    result = learn(tmp_path, ppo(), "--debug")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "evtrain.errors.NonFiniteError: behavior CartPole: non-finite reward" in result.stderr


def scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [(s.step, s.value) for s in accumulator.Scalars(tag)]


@pytest.mark.parametrize(
    ("config", "end", "first", "skipped"),
    [
        (ppo(), 512, "reward at step 296", 1.0),
        (ppo(value=3e38), 512, "loss at step 384", 4.0),  # the update's 4 gradient steps
        (sac(), 400, "reward at step 298", 1.0),
    ],
    ids=["ppo-reward", "ppo-loss", "sac-reward"],
)
def test_on_nonfinite_skip_skips_the_update_counts_it_and_trains_on(
    tmp_path: Path, config: dict[str, Any], end: int, first: str, skipped: float
) -> None:
    [name] = config["behaviors"]
    config["behaviors"][name]["on_nonfinite"] = "skip"
    result = learn(tmp_path, config)
    assert result.returncode == 0, result.stderr
    assert "nan" not in result.stderr.lower().replace("non-finite", "")
    assert (
        f"[WARNING] behavior {name}: non-finite {first}; skipping it (on_nonfinite: skip), "
        f"counted in {SKIPPED_STAT}" in result.stderr.splitlines()
    )
    run = tmp_path / "results" / "run"
    assert scalars(run / name, SKIPPED_STAT) == [(end, skipped)]
    assert all(np.isfinite(v) for _, v in scalars(run / name, "Losses/Policy Loss"))
    assert max(assert_every_file_finite(run, name)) == end
    if name == "CartPole":  # 4 rollouts x 2 epochs x 2 minibatches, one update skipped
        optimizer = load_checkpoint(run / name / "checkpoint.pt")["optimizer"]
        assert int(optimizer["state"][0]["step"]) == 12
    if name == "Pendulum":  # the replay buffer holds every transition but the skipped ones
        replay = load_checkpoint(run / name / "checkpoint.pt")["replay_buffer"]
        # the poisoned one, and the same environment's next, from the zeroed observation
        assert replay["size"] == end - 2
        assert all(torch.isfinite(t).all() for t in replay.values() if torch.is_tensor(t))
    session = ort.InferenceSession(str(run / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    size = 4 if name == "CartPole" else 3
    actions = session.run(None, {"obs": np.zeros((2, size), dtype=np.float32)})[0]
    assert np.isfinite(actions).all()


def test_no_checkpoint_or_export_with_non_finite_weights_is_written(tmp_path: Path) -> None:
    policy = torch.nn.Linear(3, 2)
    with torch.no_grad():
        policy.weight[0, 1] = float("nan")
        policy.bias[1] = float("inf")
    state = {"step": 7, "agent": policy.state_dict(), "replay_buffer": {"obs": torch.ones(2)}}
    manager = CheckpointManager(tmp_path, "B")
    with pytest.raises(NonFiniteError) as caught:
        manager.save(7, state, policy, example_obs=np.zeros((1, 3), dtype=np.float32))
    assert str(caught.value) == (
        "behavior B: non-finite weights (NaN or infinity) at step 7, expected finite numbers; "
        "found in agent.weight, agent.bias, weight and 1 more; this checkpoint and its export "
        "were not written, the last one on disk is kept"
    )
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
    with pytest.raises(ValueError, match=r"^the policy's weight, bias hold NaN or infinity"):
        PolicyExporter().export(policy, np.zeros((1, 3), dtype=np.float32), tmp_path / "p.onnx")
    assert not (tmp_path / "p.onnx").exists()


def test_a_non_finite_gradient_with_a_finite_loss_is_named_as_the_gradient(bus: Bus) -> None:
    nan = torch.tensor(float("nan"))
    stop = FiniteGuard("B", "stop", StatsReporter(bus, "B"))
    assert stop.update(5, torch.tensor([1.0, 2.0]), torch.tensor(0.5))
    assert stop.update(5, torch.tensor([1.0, 2.0]), nan)  # checked once per update
    with pytest.raises(NonFiniteError, match=r"^behavior B: non-finite gradient \(NaN or infin"):
        stop.check_updates(6)
    stop.check_updates(7)  # each update is checked once
    reporter = StatsReporter(bus, "B")
    skip = FiniteGuard("B", "skip", reporter)
    assert not skip.update(5, torch.tensor(1.0), nan)
    assert not skip.update(5, torch.tensor(float("inf")), torch.tensor(1.0))
    assert skip.update(5, torch.tensor(1.0), torch.tensor(1.0))
    assert reporter.get_stats_summaries(SKIPPED_STAT).aggregated_value == 2.0


def test_a_step_of_large_finite_numbers_is_finite_and_a_nan_is_found_among_them(
    bus: Bus,
) -> None:
    """Each step's rewards and observations are checked whole first, then row by row."""
    guard = FiniteGuard("B", "skip", StatsReporter(bus, "B"))
    rewards = np.full(3, 3e38, dtype=np.float32)
    observations = np.full((3, 2), 3e38, dtype=np.float32)
    assert guard.step(1, rewards, observations).tolist() == [True, True, True]
    observations[1, 0] = np.nan
    assert guard.step(2, rewards, observations).tolist() == [True, False, True]
    assert guard.step(3, rewards.astype(np.float64), np.ones((3, 2))).tolist() == [True] * 3
    rewards[2] = -np.inf
    assert guard.step(4, rewards, np.ones((3, 2), dtype=np.float32)).tolist() == [
        True,
        True,
        False,
    ]
