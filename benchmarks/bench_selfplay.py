"""Self-play strength: the example configs' policies against fixed players, seat by seat.

Each game trains its example configuration (examples/configs/tictactoe_selfplay.yaml,
connect_four_selfplay.yaml: PPO with ``self_play``, both agents behavior ``player``, one team
each) for its own ``max_steps`` (or ``--steps``), in a process of its own with one torch
thread; ``seconds`` is the wall time of ``learn()`` (imports and the games excluded).  Then the
exported ``player.onnx``, run by onnxruntime (the most likely action, as evaluation plays it),
plays against fixed players (examples/players.py):

* tic-tac-toe, against a **perfect player choosing among all its optimal moves**, in both seats,
  counted **exhaustively**: the policy is deterministic, so the games are the tree of the perfect
  player's choices, every branch played out (``games`` distinct games a seat); and
  ``--games`` games a seat against a uniformly random player;
* connect four, ``--games`` games a seat against the **1-ply player** (win now if it can, else
  block the opponent's immediate win, else a random legal move), as many against the **2-ply
  player** (the same, but its random move never opens a square the opponent wins on next) and
  against random.

The connect four config trains with the 1-ply player among its opponents
(``self_play.scripted_opponents``) and a random one (``random_opponent_ratio``): those figures
measure play against players it met; the 2-ply player it never met.

An illegal move of the policy loses its game, as PettingZoo rules it.

Goals (issue 34), seeds 0-2, each config trained in at most 12 minutes on a quiet 2-core
machine: tic-tac-toe, no game lost against the perfect player in either seat; connect four,
wins >= 0.80 against the 1-ply player (the mean of the two seats) and >= 0.95 against random,
1,000 games a seat.  Writes ``benchmarks/out/selfplay.json``::

    python benchmarks/bench_selfplay.py --seeds 0 1 2 --games 1000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from common import (
    CONFIGS,
    ROOT,
    Column,
    add_run_args,
    header,
    make_parser,
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
SEATS = ("first", "second")
GOAL_SECONDS = 12 * 60
"""The most a shipped config may train, on a quiet 2-core machine."""
COLUMNS = (
    Column("game", 14, align="<"),
    Column("seed", 6),
    Column("steps", 10, ",d"),
    Column("seconds", 9, ".1f"),
    Column("opponent", 10),
    Column("games", 8, ",d"),
    Column("win 1st", 9, ".3f"),
    Column("win 2nd", 9, ".3f"),
    Column("win", 7, ".3f"),
    Column("draw", 7, ".3f"),
    Column("loss", 7, ".3f"),
    Column("lost", 6, ",d"),
)

Player = Callable[[dict[str, np.ndarray]], int]
"""A player: the observation dictionary of the agent to move to its move."""


# -- players ---------------------------------------------------------------------------------


def onnx_player(path: Path) -> Player:
    """The exported policy: each input fed by its name from the observation dictionary."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def play(obs: dict[str, np.ndarray]) -> int:
        feed = {name: np.asarray(obs[name], dtype=np.float32)[None] for name in names}
        return int(np.asarray(session.run(None, feed)[0]).reshape(-1)[0])

    return play


def scripted(name: str) -> Player:
    """``examples.players:<name>`` as a :data:`Player`."""
    sys.path.insert(0, str(ROOT))
    import examples.players

    function = getattr(examples.players, name)

    def play(obs: dict[str, np.ndarray]) -> int:
        return int(function(obs["observation"], obs["action_mask"]))

    return play


def random_player(obs: dict[str, np.ndarray]) -> int:
    return int(random.choice(np.flatnonzero(obs["action_mask"])))


# -- games -----------------------------------------------------------------------------------


def match(module: Any, policy: Player, opponent: Player, games: int, seed: int) -> dict[str, Any]:
    """``games`` games in each seat against ``opponent``: per seat, the policy's games won,
    drawn and lost (an illegal move of the policy is a loss), and its illegal moves."""
    report: dict[str, Any] = {}
    for seat, side in enumerate(SEATS):
        results: Counter[str] = Counter()
        for game in range(games):
            random.seed(seed * 1_000_003 + 2 * game + seat)  # the scripted players' draws
            env = module.env()
            env.reset(seed=seed * 1_000_003 + game)
            me = env.possible_agents[seat]
            returns = 0.0
            illegal = False
            for agent in env.agent_iter():
                obs, reward, terminated, truncated, _ = env.last()
                if agent == me:
                    returns += float(reward)
                if terminated or truncated:
                    env.step(None)
                    continue
                move = (policy if agent == me else opponent)(obs)
                illegal |= agent == me and not obs["action_mask"][move]
                env.step(move)
            env.close()
            results["illegal"] += illegal
            results["loss" if illegal or returns < 0 else "win" if returns > 0 else "draw"] += 1
        report[side] = dict(results)
    return report


def against_every_optimal_move(module: Any, policy: Player) -> dict[str, Any]:
    """Tic-tac-toe: every game the deterministic ``policy`` plays against a perfect player that
    may choose any of its optimal moves, in each seat: per seat, the distinct games and how
    many the policy won, drew and lost."""
    sys.path.insert(0, str(ROOT))
    from examples.players import optimal_moves

    report: dict[str, Any] = {}
    for seat, side in enumerate(SEATS):
        results: Counter[str] = Counter()
        prefixes: list[list[int]] = [[]]
        while prefixes:  # depth first over the perfect player's choices
            moves = prefixes.pop()
            env = module.env()
            env.reset(seed=0)
            for move in moves:
                env.step(move)
            me = env.possible_agents[seat]
            for agent in env.agent_iter():
                obs, _, terminated, truncated, _ = env.last()
                if terminated or truncated:
                    mine = env.rewards[me]
                    results["loss" if mine < 0 else "win" if mine > 0 else "draw"] += 1
                    break
                if agent == me:
                    move = policy(obs)
                    if not obs["action_mask"][move]:
                        results["loss"] += 1
                        results["illegal"] += 1
                        break
                    moves = [*moves, move]
                    env.step(move)
                    continue
                board = tuple(
                    1 if own else 2 if theirs else 0
                    for own, theirs in np.asarray(obs["observation"]).reshape(-1, 2)
                )
                prefixes.extend([*moves, choice] for choice in optimal_moves(board))
                break
            env.close()
        report[side] = dict(results)
    return report


# -- runs ------------------------------------------------------------------------------------


def options(game: str, steps: int, seed: int, results: Path) -> dict[str, Any]:
    """The game's example configuration (for ``steps`` steps if not 0), into ``results``."""
    config: dict[str, Any] = yaml.safe_load(GAMES[game][1].read_text())
    settings = config["behaviors"][BEHAVIOR]
    if steps:
        settings["max_steps"] = steps
    settings["checkpoint_interval"] = settings["max_steps"]
    settings.pop("evaluation", None)  # measured here, after training, on more games
    config["env_settings"]["seed"] = seed
    config["checkpoint_settings"] = {"run_id": game, "results_dir": str(results)}
    config["plugins"] = {"disabled": ["evtrain.stats_writer:default"]}
    return config


def run(game_index: int, steps: int, seed: int, games: int) -> dict[str, Any]:
    """Train ``game`` (its index in :data:`GAMES`), then play its ONNX policy's matches."""
    import importlib

    from pettingzoo.utils.env_logger import EnvLogger

    from evtrain.run.learn import learn

    one_torch_thread()
    sys.path.insert(0, str(ROOT))  # a config's env_id may name a module of examples/
    EnvLogger.suppress_output()  # a warning per illegal move
    game = list(GAMES)[game_index]
    module = importlib.import_module(GAMES[game][0])
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = learn(options(game, steps, seed, Path(tmp)))
        seconds = time.perf_counter() - start
        policy = onnx_player(result.models[BEHAVIOR])
        report: dict[str, Any] = {"game": game, "seed": seed, "steps": result.steps[BEHAVIOR]}
        report["seconds"] = seconds
        report["random"] = match(module, policy, random_player, games, seed)
        if game == "tictactoe":
            report["perfect"] = against_every_optimal_move(module, policy)
        else:
            report["one_ply"] = match(
                module, policy, scripted("connect_four_one_ply"), games, seed + 1
            )
            report["two_ply"] = match(
                module, policy, scripted("connect_four_two_ply"), games, seed + 2
            )
    return report


def rates(seats: dict[str, Any]) -> dict[str, float]:
    """Win rate per seat, and win, draw and loss rates over both seats (each seat weighing
    its share of the games)."""
    totals: Counter[str] = Counter()
    for counts in seats.values():
        totals.update(counts)
    games = totals["win"] + totals["draw"] + totals["loss"]
    out = {
        f"win_{side}": seats[side].get("win", 0) / max(1, sum_games(seats[side])) for side in SEATS
    }
    out.update({key: totals[key] / games for key in ("win", "draw", "loss")})
    out["games"] = games
    out["lost"] = totals["loss"]
    return out


def sum_games(counts: dict[str, int]) -> int:
    return counts.get("win", 0) + counts.get("draw", 0) + counts.get("loss", 0)


def seat_means(runs: list[dict[str, Any]], opponent: str) -> list[float]:
    """Each run's wins against ``opponent``, the mean of its two seats' rates."""
    return [statistics.mean(rates(r[opponent])[f"win_{s}"] for s in SEATS) for r in runs]


def goals(game: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether every seed met the game's goals, with the figures they are judged on."""
    seconds_ok = all(r["seconds"] <= GOAL_SECONDS for r in runs)
    random_wins = [rates(r["random"])["win"] for r in runs]
    if game == "tictactoe":
        lost = [rates(r["perfect"])["lost"] for r in runs]
        return {
            "games_lost_vs_perfect": lost,
            "no_loss_vs_perfect": all(n == 0 for n in lost),
            "not_lost_vs_random": [1 - rates(r["random"])["loss"] for r in runs],
            "trained_within_12_min": seconds_ok,
        }
    one_ply, two_ply = seat_means(runs, "one_ply"), seat_means(runs, "two_ply")
    return {
        "win_vs_one_ply": one_ply,
        "win_vs_one_ply_met": all(w >= 0.80 for w in one_ply),
        "win_vs_two_ply": two_ply,
        "win_vs_random": random_wins,
        "win_vs_random_met": all(w >= 0.95 for w in random_wins),
        "trained_within_12_min": seconds_ok,
    }


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(
        parser, steps=0, seeds=[0, 1, 2], steps_help="steps to train (0: the config's max_steps)"
    )
    parser.add_argument("--games", type=int, default=1000, help="games a seat per match")
    parser.add_argument("--envs", nargs="+", choices=sorted(GAMES), default=list(GAMES))
    parser.add_argument("--worker", choices=["run"], help=argparse.SUPPRESS)
    parser.add_argument("args", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run(*args.args)))
        return
    runs = [
        spawn(__file__, "run", list(GAMES).index(game), args.steps, seed, args.games)
        for game in args.envs
        for seed in args.seeds
    ]
    print(header(COLUMNS))
    for r in runs:
        for opponent in ("perfect", "one_ply", "two_ply", "random"):
            if opponent in r:
                figures = rates(r[opponent])
                values = [r["game"], r["seed"], r["steps"], r["seconds"], opponent]
                values += [figures["games"], figures["win_first"], figures["win_second"]]
                values += [figures["win"], figures["draw"], figures["loss"], figures["lost"]]
                print(row(COLUMNS, values))
    summary = {game: goals(game, [r for r in runs if r["game"] == game]) for game in args.envs}
    for game, figures in summary.items():
        print(f"{game}: " + ", ".join(f"{key} {value}" for key, value in figures.items()))
    write_json("selfplay.json", {"runs": runs, "summary": summary, "games": args.games})


if __name__ == "__main__":
    main()
