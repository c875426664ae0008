"""examples/openings.py: tic-tac-toe games begun by up to two random moves, on PettingZoo's own
rules, which a self-play config trains on."""

from __future__ import annotations

import importlib
import json
from collections import Counter
from pathlib import Path

import numpy as np

from tests.helpers import run_config, tictactoe_self_play

# Imported by its name, as a config names it (examples.openings:tictactoe).
openings = importlib.import_module("examples.openings")


def test_a_game_begins_with_zero_one_or_two_random_legal_moves_as_weighted() -> None:
    env = openings.tictactoe()
    counts: Counter[int] = Counter()
    cells: Counter[int] = Counter()
    for seed in range(2000):
        env.reset(seed=seed)
        agent = env.agent_selection
        board = np.asarray(env.observe(agent)["observation"]).reshape(9, 2)
        moves = int(board.sum())
        counts[moves] += 1
        # the mover's turn follows: the first player after 0 or 2 moves, the second after 1
        assert agent == env.possible_agents[moves % 2]
        assert env.observe(agent)["action_mask"].sum() == 9 - moves
        if moves == 1:
            cells[int(np.flatnonzero(board.any(axis=1))[0])] += 1
    for moves, weight in zip(openings.OPENING_MOVES, openings.OPENING_WEIGHTS, strict=True):
        assert abs(counts[moves] / 2000 - weight) < 0.04
    assert sorted(cells) == list(range(9))  # an opening on every cell, edges included


def test_the_same_seed_opens_the_same_way_and_the_game_plays_to_pettingzoos_end() -> None:
    first, second = openings.tictactoe(), openings.tictactoe()
    for seed in (3, 4, 5):
        first.reset(seed=seed)
        second.reset(seed=seed)
        agent = first.agent_selection
        assert np.array_equal(
            first.observe(agent)["observation"], second.observe(agent)["observation"]
        )
    rng = np.random.default_rng(0)
    returns = dict.fromkeys(first.possible_agents, 0.0)
    for agent in first.agent_iter():
        obs, reward, terminated, truncated, _ = first.last()
        returns[agent] += reward
        first.step(
            None if terminated or truncated else int(rng.choice(np.flatnonzero(obs["action_mask"])))
        )
    assert sorted(returns.values()) in ([-1.0, 1.0], [0.0, 0.0])  # PettingZoo's rewards


def test_openings_false_is_the_plain_game() -> None:
    env = openings.tictactoe(openings=False)
    assert not isinstance(env, openings.RandomOpenings)
    for seed in range(20):
        env.reset(seed=seed)
        assert env.agent_selection == env.possible_agents[0]
        assert env.observe(env.agent_selection)["action_mask"].sum() == 9


def test_self_play_trains_on_it_through_the_cli(tmp_path: Path) -> None:
    options = tictactoe_self_play(
        512,
        {"save_steps": 128, "team_change": 256, "swap_steps": 128},
        env_id="examples.openings:tictactoe",
    )
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    assert (run / "player.onnx").exists()
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    assert status["player"]["final_checkpoint"]["steps"] >= 512
