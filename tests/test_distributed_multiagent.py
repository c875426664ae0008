"""A PettingZoo environment under a real ``torchrun``: 2 processes, gloo, CPU, each rank
stepping its own copies of ``mpe2.simple_spread_v3`` (one behavior, three agent slots per
copy), rank 0 writing.  The launcher and the probe trainer are those of
``tests/test_distributed.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information

from evtrain.run.checkpoints.checkpoint import load_checkpoint
from tests.torchrun_runs import tensorboard_points, torchrun

SPREAD = {
    "env_id": "mpe2.simple_spread_v3:parallel_env",
    "env_kwargs": {"max_cycles": 10},
    # the launcher's behavior is "Agent": simple_spread's agents are agent_0, agent_1, agent_2
    "agent_behaviors": {f"agent_{i}": "Agent" for i in range(3)},
    "num_envs": 2,
    "seed": 3,
}


def spread_ppo() -> dict[str, Any]:
    """2 ranks x 2 copies x 3 slots x 8 steps: 96 global steps per update; an episode every
    10 steps of a copy, so each summary period ends episodes on both ranks."""
    return {
        "trainer_type": "probe_ppo",
        "hyperparameters": {"batch_size": 24, "buffer_size": 48, "num_epoch": 1},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": 384,
        "time_horizon": 8,
        "summary_freq": 192,
        "checkpoint_interval": 384,
    }


def test_simple_spread_on_two_ranks(tmp_path: Path) -> None:
    run = torchrun(tmp_path, spread_ppo(), SPREAD)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    rank0, rank1 = run.trainer(0), run.trainer(1)
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["checksum"] == rank1["checksum"]
    assert rank0["local_step"] == rank1["local_step"] == 192
    assert rank0["step"] == rank1["step"] == 384
    # each rank's copies play episodes of their own: at 32 steps of a copy, 3 of each slot;
    # rank 0 reports both ranks' episodes
    assert rank0["episodes"] == rank1["episodes"] == 2 * 3 * 3
    reported = [e for e in run.events(0) if e["signal"] == "stats"]
    assert [e["step"] for e in reported] == [192, 384]
    assert sum(e["episodes"] for e in reported) == rank0["episodes"] + rank1["episodes"]
    # rank 0 alone saves and exports: one ONNX file for the behavior, one TensorBoard file
    folder = run.run
    written = [e for e in run.events(0) if e["signal"] in ("save", "export")]
    assert [(e["signal"], e["step"], e["path"]) for e in written] == [
        ("save", 384, str(folder / "Agent" / "Agent-384.pt")),
        ("export", 384, str(folder / "Agent" / "Agent-384.onnx")),
        ("export", 384, str(folder / "Agent.onnx")),
    ]
    assert not [e for e in run.events(1) if e["signal"] in ("save", "export")]
    assert sorted(p.name for p in folder.glob("*.onnx")) == ["Agent.onnx"]
    assert load_checkpoint(folder / "Agent" / "checkpoint.pt")["step"] == 384
    assert len(list((folder / "Agent").glob("events.out.tfevents.*"))) == 1
    points = tensorboard_points(folder / "Agent")
    assert max(points.values()) == 1
    steps = sorted(step for tag, step in points if tag == "Environment/Cumulative Reward")
    assert steps == [192, 384]
    session = onnxruntime.InferenceSession(
        str(folder / "Agent.onnx"), providers=["CPUExecutionProvider"]
    )
    actions = session.run(None, {"obs": np.zeros((6, 18), dtype=np.float32)})[0]
    assert actions.shape == (6,) and set(actions.tolist()) <= set(range(5))
