"""Prioritized fictitious self-play (``self_play.opponent_sampling: pfsp``,
:mod:`evtrain.trainers.ghost.pfsp`): the win-rate estimates and PFSP's weights computed by
hand, the draws following them, the default draw left as ML-Agents' (uniform), the results
kept by the checkpoint, the keys' errors, and a real tic-tac-toe run through ``evtrain learn``
resumed with its results."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evtrain import Bus, ConfigError, RunOptions
from evtrain.trainers.ghost import (
    LATEST,
    PFSP_ENTROPY,
    POOL_WIN_RATE,
    SnapshotWindow,
    pfsp_weights,
    win_rate,
)
from evtrain.trainers.settings import SelfPlaySettings
from tests.helpers import run_config, saved, tictactoe_self_play
from tests.self_play_duel import duel, turns
from tests.trainers.helpers import Recording

# -- the estimates and the weights, by hand ------------------------------------------------------


def test_a_win_rate_counts_one_game_more_of_the_prior() -> None:
    assert win_rate(0.0, 0, 0.5) == 0.5  # not played: the prior
    assert win_rate(3.0, 3, 0.5) == 3.5 / 4  # three wins: not yet a certainty
    assert win_rate(0.5, 3, 0.5) == 1.0 / 4  # a draw and two losses
    assert win_rate(2.0, 3, 0.0) == 2.0 / 4


def test_pfsp_weights_are_f_of_the_win_rates_normalised() -> None:
    x = [0.5, 0.25, 0.75, 1.0]
    # hard, p = 2: (1 - x)^2 = 1/4, 9/16, 1/16, 0; sum 7/8
    assert pfsp_weights(x, "hard", 2.0).tolist() == [2 / 7, 9 / 14, 1 / 14, 0.0]
    # p = 1: 1/2, 3/4, 1/4, 0; sum 3/2
    assert pfsp_weights(x, "hard", 1.0).tolist() == [1 / 3, 1 / 2, 1 / 6, 0.0]
    # variance: x(1 - x) = 1/4, 3/16, 3/16, 0; sum 5/8
    assert pfsp_weights(x, "variance", 2.0).tolist() == [2 / 5, 3 / 10, 3 / 10, 0.0]
    # every snapshot beaten for certain: uniform
    assert pfsp_weights([1.0, 1.0], "hard", 2.0).tolist() == [0.5, 0.5]
    assert pfsp_weights([0.0, 1.0], "variance", 2.0).tolist() == [0.5, 0.5]


def test_the_window_counts_the_results_against_each_snapshot() -> None:
    window = SnapshotWindow(2, initial_elo=1200.0)
    window.save({"w": torch.zeros(2)})
    window.save({"w": torch.ones(2)})
    for index, score in [(0, 1.0), (0, 0.5), (1, 0.0), (LATEST, 1.0)]:
        window.played(index, score)
    assert (window.games, window.scores) == ([2, 1], [1.5, 0.0])  # nothing for LATEST
    assert window.win_rates(0.5) == [2.0 / 3, 0.25]
    window.save({"w": torch.full((2,), 2.0)})  # replaces snapshot 0: its results go with it
    assert (window.games, window.scores) == ([0, 1], [0.0, 0.0])


# -- the controller's draws ----------------------------------------------------------------------


def reported(recording: Recording, key: str) -> list[float]:
    recording.flush()
    return [v for e in recording.stats for v in e.values[key].full_dist] if recording.stats else []


def test_pfsp_draws_each_snapshot_as_often_as_its_weight(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(
        recording.reporter, opponent_sampling="pfsp", play_against_latest_model_ratio=0.0, window=4
    )
    window = controller.window
    for _ in range(3):
        window.save(window.snapshots[0])
    # win rates (score + 0.5) / (games + 1): 1/2, 1/4, 3/4, 7/8
    window.games, window.scores = [0, 3, 1, 3], [0.0, 0.5, 1.0, 3.0]
    expected = pfsp_weights([0.5, 0.25, 0.75, 0.875], "hard", 2.0)
    assert expected.tolist() == pytest.approx([16 / 57, 36 / 57, 4 / 57, 1 / 57])
    seat = controller.facing
    assert seat is not None
    draws: Counter[int] = Counter()
    for _ in range(4000):
        controller.draw(seat)
        draws[seat.index] += 1
    frequencies = [draws[i] / 4000 for i in range(4)]
    assert frequencies == pytest.approx(expected.tolist(), abs=0.025)  # 3.4 standard errors
    trainer.advance()  # a step to summarise
    trainer.write_final_summary()
    recording.flush()
    entropies = [e.values[PFSP_ENTROPY] for e in recording.stats if PFSP_ENTROPY in e.values]
    assert entropies[-1].num == 1 + 4000  # one a draw: the start's, and these
    assert entropies[-1].full_dist[-1] == pytest.approx(float(-(expected * np.log(expected)).sum()))
    rates = [e.values[POOL_WIN_RATE] for e in recording.stats if POOL_WIN_RATE in e.values]
    assert rates[-1].full_dist[-1] == pytest.approx(0.59375)  # mean of 1/2, 1/4, 3/4, 7/8


def test_the_default_draw_is_ml_agents_uniform_one_and_reports_no_pfsp(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(recording.reporter, save_steps=64, swap_steps=64, window=4)
    assert controller.settings.opponent_sampling == "uniform"
    assert controller.facing is not None
    first = controller.facing.index
    indices = []
    for _ in range(6):
        turns(trainer, controller, 1)
        indices.append(controller.facing.index)
    # ML-Agents' rule from the controller's generator: the latest policy with probability 0.5,
    # else a snapshot uniformly; a snapshot is saved every 64 steps, before each draw
    rng = np.random.default_rng([0, 0x5E1F])
    expected = []
    for size in (1, 2, 3, 4, 4, 4, 4):
        expected.append(LATEST if rng.random() < 0.5 else int(rng.integers(size)))
    assert [first, *indices] == expected and set(expected) != {LATEST}
    trainer.write_final_summary()
    recording.flush()
    keys = {key for e in recording.stats for key in e.values}
    assert PFSP_ENTROPY not in keys and POOL_WIN_RATE not in keys


def test_pfsp_counts_every_game_against_a_snapshot_and_reports_each_draw(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    trainer, controller = duel(
        recording.reporter,
        opponent_sampling="pfsp",
        play_against_latest_model_ratio=0.0,
        save_steps=64,
        swap_steps=64,
    )
    turns(trainer, controller, 6)
    window = controller.window
    assert len(window) == 7  # none replaced: every result is still there
    # one episode per copy and step: 6 turns of 64 steps, each against a snapshot
    assert sum(window.games) == 6 * 64 and window.games[-1] == 0  # the newest: not played yet
    assert all(0.0 <= s <= n for s, n in zip(window.scores, window.games, strict=True))
    trainer.write_final_summary()
    recording.flush()
    entropies = [
        h
        for e in recording.stats
        if PFSP_ENTROPY in e.values
        for h in e.values[PFSP_ENTROPY].full_dist
    ]
    assert len(entropies) == 7  # the start's draw and one a turn
    assert entropies[0] == 0.0  # a window of one
    assert all(
        0.0 < h <= math.log(k) + 1e-12 for h, k in zip(entropies[1:], range(2, 8), strict=True)
    )


# -- the checkpoint ------------------------------------------------------------------------------


def test_the_checkpoint_keeps_the_results_and_an_older_one_starts_them_afresh(bus: Bus) -> None:
    recording = Recording(bus, "duel")
    options: dict[str, Any] = dict(
        opponent_sampling="pfsp", play_against_latest_model_ratio=0.0, save_steps=64, window=3
    )
    trainer, controller = duel(recording.reporter, **options)
    turns(trainer, controller, 5)
    state = saved(trainer)
    window = state["attachments"]["self_play"]["window"]
    assert sum(window["games"]) > 0 and len(window["games"]) == len(window["scores"]) == 3
    resumed, again = duel(recording.reporter, seed=5, **options)
    resumed.load_state_dict(state)
    again.start()
    # restored oldest first, as the snapshots are
    order = [(window["next"] + i) % 3 for i in range(3)]
    assert again.window.games == [window["games"][i] for i in order]
    assert again.window.scores == pytest.approx([window["scores"][i] for i in order])
    assert again.window.win_rates(0.5) == pytest.approx(
        [controller.window.win_rates(0.5)[i] for i in order]
    )
    # a checkpoint written before the window kept results: every snapshot unplayed
    del window["games"], window["scores"]
    older, before = duel(recording.reporter, seed=5, **options)
    older.load_state_dict(state)
    before.start()
    assert (before.window.games, before.window.scores) == ([0, 0, 0], [0.0, 0.0, 0.0])
    assert before.window.win_rates(0.5) == [0.5, 0.5, 0.5]


# -- the keys ------------------------------------------------------------------------------------


def test_the_pfsp_keys_default_to_ml_agents_draw() -> None:
    settings = SelfPlaySettings()
    assert settings.opponent_sampling == "uniform"
    assert (settings.pfsp_weighting, settings.pfsp_exponent, settings.pfsp_prior) == (
        "hard",
        2.0,
        0.5,
    )
    data = {"self_play": {"opponent_sampling": "pfsp", "pfsp_weighting": "variance"}}
    options = RunOptions.from_dict({"behaviors": {"P": data}})
    assert options.behaviors["P"].self_play == SelfPlaySettings(
        opponent_sampling="pfsp", pfsp_weighting="variance"
    )


@pytest.mark.parametrize(
    ("self_play", "problem"),
    [
        (
            {"opponent_sampling": "prioritized"},
            "behaviors.P.self_play.opponent_sampling: expected one of 'uniform', 'pfsp', "
            "got 'prioritized'",
        ),
        (
            {"pfsp_weighting": "soft"},
            "behaviors.P.self_play.pfsp_weighting: expected one of 'hard', 'variance', got 'soft'",
        ),
        ({"pfsp_exponent": 0}, "behaviors.P.self_play.pfsp_exponent: must be > 0.0, got 0.0"),
        ({"pfsp_prior": 1.5}, "behaviors.P.self_play.pfsp_prior: must be <= 1.0, got 1.5"),
        (
            {"pfsp_exponnent": 3},
            "behaviors.P.self_play.pfsp_exponnent: unknown key (did you mean pfsp_exponent?)",
        ),
    ],
)
def test_bad_pfsp_keys_are_named_by_their_key(self_play: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"P": {"self_play": self_play}}})
    assert info.value.problems == (problem,)


# -- through evtrain learn -----------------------------------------------------------------------


def pfsp_options(max_steps: int) -> dict[str, Any]:
    """PPO with PFSP on tic-tac-toe: a snapshot and a draw every 256 steps, never the latest."""
    self_play: dict[str, Any] = {"save_steps": 256, "team_change": 768, "swap_steps": 256}
    self_play.update(play_against_latest_model_ratio=0.0, opponent_sampling="pfsp")
    return tictactoe_self_play(max_steps, self_play)


def summaries(folder: Path, key: str) -> dict[int, dict[str, Any]]:
    lines = [json.loads(line) for line in (folder / "stats.jsonl").read_text().splitlines()]
    return {line["step"]: line["stats"][key] for line in lines if key in line.get("stats", {})}


def saved_window(folder: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(folder / "checkpoint.pt", weights_only=True)
    window: dict[str, Any] = state["attachments"]["self_play"]["window"]
    return window


# PettingZoo's own notice about its ``module:env`` creation (the command prints it, and goes on)
@pytest.mark.filterwarnings("ignore:The old environment creation API:DeprecationWarning")
def test_cli_pfsp_reports_its_draws_and_resumes_with_its_results(tmp_path: Path) -> None:
    result = run_config(tmp_path, pfsp_options(1024))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "results" / "run" / "player"
    entropies = summaries(folder, PFSP_ENTROPY)
    assert sorted(entropies) == [512, 1024]
    assert all(0.0 <= s["mean"] <= math.log(5) for s in entropies.values())
    assert sorted(summaries(folder, POOL_WIN_RATE)) == [512, 1024]
    window = saved_window(folder)
    assert len(window["games"]) == len(window["snapshots"]) == 5  # step 0, then every 256
    games = sum(window["games"])
    assert games > 0 and 0.0 <= sum(window["scores"]) <= games

    result = run_config(tmp_path, pfsp_options(1536), "--resume")
    assert result.returncode == 0, result.stderr
    assert sorted(summaries(folder, PFSP_ENTROPY)) == [512, 1024, 1536]
    after = saved_window(folder)
    assert len(after["games"]) == 7
    # the results of before are kept (none of the 5 snapshots was replaced), and more come
    kept = zip(after["games"][:5], window["games"], strict=True)
    assert all(now >= then for now, then in kept) and sum(after["games"]) > games
