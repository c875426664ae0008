"""A small league (``self_play.league``, :mod:`evtrain.trainers.ghost.league`): the main
exploiter trained against the main learner's policy as it is now, drawn by the main learner,
reset and promoted into its window, checkpointed and resumed; its keys' errors; and a real
tic-tac-toe run through ``evtrain learn`` that writes and resumes it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from evtrain import Bus, ConfigError, RunOptions, StatsReporter
from evtrain.trainers import PPOTrainer
from evtrain.trainers.ghost import (
    ELO,
    EXPLOITER,
    EXPLOITER_WIN_RATE,
    LATEST,
    GhostController,
)
from evtrain.trainers.settings import LeagueSettings, SelfPlaySettings
from tests.helpers import run_config, saved, tictactoe_self_play
from tests.self_play_duel import duel, turns
from tests.self_play_envs import DuelSlots, one_team_across_behaviors
from tests.trainers.helpers import Recording, small_ppo


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def policy(trainer: PPOTrainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.policy_module().state_dict().items()}


def test_the_exploiter_trains_only_against_the_main_learner_as_it_is_now(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(recording.reporter, league={"exploiter_ratio": 0.0})
    exploiter = controller.exploiter
    assert exploiter is not None
    envs = exploiter.trainer.envs
    assert isinstance(envs, DuelSlots) and envs is not trainer.envs
    assert envs.co_players == {"duel": exploiter.opponent}
    assert exploiter.trainer.reporter.category == "duel/exploiter"
    start = policy(exploiter.trainer)
    assert not equal(start, policy(trainer))  # a policy of its own (another seed)
    for n in range(1, 4):
        turns(trainer, controller, 1)
        # one turn of its own after each of the main learner's; it plays the main learner
        # as it is after that turn
        assert (exploiter.trainer.step, trainer.step) == (64 * n, 64 * n)
        now = trainer.sampling_policy_module(exploiter.generator).state_dict()
        assert equal(exploiter.opponent.module.state_dict(), now)
    assert not equal(start, policy(exploiter.trainer))  # it learns
    # every episode of its copies counted against the main learner, and reported
    assert exploiter.games == 3 * 64 and 0.0 <= exploiter.score <= exploiter.games
    trainer.write_final_summary()
    recording.flush()
    rates = [e.values[EXPLOITER_WIN_RATE] for e in recording.stats if e.category == "duel"]
    assert sum(s.num for s in rates) == 3 * 64
    assert controller.opponent is not None and controller.facing is not None
    assert controller.facing.index != EXPLOITER  # exploiter_ratio 0: never drawn


def test_the_main_learner_plays_the_exploiter_as_often_as_exploiter_ratio_says(
    bus: Bus,
) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(
        recording.reporter, league={"exploiter_ratio": 1.0}, swap_steps=64, save_steps=64
    )
    exploiter, seat = controller.exploiter, controller.facing
    assert exploiter is not None and seat is not None
    assert seat.index == EXPLOITER
    turns(trainer, controller, 3)
    assert seat.index == EXPLOITER and equal(seat.opponent.module.state_dict(), exploiter.weights())
    assert controller.elo == 1200.0  # no rating moves against it, as against LATEST
    assert controller.window.games == [0, 0, 0, 0]  # nor the window's results
    # a quarter of the draws: the rest as without a league
    trainer, controller = duel(recording.reporter, league={"exploiter_ratio": 0.25})
    assert controller.facing is not None
    indices = []
    for _ in range(400):
        controller.draw(controller.facing)
        indices.append(controller.facing.index)
    share = indices.count(EXPLOITER) / 400
    assert share == pytest.approx(0.25, abs=0.075)  # 3.5 standard errors
    assert {LATEST, 0} <= set(indices)


def test_an_exploiter_that_beats_the_main_learner_joins_its_window_and_starts_again(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    recording = Recording(bus, "duel")
    league = {"exploiter_ratio": 0.0, "min_games": 64, "win_threshold": 0.01}
    trainer, controller = duel(recording.reporter, league=league, window=5)
    exploiter = controller.exploiter
    assert exploiter is not None
    start = {k: v.clone() for k, v in exploiter.weights().items()}
    main = {k: v.clone() for k, v in controller.window.snapshots[0].items()}
    with caplog.at_level(logging.INFO, logger="evtrain"):
        turns(trainer, controller, 1)  # its 64 games: it scores above 0.01 in them
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith(
        "duel: the main exploiter beats the main learner: a snapshot of it joins the window at "
        "its step 64 (win rate "
    )
    assert caplog.messages[0].endswith(" in 64 games); it starts again")
    # its snapshot (after its turn: neither its start nor the main learner's) joined the window
    window = controller.window
    assert len(window) == 2 and window.elos[1] == controller.elo  # rated as the main learner
    assert not equal(window.snapshots[1], start) and not equal(window.snapshots[1], main)
    assert (exploiter.promotions, exploiter.resets, exploiter.games) == (1, 1, 0)
    assert equal(exploiter.weights(), start) and exploiter.trainer.step == 64


def test_an_exploiter_starts_again_after_reset_steps_with_its_initial_optimizer(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    league = {"exploiter_ratio": 0.0, "reset_steps": 128, "win_threshold": 1.0}
    trainer, controller = duel(recording.reporter, league=league)
    exploiter = controller.exploiter
    assert exploiter is not None
    start = policy(exploiter.trainer)
    fresh_optimizer = exploiter.initial["optimizer"]
    turns(trainer, controller, 1)
    assert exploiter.resets == 0 and not equal(policy(exploiter.trainer), start)
    turns(trainer, controller, 1)
    assert (exploiter.resets, exploiter.promotions, exploiter.reset_at) == (1, 0, 128)
    assert equal(policy(exploiter.trainer), start)
    assert exploiter.trainer.state_dict()["optimizer"]["state"] == fresh_optimizer["state"] == {}
    assert len(controller.window) == 1  # nothing joined


def test_the_checkpoint_keeps_the_exploiter_and_an_older_one_starts_it_afresh(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    league = {"exploiter_ratio": 0.5, "reset_steps": 10_000, "win_threshold": 1.0}
    trainer, controller = duel(recording.reporter, league=league)
    turns(trainer, controller, 3)
    exploiter = controller.exploiter
    assert exploiter is not None
    state = saved(trainer)
    kept = state["attachments"]["self_play"]["league"]
    assert kept["trainer"]["step"] == 192 and kept["games"] == exploiter.games == 192
    resumed, again = duel(recording.reporter, seed=5, league=league)
    resumed.load_state_dict(state)
    again.start()
    restored = again.exploiter
    assert restored is not None
    assert equal(policy(restored.trainer), policy(exploiter.trainer))
    assert restored.trainer.step == 192
    assert (restored.games, restored.score) == (exploiter.games, exploiter.score)
    mine, theirs = restored.trainer.state_dict(), exploiter.trainer.state_dict()
    assert mine["optimizer"]["state"].keys() == theirs["optimizer"]["state"].keys()
    turns(resumed, again, 1)
    assert restored.trainer.step == 256
    # a checkpoint without a league: the exploiter starts afresh
    del state["attachments"]["self_play"]["league"]
    older, before = duel(recording.reporter, seed=5, league=league)
    older.load_state_dict(state)
    before.start()
    assert before.exploiter is not None and before.exploiter.trainer.step == 0


# -- the keys ------------------------------------------------------------------------------------


def test_a_league_is_off_unless_configured_and_has_alpha_star_like_defaults() -> None:
    assert SelfPlaySettings().league is None
    league = LeagueSettings()
    assert (league.exploiters, league.exploiter_ratio) == (1, 0.25)
    assert (league.reset_steps, league.win_threshold, league.min_games) == (100000, 0.7, 200)
    options = RunOptions.from_dict({"behaviors": {"P": {"self_play": {}}}})
    assert "league" not in options.as_dict()["behaviors"]["P"]["self_play"]
    options = RunOptions.from_dict({"behaviors": {"P": {"self_play": {"league": {}}}}})
    assert options.behaviors["P"].self_play == SelfPlaySettings(league=LeagueSettings())


@pytest.mark.parametrize(
    ("league", "problem"),
    [
        (
            {"exploiters": 2},
            "behaviors.P.self_play.league.exploiters: evtrain's league has one main exploiter, "
            "got 2; set exploiters: 1, or remove league",
        ),
        (
            {"exploiter_ratio": 1.5},
            "behaviors.P.self_play.league.exploiter_ratio: must be <= 1.0, got 1.5",
        ),
        ({"min_games": 0}, "behaviors.P.self_play.league.min_games: must be > 0, got 0"),
        (
            {"win_threshold": 0},
            "behaviors.P.self_play.league.win_threshold: must be > 0.0, got 0.0",
        ),
        (
            {"exploiter": 1},
            "behaviors.P.self_play.league.exploiter: unknown key (did you mean exploiters?)",
        ),
    ],
)
def test_bad_league_keys_are_named_by_their_key(league: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"P": {"self_play": {"league": league}}}})
    assert info.value.problems == (problem,)


def test_a_league_needs_copies_of_its_own_and_two_teams_of_the_behavior(bus: Bus) -> None:
    settings = small_ppo(self_play=SelfPlaySettings(league=LeagueSettings()))
    assert settings.self_play is not None
    reporter = StatsReporter(bus, "duel")
    trainer = PPOTrainer("duel", settings, DuelSlots(2), reporter, seed=0)
    with pytest.raises(ConfigError) as info:
        GhostController(trainer, settings.self_play)  # what a shared_env run passes
    assert info.value.problems == (
        "behaviors.duel.self_play.league: the main exploiter needs environment copies of its "
        "own, and env_settings.shared_env shares the environment's copies between behaviors: "
        "remove league, or shared_env",
    )
    one_team = PPOTrainer("duel", settings, one_team_across_behaviors(), reporter, seed=0)
    with pytest.raises(ConfigError) as info:
        GhostController(one_team, settings.self_play, lambda: DuelSlots(2))
    assert info.value.problems == (
        "behaviors.duel.self_play.league: a league needs the behavior's agents to form both "
        "teams; across behaviors (a team of it against another behavior's) it is not "
        "supported by evtrain yet: remove league",
    )


# -- through evtrain learn -----------------------------------------------------------------------


def league_options(max_steps: int) -> dict[str, Any]:
    """PPO with a league on tic-tac-toe (and as many steps per update for the exploiter), the
    exploiter reset every 768 of its steps."""
    league = {"exploiter_ratio": 0.5, "reset_steps": 768, "win_threshold": 1.0}
    self_play: dict[str, Any] = {
        "save_steps": 256,
        "team_change": 512,
        "swap_steps": 256,
        "league": league,
    }
    return tictactoe_self_play(max_steps, self_play)


def stats_lines(path: Path) -> dict[int, dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {line["step"]: line["stats"] for line in lines if "stats" in line}


def saved_league(folder: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(folder / "checkpoint.pt", weights_only=True)
    league: dict[str, Any] = state["attachments"]["self_play"]["league"]
    return league


# PettingZoo's own notice about its ``module:env`` creation (the command prints it, and goes on)
@pytest.mark.filterwarnings("ignore:The old environment creation API:DeprecationWarning")
def test_cli_a_league_trains_its_exploiter_beside_the_behavior_and_resumes_it(
    tmp_path: Path,
) -> None:
    result = run_config(tmp_path, league_options(1024))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "results" / "run" / "player"
    main = stats_lines(folder / "stats.jsonl")
    assert sorted(main) == [512, 1024]
    assert all(main[step][EXPLOITER_WIN_RATE]["num"] > 0 for step in main)
    assert all(ELO in main[step] for step in main)
    # the exploiter's own training, beside the behavior's
    exploiter = stats_lines(folder / "exploiter" / "stats.jsonl")
    assert sorted(exploiter) == [512, 1024]
    assert "Losses/Policy Loss" in exploiter[1024]
    league = saved_league(folder)
    assert league["trainer"]["step"] == 1024 and "optimizer" in league["trainer"]
    assert (league["resets"], league["reset_at"], league["promotions"]) == (1, 768, 0)
    assert "the main exploiter reached reset_steps (768) at its step 768" in result.stderr
    assert "[INFO] player/exploiter. Step: 512. Time Elapsed: " in result.stderr

    result = run_config(tmp_path, league_options(1536), "--resume")
    assert result.returncode == 0, result.stderr
    league = saved_league(folder)
    assert league["trainer"]["step"] == 1536  # it went on from 1024
    assert (league["resets"], league["reset_at"]) == (2, 1536)
    assert sorted(stats_lines(folder / "exploiter" / "stats.jsonl")) == [512, 1024, 1536]

    # --inference trains nothing: no exploiter is built, and its curve is left as it was
    trained = (folder / "exploiter" / "stats.jsonl").read_text()
    result = run_config(tmp_path, league_options(1536), "--inference")
    assert result.returncode == 0, result.stderr
    assert (folder / "exploiter" / "stats.jsonl").read_text() == trained
    assert not (folder / "inference" / "exploiter").exists()
    assert "player/exploiter" not in result.stdout + result.stderr  # no console line of it
