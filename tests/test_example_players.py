"""examples/players.py's scripted players, checked against the real PettingZoo games: the
perfect tic-tac-toe player never loses, the illegal one always does, the one-ply connect four
player wins at once and blocks when it can, the two-ply one also never opens a win on top."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

# Imported by its name, as a config names it (examples.players:...); mypy checks the file as
# the top-level module "players", and one file may not be two modules to it.
players = importlib.import_module("examples.players")
connect_four_one_ply = players.connect_four_one_ply
optimal_moves = players.optimal_moves
tictactoe_illegal = players.tictactoe_illegal
tictactoe_perfect = players.tictactoe_perfect

Player = Callable[[Any, Any], int]


def random_player(rng: np.random.Generator) -> Player:
    def play(observation: Any, action_mask: Any) -> int:
        return int(rng.choice(np.flatnonzero(action_mask)))

    return play


def play(env: Any, first: Player, second: Player, seed: int) -> tuple[float, float]:
    """One game of the AEC ``env`` from ``reset(seed=seed)``: each player's return."""
    random.seed(seed)  # the scripted players' draws
    env.reset(seed=seed)
    players = dict(zip(env.possible_agents, (first, second), strict=True))
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        totals[agent] += float(reward)
        move = None if terminated or truncated else players[agent](*obs.values())
        env.step(move)
    return totals[env.possible_agents[0]], totals[env.possible_agents[1]]


def tictactoe() -> Any:
    import pettingzoo

    return pettingzoo.make("aec", "classic/tictactoe-v3")


def connect_four() -> Any:
    import pettingzoo

    return pettingzoo.make("aec", "classic/connect_four-v3")


def test_the_perfect_player_never_loses_to_random_in_either_seat() -> None:
    env = tictactoe()
    rng = np.random.default_rng(0)
    results = []
    for seed in range(150):
        mine, _ = play(env, tictactoe_perfect, random_player(rng), seed)
        _, mine_second = play(env, random_player(rng), tictactoe_perfect, seed)
        results += [mine, mine_second]
    assert min(results) == 0.0  # draws at worst
    assert results.count(1.0) > 200  # and wins most games: random errs


def test_two_perfect_players_always_draw() -> None:
    env = tictactoe()
    assert {play(env, tictactoe_perfect, tictactoe_perfect, seed) for seed in range(30)} == {
        (0.0, 0.0)
    }


def test_the_perfect_player_chooses_among_every_optimal_move() -> None:
    """On the empty board every move draws: all nine are optimal; after a corner, only the
    centre holds the draw."""
    assert optimal_moves((0,) * 9) == list(range(9))
    assert optimal_moves((2, 0, 0, 0, 0, 0, 0, 0, 0)) == [4]
    empty = np.zeros((3, 3, 2), dtype=np.int8)
    random.seed(1)
    assert len({tictactoe_perfect(empty, np.ones(9)) for _ in range(200)}) == 9


@pytest.mark.parametrize("seat", [0, 1])
def test_the_illegal_player_always_loses(seat: int) -> None:
    env = tictactoe()
    rng = np.random.default_rng(1)
    for seed in range(20):
        players = [tictactoe_illegal, random_player(rng)]
        if seat:
            players.reverse()
        returns = play(env, players[0], players[1], seed)
        assert returns[seat] == -1.0
        assert returns[1 - seat] == 0.0  # PettingZoo: the other player neither wins nor loses


def position(moves: list[int]) -> Any:
    """Connect four after ``moves`` (columns, players alternating from the first)."""
    env = connect_four()
    env.reset(seed=0)
    for move in moves:
        env.step(move)
    return env


def test_the_one_ply_player_wins_at_once_when_it_can() -> None:
    env = position([3, 0, 3, 0, 3, 6])  # first player: three in column 3
    obs = env.observe(env.agent_selection)
    random.seed(0)
    assert connect_four_one_ply(obs["observation"], obs["action_mask"]) == 3


def test_the_one_ply_player_blocks_the_opponents_win() -> None:
    env = position([0, 2, 6, 2, 6, 2])  # second player: three in column 2
    obs = env.observe(env.agent_selection)
    for seed in range(5):
        random.seed(seed)
        assert connect_four_one_ply(obs["observation"], obs["action_mask"]) == 2


def test_the_one_ply_player_beats_random() -> None:
    env = connect_four()
    rng = np.random.default_rng(2)
    results = [play(env, connect_four_one_ply, random_player(rng), seed)[0] for seed in range(25)]
    results += [play(env, random_player(rng), connect_four_one_ply, seed)[1] for seed in range(25)]
    assert results.count(1.0) >= 45


connect_four_two_ply = players.connect_four_two_ply


def test_the_two_ply_player_wins_and_blocks_as_the_one_ply_does() -> None:
    env = position([3, 0, 3, 0, 3, 6])
    obs = env.observe(env.agent_selection)
    assert connect_four_two_ply(obs["observation"], obs["action_mask"]) == 3
    env = position([0, 2, 6, 2, 6, 2])
    obs = env.observe(env.agent_selection)
    for seed in range(5):
        random.seed(seed)
        assert connect_four_two_ply(obs["observation"], obs["action_mask"]) == 2


def test_the_two_ply_player_never_opens_the_square_under_the_opponents_win() -> None:
    # the second player has three on the second row (columns 4-6): a piece in column 3's
    # bottom square would let it win on top of it; no one can win or must block now
    env = position([4, 4, 5, 5, 0, 6, 1, 6])
    obs = env.observe(env.agent_selection)
    two_ply, one_ply = set(), set()
    for seed in range(60):
        random.seed(seed)
        two_ply.add(connect_four_two_ply(obs["observation"], obs["action_mask"]))
        random.seed(seed)
        one_ply.add(connect_four_one_ply(obs["observation"], obs["action_mask"]))
    assert 3 in one_ply  # the one-ply player does not look: the position is the test's point
    assert two_ply == {0, 1, 2, 4, 5, 6}


def test_the_two_ply_player_beats_the_one_ply_player() -> None:
    env = connect_four()
    results = [play(env, connect_four_two_ply, connect_four_one_ply, s)[0] for s in range(20)]
    results += [play(env, connect_four_one_ply, connect_four_two_ply, s)[1] for s in range(20)]
    assert results.count(1.0) > results.count(-1.0)  # 25 to 12 on these seeds
