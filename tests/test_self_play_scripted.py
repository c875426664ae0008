"""``self_play.scripted_opponents``: a share of draws seats a scripted player
(``module:function``) as the opponent in the behavior's own copies; its games move no rating."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evtrain import Bus, ConfigError, RunOptions, StatsReporter
from evtrain.multiagent.coplayers import ScriptedCoPlayer
from evtrain.trainers import PPOTrainer
from evtrain.trainers.ghost import GhostController
from evtrain.trainers.ghost.snapshots import LATEST, SCRIPTED
from evtrain.trainers.settings import SelfPlaySettings
from tests.helpers import run_config, tictactoe_self_play
from tests.self_play_duel import duel, turns
from tests.self_play_envs import one_team_across_behaviors
from tests.trainers.helpers import Recording, small_ppo

ZERO = "tests.self_play_duel:plays_zero"
TWO = "tests.self_play_duel:plays_two"


def scripted_duel(
    bus: Bus, players: list[str], ratio: float, seed: int = 0
) -> tuple[PPOTrainer, GhostController]:
    """The duel with ``players`` drawn at ``ratio``: a snapshot and a draw every update."""
    recording = Recording(bus, "duel")
    return duel(
        recording.reporter,
        seed=seed,
        save_steps=64,
        swap_steps=64,
        window=4,
        scripted_opponents=players,
        scripted_opponent_ratio=ratio,
    )


def test_every_draw_scripted_plays_its_moves_and_moves_no_rating(bus: Bus) -> None:
    trainer, controller = scripted_duel(bus, [ZERO], 1.0)
    seat = controller.facing
    assert seat is not None and seat.index == SCRIPTED
    assert isinstance(trainer.envs.co_players["duel"], ScriptedCoPlayer)
    elo = controller.elo
    turns(trainer, controller, 3)  # the games against it, a draw after each turn
    moves = np.concatenate(trainer.envs.opponent_moves)
    assert len(moves) >= 3 * 64 and not moves.any()  # every move the player's: 0
    assert seat.index == SCRIPTED
    assert controller.elo == pytest.approx(elo)
    assert controller.window.games == [0] * len(controller.window)


def test_a_ratio_between_draws_them_from_the_controllers_generator(bus: Bus) -> None:
    trainer, controller = scripted_duel(bus, [ZERO, TWO], 0.5)
    seat = controller.facing
    assert seat is not None
    drawn: list[tuple[int, Any]] = [(seat.index, trainer.envs.co_players["duel"])]
    for _ in range(8):
        turns(trainer, controller, 1)
        drawn.append((seat.index, trainer.envs.co_players["duel"]))
    # a scripted player first (which one: uniformly), then ML-Agents' rule
    rng = np.random.default_rng([0, 0x5E1F])
    expected: list[tuple[int, Any]] = []
    for size in (1, 2, 3, 4, 4, 4, 4, 4, 4):
        if rng.random() < 0.5:
            expected.append((SCRIPTED, controller.scripted[int(rng.integers(2))]))
        else:
            expected.append((LATEST if rng.random() < 0.5 else int(rng.integers(size)), None))
    assert [i for i, _ in drawn] == [i for i, _ in expected]
    for (index, player), (_, wanted) in zip(drawn, expected, strict=True):
        if index == SCRIPTED:
            assert player is wanted
        else:
            assert player is seat.opponent  # a policy plays again after a scripted one
    assert {SCRIPTED, LATEST} <= {i for i, _ in expected}
    assert {id(p) for i, p in expected if i == SCRIPTED} == {id(p) for p in controller.scripted}


AT_RANDOM = "tests.self_play_duel:plays_at_random"


def _moves_against_a_random_player(bus: Bus, seed: int) -> list[int]:
    trainer, controller = scripted_duel(bus, [AT_RANDOM], 1.0, seed=seed)
    turns(trainer, controller, 2)
    return [int(m) for m in np.concatenate(trainer.envs.opponent_moves)]


def test_a_players_random_draws_repeat_with_the_seed_and_leave_the_global_ones(bus: Bus) -> None:
    random.seed(5)
    np.random.seed(5)
    before = random.getstate(), np.random.get_state()
    first = _moves_against_a_random_player(bus, seed=0)
    # the globals as they were: the player drew from streams of its own
    assert random.getstate() == before[0]
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), before[1], strict=True))
    random.seed(6)  # someone else's use of the globals changes nothing of the player's draws
    np.random.seed(6)
    assert _moves_against_a_random_player(bus, seed=0) == first
    assert sorted(set(first)) == [0, 1, 2]
    assert _moves_against_a_random_player(bus, seed=1) != first  # the run's seed seeds them


def test_a_resumed_controller_goes_on_with_the_players_streams(bus: Bus, tmp_path: Path) -> None:
    trainer, controller = scripted_duel(bus, [AT_RANDOM], 1.0)
    turns(trainer, controller, 2)
    torch.save(controller.state_dict(), tmp_path / "state.pt")  # as a checkpoint holds it
    done = len(trainer.envs.opponent_moves)
    turns(trainer, controller, 2)
    went_on = np.concatenate(trainer.envs.opponent_moves[done:])

    resumed_trainer, resumed = scripted_duel(bus, [AT_RANDOM], 1.0)
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    turns(resumed_trainer, resumed, 2)
    moves = np.concatenate(resumed_trainer.envs.opponent_moves)
    # its first turns were before the load: the two turns after it are the ones that went on
    assert np.array_equal(moves[-len(went_on) :], went_on)


def test_unset_none_is_drawn() -> None:
    settings = SelfPlaySettings()
    assert settings.scripted_opponents == [] and settings.scripted_opponent_ratio == 0.0
    options = RunOptions.from_dict({"behaviors": {"P": {"self_play": {}}}})
    assert options.behaviors["P"].self_play == SelfPlaySettings()


@pytest.mark.parametrize(
    ("self_play", "problem"),
    [
        (
            {"scripted_opponent_ratio": 0.5},
            "behaviors.P.self_play.scripted_opponent_ratio: 0.5 draws a scripted opponent, and "
            "scripted_opponents names none; list them (module:function), or remove the ratio",
        ),
        (
            {"scripted_opponents": [ZERO]},
            "behaviors.P.self_play.scripted_opponent_ratio: 0 (unset) never draws the "
            "scripted_opponents listed; set the share of draws that take one (e.g. "
            "scripted_opponent_ratio: 0.5), or remove scripted_opponents",
        ),
        (
            {"scripted_opponents": ["random"], "scripted_opponent_ratio": 0.5},
            "behaviors.P.self_play.scripted_opponents: item 0: expected "
            "module:function (a scripted player, function(observation, action_mask) -> "
            "action), got 'random'",
        ),
        (
            {"scripted_opponent_ratio": 1.5, "scripted_opponents": [ZERO]},
            "behaviors.P.self_play.scripted_opponent_ratio: must be <= 1.0, got 1.5",
        ),
    ],
)
def test_bad_settings_are_named_by_their_key(self_play: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"P": {"self_play": self_play}}})
    assert info.value.problems == (problem,)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            "tests.self_play_duel:no_such_player",
            "behaviors.duel.self_play.scripted_opponents[0]: "
            "'tests.self_play_duel:no_such_player' cannot be imported (AttributeError: ",
        ),
        (
            "tests.self_play_duel:NOT_A_FUNCTION",
            "behaviors.duel.self_play.scripted_opponents[0]: "
            "'tests.self_play_duel:NOT_A_FUNCTION' is a int, not a function",
        ),
    ],
)
def test_a_player_that_cannot_be_imported_is_named(bus: Bus, spec: str, problem: str) -> None:
    recording = Recording(bus, "duel")
    with pytest.raises(ConfigError) as info:
        duel(recording.reporter, scripted_opponents=[spec], scripted_opponent_ratio=0.5)
    assert info.value.problems[0].startswith(problem)


def test_across_behaviors_it_is_refused(bus: Bus) -> None:
    settings = small_ppo(
        self_play=SelfPlaySettings(scripted_opponents=[ZERO], scripted_opponent_ratio=1.0)
    )
    assert settings.self_play is not None
    envs = one_team_across_behaviors()
    trainer = PPOTrainer("duel", settings, envs, StatsReporter(bus, "duel"), seed=0)
    with pytest.raises(ConfigError) as info:
        GhostController(trainer, settings.self_play)
    assert info.value.problems == (
        "behaviors.duel.self_play.scripted_opponents: a scripted opponent plays the other team "
        "of the behavior's own agents, and across behaviors (a team of it against another "
        "behavior's) there is none: remove scripted_opponents",
    )


# -- through evtrain learn -----------------------------------------------------------------------

PERFECT = "examples.players:tictactoe_perfect"


# PettingZoo's own notice about its ``module:env`` creation (the command prints it, and goes on)
@pytest.mark.filterwarnings("ignore:The old environment creation API:DeprecationWarning")
def test_cli_a_run_against_a_scripted_player_only_keeps_its_rating(tmp_path: Path) -> None:
    self_play = {"swap_steps": 256, "scripted_opponents": [PERFECT], "scripted_opponent_ratio": 1}
    result = run_config(tmp_path, tictactoe_self_play(1024, self_play))
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "results" / "run" / "player" / "stats.jsonl").read_text().splitlines()
    stats = [json.loads(line)["stats"] for line in lines if '"stats"' in line]
    elo = [s["Self-play/ELO"] for s in stats if "Self-play/ELO" in s]
    assert len(elo) == 2 and all(e["num"] > 0 and e["mean"] == 1200.0 for e in elo)
    # every game against the perfect player, which never loses (against itself the policy
    # would win about as often as it loses): none is rated
    returns = [r for s in stats for r in s["Environment/Cumulative Reward"]["values"]]
    assert len(returns) > 100 and max(returns) <= 0.0 and returns.count(-1.0) > len(returns) / 2


@pytest.mark.filterwarnings("ignore:The old environment creation API:DeprecationWarning")
def test_cli_a_player_that_cannot_be_imported_fails_the_run_at_its_start(tmp_path: Path) -> None:
    self_play = {"scripted_opponents": ["examples.players:nobody"], "scripted_opponent_ratio": 1}
    result = run_config(tmp_path, tictactoe_self_play(1024, self_play))
    assert result.returncode != 0
    assert (
        "behaviors.player.self_play.scripted_opponents[0]: 'examples.players:nobody' cannot be "
        "imported (AttributeError: " in result.stderr
    )
    assert not (tmp_path / "results" / "run" / "player" / "checkpoint.pt").exists()
