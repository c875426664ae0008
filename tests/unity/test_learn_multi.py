"""``evtrain learn`` trains every behavior of the stand-in's multi-behavior build in one run:
``Striker?team=0`` against ``Striker?team=1`` with self-play (its ELO written and moving), and
``Coop``'s two groups of three with POCA (its group reward written)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import free_port, run_cli
from tests.standin import make_build

STEPS = 768
"""Each behavior's: about 75 of the duel's 10-step games, 30 of the groups' episodes."""
HYPERPARAMETERS = {"batch_size": 32, "buffer_size": 128, "learning_rate": 0.003, "num_epoch": 3}


def behavior(trainer_type: str, **more: Any) -> dict[str, Any]:
    return {
        "trainer_type": trainer_type,
        "hyperparameters": HYPERPARAMETERS,
        "network_settings": {"hidden_units": 32, "num_layers": 1},
        "reward_signals": {"extrinsic": {"gamma": 0.99}},
        "max_steps": STEPS,
        "time_horizon": 16,
        "summary_freq": 128,
        **more,
    }


SELF_PLAY = {"save_steps": 128, "team_change": 256, "swap_steps": 64, "window": 5}


def progress(run: Path, name: str) -> list[dict[str, str]]:
    with (run / name / "progress.csv").open() as f:
        return list(csv.DictReader(f))


def test_the_multi_behavior_build_trains_self_play_and_poca_in_one_run(tmp_path: Path) -> None:
    build = make_build(tmp_path / "builds", "multi")
    data = {
        "behaviors": {
            "Striker": behavior("ppo", self_play=SELF_PLAY),
            "Coop": behavior("poca"),
        },
        "env_settings": {"env_path": str(build), "base_port": free_port(), "seed": 1},
        "checkpoint_settings": {"run_id": "multi", "results_dir": str(tmp_path / "results")},
        "writers": {"csv": {}},
    }
    (tmp_path / "multi.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("multi.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "multi"
    assert (run / "Striker.onnx").exists() and (run / "Coop.onnx").exists()
    striker, coop = progress(run, "Striker"), progress(run, "Coop")
    assert float(striker[-1]["Step"]) >= STEPS and float(coop[-1]["Step"]) >= STEPS
    elo = [float(row["Self-play/ELO"]) for row in striker if row["Self-play/ELO"]]
    assert len(set(elo)) > 1, elo  # episodes ended with results, and the ratings moved
    group = [row["Environment/Group Cumulative Reward"] for row in coop]
    assert group and all(value != "" for value in group)
    assert "Self-play/ELO" not in coop[0]
