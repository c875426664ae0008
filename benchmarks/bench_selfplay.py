"""Self-play PPO on connect_four_v3 and tictactoe_v3: its ONNX policy against random and minimax.

Each game trains its example configuration (examples/configs/connect_four_selfplay.yaml,
tictactoe_selfplay.yaml: PPO with ``self_play``, both agents behavior ``player``, one team each)
for ``--steps`` steps of the learning side, in a process of its own with one torch thread;
``seconds`` is the wall time of ``learn()`` (imports excluded).  Then the exported
``player.onnx``, run by onnxruntime (the most likely action), plays ``--games`` games as the
first and as many as the second player against a uniformly random player (legal moves only);
tic-tac-toe also plays its two games (first, second) against a perfect player (minimax).  An
illegal move of the policy loses the game, as PettingZoo rules it.

Targets (issue 23): connect four, win rate against random >= 0.95, the median of 3 seeds at
40k steps (anchor: PettingZoo's Stable-Baselines3 tutorial, MaskablePPO playing both sides,
reports 0.86 at 40k steps); tic-tac-toe, >= 95 % of games against random not lost, and both
games against the perfect player drawn.  Writes ``benchmarks/out/selfplay.json``::

    python benchmarks/bench_selfplay.py --steps 40000 --seeds 0 1 2 --games 1000
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from common import (
    CONFIGS,
    Column,
    add_run_args,
    header,
    make_parser,
    median_of,
    one_torch_thread,
    row,
    spawn,
    write_json,
)

GAMES = {
    "connect_four": ("pettingzoo.classic.connect_four_v3", CONFIGS / "connect_four_selfplay.yaml"),
    "tictactoe": ("pettingzoo.classic.tictactoe_v3", CONFIGS / "tictactoe_selfplay.yaml"),
}
"""Each game's PettingZoo module and the configuration it trains with."""
BEHAVIOR = "player"
COLUMNS = (
    Column("game", 14, align="<"),
    Column("seed", 6),
    Column("steps", 8),
    Column("seconds", 9, ".1f"),
    Column("ELO", 8, ".0f"),
    Column("win 1st", 9, ".3f"),
    Column("win 2nd", 9, ".3f"),
    Column("win", 7, ".3f"),
    Column("not lost", 10, ".3f"),
    Column("illegal", 9),
    Column("vs perfect", 12),
)

Player = Callable[[Any, dict[str, np.ndarray], list[int]], int]
"""A player: (environment, observation, the moves so far) to its move."""


# -- players ---------------------------------------------------------------------------------


def onnx_player(path: Path) -> Player:
    """The exported policy: each input fed by its name from the observation dictionary."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def play(env: Any, obs: dict[str, np.ndarray], moves: list[int]) -> int:
        feed = {name: np.asarray(obs[name], dtype=np.float32)[None] for name in names}
        return int(np.asarray(session.run(None, feed)[0]).reshape(-1)[0])

    return play


def random_player(rng: np.random.Generator) -> Player:
    def play(env: Any, obs: dict[str, np.ndarray], moves: list[int]) -> int:
        return int(rng.choice(np.flatnonzero(obs["action_mask"])))

    return play


LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
"""Tic-tac-toe's lines of three, by cell index.  They are the same whether the cells are
numbered by rows or by columns, so the board can be kept from the moves alone."""


@functools.cache
def _negamax(board: tuple[int, ...]) -> tuple[int, int]:
    """(value for the player to move: 1 win, 0 draw, -1 loss; its best move) of ``board``
    (0 empty, 1 the player to move, 2 the other)."""
    if any(all(board[i] == 2 for i in line) for line in LINES):
        return -1, -1
    empty = [i for i in range(9) if board[i] == 0]
    if not empty:
        return 0, -1
    best = (-2, -1)
    for move in empty:
        child = tuple(0 if c == 0 else 3 - c for c in board)  # the other player to move
        child = (*child[:move], 2, *child[move + 1 :])
        value = -_negamax(child)[0]
        if value > best[0]:
            best = (value, move)
    return best


def perfect_player(env: Any, obs: dict[str, np.ndarray], moves: list[int]) -> int:
    """Tic-tac-toe's minimax player, on the board the moves so far make."""
    board = [0] * 9
    for index, move in enumerate(moves):  # the player to move now owns every other move
        board[move] = 1 if (len(moves) - index) % 2 == 0 else 2
    return _negamax(tuple(board))[1]


# -- games -----------------------------------------------------------------------------------


def play_game(module: Any, players: tuple[Player, Player], seed: int) -> tuple[float, list[bool]]:
    """One game, ``players[0]`` moving first: the first player's return (+1 win, 0 draw, -1
    loss) and which of the two made an illegal move (which ends the game, a loss for it)."""
    env = module.env()
    env.reset(seed=seed)
    seats = list(env.agents)
    returns = dict.fromkeys(seats, 0.0)
    moves: list[int] = []
    illegal = [False, False]
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        returns[agent] += float(reward)
        if terminated or truncated:
            env.step(None)
            continue
        seat = seats.index(agent)
        move = players[seat](env, obs, moves)
        illegal[seat] |= not obs["action_mask"][move]
        moves.append(move)
        env.step(move)
    env.close()
    return returns[seats[0]], illegal


def evaluate(module: Any, policy: Player, games: int, seed: int) -> dict[str, Any]:
    """``games`` games as first and as second player against random: the policy's win rate
    on each side and overall, its rate of games not lost, and its illegal moves."""
    rng = np.random.default_rng(seed)
    opponent = random_player(rng)
    results: dict[str, list[float]] = {"first": [], "second": []}
    illegal = 0
    for game in range(games):
        for side, seat in (("first", 0), ("second", 1)):
            players = (policy, opponent) if seat == 0 else (opponent, policy)
            first_return, illegal_moves = play_game(module, players, seed * 1_000_003 + game)
            mine = first_return if seat == 0 else -first_return
            # PettingZoo gives an illegal mover -1 and its opponent 0: a loss all the same
            results[side].append(-1.0 if illegal_moves[seat] else mine)
            illegal += illegal_moves[seat]
    everything = results["first"] + results["second"]
    return {
        "win_first": float(statistics.mean(r > 0 for r in results["first"])),
        "win_second": float(statistics.mean(r > 0 for r in results["second"])),
        "win": float(statistics.mean(r > 0 for r in everything)),
        "not_lost": float(statistics.mean(r >= 0 for r in everything)),
        "illegal": illegal,
    }


def against_perfect(module: Any, policy: Player) -> list[str]:
    """The policy's results (win, draw, loss) as first and as second player against minimax."""
    results = []
    for seat in (0, 1):
        players = (policy, perfect_player) if seat == 0 else (perfect_player, policy)
        first_return, illegal = play_game(module, players, 0)
        mine = -1.0 if illegal[seat] else (first_return if seat == 0 else -first_return)
        results.append("win" if mine > 0 else "loss" if mine < 0 else "draw")
    return results


# -- runs ------------------------------------------------------------------------------------


def options(game: str, steps: int, seed: int, results: Path) -> dict[str, Any]:
    """The game's example configuration for ``steps`` steps, into ``results``."""
    config: dict[str, Any] = yaml.safe_load(GAMES[game][1].read_text())
    settings = config["behaviors"][BEHAVIOR]
    settings.update(max_steps=steps, checkpoint_interval=steps)
    config["env_settings"]["seed"] = seed
    config["checkpoint_settings"] = {"run_id": game, "results_dir": str(results)}
    config["plugins"] = {"disabled": ["evtrain.stats_writer:default"]}
    return config


def run(game_index: int, steps: int, seed: int, games: int) -> dict[str, Any]:
    """Train ``game`` (its index in :data:`GAMES`), then evaluate its ONNX policy."""
    import importlib

    from pettingzoo.utils.env_logger import EnvLogger

    from evtrain import Bus, StatsEvent, signals
    from evtrain.run.learn import learn

    one_torch_thread()
    EnvLogger.suppress_output()  # a warning per illegal move
    game = list(GAMES)[game_index]
    module = importlib.import_module(GAMES[game][0])
    elo: list[float] = []

    def track(event: StatsEvent) -> None:
        summary = event.values.get("Self-play/ELO")
        if summary is not None and summary.num:
            elo.append(summary.mean)

    with tempfile.TemporaryDirectory() as tmp, Bus() as bus:
        bus.connect(signals.stats, track)
        start = time.perf_counter()
        result = learn(options(game, steps, seed, Path(tmp)), bus)
        seconds = time.perf_counter() - start
        policy = onnx_player(result.models[BEHAVIOR])
        report = {"game": game, "seed": seed, "steps": result.steps[BEHAVIOR]}
        report.update(seconds=seconds, elo=elo[-1] if elo else None)
        report.update(evaluate(module, policy, games, seed))
        if game == "tictactoe":
            report["vs_perfect"] = against_perfect(module, policy)
    return report


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=40_000, seeds=[0, 1, 2])
    parser.add_argument("--games", type=int, default=1000, help="games against random per side")
    parser.add_argument("--envs", nargs="+", choices=sorted(GAMES), default=list(GAMES))
    parser.add_argument("--worker", choices=["run"], help=argparse.SUPPRESS)
    parser.add_argument("args", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(*args.args)))
        return
    rows = [
        spawn(__file__, "run", list(GAMES).index(game), args.steps, seed, args.games)
        for game in args.envs
        for seed in args.seeds
    ]
    print(header(COLUMNS))
    keys = ("game", "seed", "steps", "seconds", "elo", "win_first", "win_second", "win")
    for r in rows:
        perfect = "/".join(r.get("vs_perfect", ["-"]))
        elo = r["elo"] if r["elo"] is not None else float("nan")
        values = [*(r[k] for k in keys[:4]), elo, *(r[k] for k in keys[5:])]
        print(row(COLUMNS, [*values, r["not_lost"], r["illegal"], perfect]))
    summary = {}
    for game in args.envs:
        mine = [r for r in rows if r["game"] == game]
        summary[game] = {
            key: median_of(mine, key) for key in ("seconds", "win", "not_lost", "win_first")
        }
        summary[game]["win_second"] = median_of(mine, "win_second")
        if game == "tictactoe":
            summary[game]["all_draws_vs_perfect"] = all(
                r["vs_perfect"] == ["draw", "draw"] for r in mine
            )
        shown = (
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary[game].items()
        )
        print(f"{game} median of {len(mine)} seed(s): " + ", ".join(shown))
    write_json("selfplay.json", {"runs": rows, "summary": summary, "games": args.games})


if __name__ == "__main__":
    main()
