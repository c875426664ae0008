"""Self-play through ``evtrain learn`` on real PettingZoo games: ELO written to the run's stats
files, kept in the checkpoint and by ``--resume``, the exported policy run in onnxruntime, and
the environments self-play refuses, each in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest
import torch

from evtrain.trainers.ghost import ELO
from tests.helpers import run_config, tictactoe_self_play


def self_play_options(max_steps: int, **env: Any) -> dict[str, Any]:
    """PPO with small self-play periods on tic-tac-toe (both players behavior ``player``, one
    team each): a snapshot and a draw every 256 steps, the other team every 768."""
    return tictactoe_self_play(
        max_steps, {"save_steps": 256, "team_change": 768, "swap_steps": 256}, **env
    )


def elo_summaries(folder: Path) -> dict[int, dict[str, Any]]:
    """``Self-play/ELO`` of each summary in the behavior's ``stats.jsonl``, by step."""
    lines = [json.loads(line) for line in (folder / "stats.jsonl").read_text().splitlines()]
    return {line["step"]: line["stats"][ELO] for line in lines if ELO in line.get("stats", {})}


def saved_self_play(folder: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(folder / "checkpoint.pt", weights_only=True)
    saved: dict[str, Any] = state["attachments"]["self_play"]
    return saved


# PettingZoo's own notice about its ``module:env`` creation (the command prints it, and goes on)
@pytest.mark.filterwarnings("ignore:The old environment creation API:DeprecationWarning")
def test_cli_self_play_moves_elo_keeps_it_on_resume_and_exports_the_policy(
    tmp_path: Path,
) -> None:
    result = run_config(tmp_path, self_play_options(2048))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "results" / "run" / "player"
    summaries = elo_summaries(folder)
    assert sorted(summaries) == [512, 1024, 1536, 2048]
    assert all(s["num"] > 0 for s in summaries.values())  # a rating per episode
    assert {s["mean"] for s in summaries.values()} != {1200.0}  # it moves
    saved = saved_self_play(folder)
    elo = saved["window"]["elo"]
    assert elo != 1200.0
    # the first (step 0) and one per 256 steps
    assert len(saved["window"]["snapshots"]) == 9 and len(saved["window"]["elos"]) == 9
    assert saved["learning_team"] in (0, 1) and saved["last_team_change"] == 1536
    team = saved["learning_team"]

    session = onnxruntime.InferenceSession(
        str(tmp_path / "results" / "run" / "player.onnx"), providers=["CPUExecutionProvider"]
    )
    inputs = {
        "action_mask": np.ones((5, 9), np.float32),
        "observation": np.zeros((5, 3, 3, 2), np.float32),
    }
    assert {i.name for i in session.get_inputs()} == set(inputs)
    actions = session.run(None, inputs)[0]
    assert actions.shape == (5,) and set(actions.tolist()) <= set(range(9))

    result = run_config(tmp_path, self_play_options(3072), "--resume")
    assert result.returncode == 0, result.stderr
    resumed = f"player: self-play resumes at ELO {elo:.3f}, 9 snapshot(s), team {team} learning"
    assert resumed in result.stdout + result.stderr
    after = elo_summaries(folder)
    assert sorted(after) == [512, 1024, 1536, 2048, 2560, 3072]
    assert saved_self_play(folder)["window"]["elo"] != elo  # and it keeps moving


def test_cli_self_play_needs_two_teams_of_a_multi_agent_environment(tmp_path: Path) -> None:
    options = self_play_options(512, env_id="CartPole-v1")
    options["behaviors"] = {"CartPole": options["behaviors"]["player"]}
    result = run_config(tmp_path, options)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: behaviors.CartPole.self_play: self-play needs a multi-agent "
        "(PettingZoo) environment whose agents of behavior 'CartPole' form two teams; this "
        "environment has one agent (a Gymnasium environment): remove self_play, or train a "
        "PettingZoo environment\n",
    )
    options = self_play_options(512, env_id="mpe2.simple_spread_v3:parallel_env")
    options["behaviors"] = {"agent": options["behaviors"]["player"]}
    result = run_config(tmp_path, options)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: behaviors.agent.self_play: the self-playing agents of the environment "
        "form 3 team(s) (team 0: agent, team 1: agent, team 2: agent); evtrain's self-play "
        "plays exactly two teams against each other (ML-Agents' ELO rates two): with "
        "env_settings.agent_behaviors, make them two teams of the behavior ('agent?team=0', "
        "'agent?team=1'), or a team of it against a team of another behavior with self_play "
        "('agent?team=0', '<other>?team=1'); or remove self_play\n",
    )
