"""Self-play (``behaviors.<name>.self_play``, :mod:`evtrain.trainers.ghost`): the settings, the
ELO arithmetic, the window of snapshots, and the ghost controller driving a real PPO trainer on
a two-team environment of agent slots (:mod:`tests.self_play_envs`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evtrain import Bus, ConfigError, LessonChanged, RunOptions, StatsReporter, signals
from evtrain.trainers import PPOTrainer, make_vector_env
from evtrain.trainers.ghost import (
    ELO,
    LATEST,
    GhostController,
    SnapshotWindow,
    expected_score,
    game_score,
    rating_change,
)
from evtrain.trainers.settings import NetworkSettings, SelfPlaySettings
from tests.helpers import saved
from tests.self_play_duel import duel, turns
from tests.self_play_envs import DuelSlots
from tests.trainers.helpers import Recording, small_ppo

# -- settings ------------------------------------------------------------------------------------


def test_the_settings_have_ml_agents_defaults() -> None:
    settings = SelfPlaySettings()
    assert (settings.save_steps, settings.team_change, settings.swap_steps) == (20000, 100000, 2000)
    assert (settings.window, settings.play_against_latest_model_ratio) == (10, 0.5)
    assert settings.initial_elo == 1200.0
    # ML-Agents: team_change defaults to five times save_steps
    assert SelfPlaySettings(save_steps=300).team_change == 1500


def test_self_play_is_a_behavior_option_read_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = {"behaviors": {"P": {"self_play": {"save_steps": 100, "window": 3}}}}
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        options = RunOptions.from_dict(data)
    assert caplog.messages == []
    assert options.behaviors["P"].self_play == SelfPlaySettings(save_steps=100, window=3)
    assert options.as_dict()["behaviors"]["P"]["self_play"]["team_change"] == 500


@pytest.mark.parametrize(
    ("self_play", "problem"),
    [
        (
            {"window": 0},
            "behaviors.P.self_play.window: must be > 0, got 0",
        ),
        (
            {"play_against_latest_model_ratio": 1.5},
            "behaviors.P.self_play.play_against_latest_model_ratio: must be <= 1.0, got 1.5",
        ),
        (
            {"swap_step": 10},
            "behaviors.P.self_play.swap_step: unknown key (did you mean swap_steps?)",
        ),
    ],
)
def test_bad_self_play_settings_are_named_by_their_key(
    self_play: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"P": {"self_play": self_play}}})
    assert info.value.problems == (problem,)


def test_a_recurrent_policy_cannot_self_play_yet() -> None:
    data = {"self_play": {}, "network_settings": {"memory": {"memory_size": 8}}}
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"P": data}})
    assert info.value.problems == (
        "behaviors.P.self_play: the opponents of a recurrent policy (network_settings.memory) "
        "are not supported by evtrain yet; remove memory or self_play",
    )


# -- ELO -----------------------------------------------------------------------------------------


def test_elo_follows_ml_agents_worked_example() -> None:
    # ML-Agents' "ELO Rating System" page: two players at 1200, A wins: 1208 and 1192.
    assert expected_score(1200.0, 1200.0) == 0.5
    assert rating_change(1200.0, 1200.0, 1.0) == 8.0
    assert rating_change(1200.0, 1200.0, 0.0) == -8.0
    assert rating_change(1200.0, 1200.0, 0.5) == 0.0
    # 2100 against 1800: 85 % to win (the page's figure); a win gains 16 x 0.151
    assert expected_score(2100.0, 1800.0) == pytest.approx(1 / (1 + 10**-0.75))
    assert round(expected_score(2100.0, 1800.0), 2) == 0.85
    assert rating_change(2100.0, 1800.0, 1.0) == pytest.approx(16 * (1 - 1 / (1 + 10**-0.75)))


def test_the_sign_of_the_final_reward_is_the_result() -> None:
    assert [game_score(r) for r in (2.0, 1e-9, 0.0, -0.0, -1.0)] == [1.0, 1.0, 0.5, 0.5, 0.0]


# -- the window ----------------------------------------------------------------------------------


def weights(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2,), value)}


def test_the_window_keeps_the_newest_snapshots_with_their_ratings() -> None:
    window = SnapshotWindow(3, initial_elo=1200.0)
    for i in range(5):
        window.elo = 1000.0 + i
        window.save(weights(float(i)))
    assert [float(s["w"][0]) for s in window.snapshots] == [3.0, 4.0, 2.0]  # a ring
    assert window.elos == [1003.0, 1004.0, 1002.0]
    # a game against snapshot 2 moves it the other way; against LATEST, nothing moves
    window.record(2, 5.0)
    assert (window.elo, window.elos[2]) == (1009.0, 997.0)
    window.record(LATEST, 5.0)
    assert window.elo == 1009.0 and window.rating(LATEST) == 1009.0


def test_the_window_round_trips_and_a_smaller_one_keeps_the_newest() -> None:
    window = SnapshotWindow(3, initial_elo=1200.0)
    for i in range(5):
        window.elo = 1000.0 + i
        window.save(weights(float(i)))
    state = window.state_dict()
    same = SnapshotWindow(3, initial_elo=0.0)
    same.load_state_dict(state)
    assert [float(s["w"][0]) for s in same.snapshots] == [2.0, 3.0, 4.0]  # oldest first
    assert same.elos == [1002.0, 1003.0, 1004.0] and same.elo == 1004.0
    same.save(weights(9.0))  # replaces the oldest
    assert [float(s["w"][0]) for s in same.snapshots] == [9.0, 3.0, 4.0]
    smaller = SnapshotWindow(2, initial_elo=0.0)
    smaller.load_state_dict(state)
    assert [float(s["w"][0]) for s in smaller.snapshots] == [3.0, 4.0]
    larger = SnapshotWindow(4, initial_elo=0.0)
    larger.load_state_dict(state)
    larger.save(weights(9.0))
    assert [float(s["w"][0]) for s in larger.snapshots] == [2.0, 3.0, 4.0, 9.0]


# -- the controller on a real PPO trainer --------------------------------------------------------


@pytest.fixture
def recording(bus: Bus) -> Recording:
    return Recording(bus, "duel")


def test_the_start_saves_the_first_snapshot_and_installs_a_sampling_opponent(
    recording: Recording,
) -> None:
    trainer, controller = duel(recording.reporter)
    envs = trainer.envs
    assert isinstance(envs, DuelSlots)
    assert len(controller.window) == 1 and envs.learning_team == 0
    opponent = controller.opponent
    assert opponent is not None and envs.co_players == {"duel": opponent}
    recording.flush()
    assert [(p.property_type.value, p.value) for p in recording.properties[1:]] == [
        ("selfplay", True)
    ]
    # the untrained policy is near uniform: the opponent samples, it does not take the argmax
    moves = opponent(np.tile([1.0, 0.0], (300, 1)).astype(np.float32))
    assert sorted(set(moves.tolist())) == [0, 1, 2]
    # a frozen copy: training moves the trainer's weights, not the opponent's
    before = {k: v.clone() for k, v in opponent.module.state_dict().items()}
    trainer.advance()
    after = opponent.module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    now = trainer.sampling_policy_module(opponent.generator).state_dict()
    assert not all(torch.equal(before[k], now[k]) for k in before)


def test_teams_snapshots_and_swaps_follow_the_learning_teams_steps(recording: Recording) -> None:
    trainer, controller = duel(
        recording.reporter, save_steps=128, team_change=256, swap_steps=64, window=2
    )
    envs = trainer.envs
    assert isinstance(envs, DuelSlots)
    learning, swaps, sizes = [], [], []
    for _ in range(8):  # 64 steps a turn
        opponent_before = controller.last_swap
        turns(trainer, controller, 1)
        learning.append(envs.learning_team)
        swaps.append(controller.last_swap != opponent_before)
        sizes.append(len(controller.window))
    assert learning == [0, 0, 0, 1, 1, 1, 1, 0]  # every 256 steps: at 256, 512
    assert swaps == [True] * 8  # every 64 steps
    assert sizes == [1, 2, 2, 2, 2, 2, 2, 2]  # at 128, 256, ...: a window of two
    assert (controller.last_save, controller.last_team_change) == (512, 512)
    assert trainer.step == 512


def test_elo_moves_against_snapshots_and_never_against_the_latest_policy(
    recording: Recording,
) -> None:
    mirror = StatsReporter(recording.bus, "mirror")
    trainer, controller = duel(mirror, play_against_latest_model_ratio=1.0)
    turns(trainer, controller, 4)
    assert controller.elo == 1200.0  # every game against itself: the changes cancel
    trainer, controller = duel(recording.reporter, play_against_latest_model_ratio=0.0)
    turns(trainer, controller, 8)  # PPO learns to show 2 against the first snapshot's draws
    assert controller.window.elos == pytest.approx([2400.0 - controller.elo])
    assert controller.elo > 1300.0
    trainer.write_final_summary()
    recording.flush()
    reported = [e.values[ELO] for e in recording.stats if e.category == "duel"]
    assert sum(s.num for s in reported) == 8 * 64  # one rating per episode
    assert reported[-1].full_dist[-1] == controller.elo


def test_self_play_needs_two_teams_of_the_behavior(recording: Recording) -> None:
    settings = small_ppo(self_play=SelfPlaySettings())
    assert settings.self_play is not None
    gym_envs = make_vector_env("CartPole-v1", 2)
    trainer = PPOTrainer("CartPole", settings, gym_envs, recording.reporter, seed=0)
    with pytest.raises(ConfigError) as info:
        GhostController(trainer, settings.self_play)
    assert info.value.problems == (
        "behaviors.CartPole.self_play: self-play needs a multi-agent (PettingZoo) environment "
        "whose agents of behavior 'CartPole' form two teams; this environment has one agent (a "
        "Gymnasium environment): remove self_play, or train a PettingZoo environment",
    )
    gym_envs.close()
    for teams in ((0,), (0, 1, 2)):
        trainer = PPOTrainer(
            "duel", settings, DuelSlots(2, teams=teams), recording.reporter, seed=0
        )
        with pytest.raises(ConfigError) as info:
            GhostController(trainer, settings.self_play)
        listed = ", ".join(f"team {team}: duel" for team in teams)
        assert info.value.problems == (
            f"behaviors.duel.self_play: the self-playing agents of the environment form "
            f"{len(teams)} team(s) ({listed}); evtrain's self-play plays exactly two teams "
            "against each other (ML-Agents' ELO rates two): with env_settings.agent_behaviors, "
            "make them two teams of the behavior ('duel?team=0', 'duel?team=1'), or a team of "
            "it against a team of another behavior with self_play ('duel?team=0', "
            "'<other>?team=1'); or remove self_play",
        )


def test_the_checkpoint_keeps_ratings_snapshots_team_and_counters(
    recording: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    options: dict[str, Any] = dict(save_steps=128, team_change=192, swap_steps=64, window=3)
    trainer, controller = duel(recording.reporter, play_against_latest_model_ratio=0.0, **options)
    turns(trainer, controller, 5)
    state = saved(trainer)
    assert set(state["attachments"]) == {"self_play"}
    resumed, again = duel(
        recording.reporter, seed=5, play_against_latest_model_ratio=0.0, **options
    )
    resumed.load_state_dict(state)
    with caplog.at_level(logging.INFO, logger="evtrain"):
        again.start()
    assert caplog.messages == [
        f"duel: self-play resumes at ELO {controller.elo:.3f}, 3 snapshot(s), team 1 learning"
    ]
    assert again.elo == controller.elo != 1200.0
    assert again.window.elos == controller.window.elos
    for mine, theirs in zip(again.window.snapshots, controller.window.snapshots, strict=True):
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert (again.learning_team, resumed.envs.learning_team) == (1, 1)
    assert (again.last_save, again.last_team_change) == (controller.last_save, 192)
    elo = again.elo
    turns(resumed, again, 2)
    assert again.elo != elo  # and it keeps moving
    # --initialize-from: the weights only; self-play starts afresh
    fresh, fresh_controller = duel(recording.reporter, seed=5, **options)
    fresh.load_weights(state)
    assert fresh_controller.elo == 1200.0 and fresh_controller.learning_team == 0


def test_a_checkpoint_without_self_play_leaves_it_starting_afresh(recording: Recording) -> None:
    settings = small_ppo()
    plain = PPOTrainer("duel", settings, DuelSlots(4), recording.reporter, seed=0)
    plain.advance()
    state = saved(plain)
    assert "attachments" not in state  # a state as before there were attachments
    trainer, controller = duel(recording.reporter)
    trainer.load_state_dict(state)
    controller.start()
    assert controller.elo == 1200.0 and len(controller.window) == 1


# -- completion_criteria.measure: Elo ------------------------------------------------------------

ELO_CURRICULUM = {
    "level": {
        "curriculum": [
            {
                "name": "rated",
                "value": 1.0,
                "completion_criteria": {"behavior": "duel", "measure": "Elo", "threshold": 1300},
            },
            {"name": "strong", "value": 2.0},
        ]
    }
}


def test_an_elo_criterion_ends_the_lesson_at_the_first_summary_past_its_threshold(
    bus: Bus, tmp_path: Path
) -> None:
    from evtrain.run.checkpoints.training_status import TrainingStatus
    from evtrain.run.parameters.curriculum import Curriculum
    from evtrain.world import World

    data = {"behaviors": {"duel": {"self_play": {}}}, "environment_parameters": ELO_CURRICULUM}
    parameters = RunOptions.from_dict(data).environment_parameters
    status = TrainingStatus(tmp_path / "training_status.json")
    curriculum = Curriculum(parameters, bus=bus, status=status, world=World(), restore=False)
    changes: list[LessonChanged] = []
    bus.connect(signals.lesson_changed, changes.append)
    trainer, controller = duel(
        curriculum.reporter(bus, "duel", 10_000), play_against_latest_model_ratio=0.0
    )
    at_summaries = []
    for _ in range(8):
        turns(trainer, controller, 1)
        if trainer.step % 256 == 0:  # summary_freq
            at_summaries.append((trainer.step, controller.elo))
    bus.flush()
    passed = [step for step, elo in at_summaries if elo > 1300.0]
    assert passed == [512] and at_summaries[0][1] < 1300.0  # not yet at the first summary
    assert [(c.lesson_name, c.step) for c in changes] == [("strong", 512)]
    assert curriculum.lessons == {"level": 1}


def test_an_elo_criterion_needs_a_self_playing_behavior() -> None:
    data = {"behaviors": {"duel": {}}, "environment_parameters": ELO_CURRICULUM}
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(data)
    assert info.value.problems == (
        "environment_parameters.level.curriculum.0.completion_criteria.measure: Elo is the "
        "rating of self-play, and behavior 'duel' has no self_play; add "
        "behaviors.duel.self_play or measure reward or progress",
    )


def test_a_trainer_that_cannot_sample_plays_its_most_likely_action(recording: Recording) -> None:
    from evtrain.trainers import SACTrainer
    from tests.trainers.helpers import small_sac

    envs = DuelSlots(2)
    trainer = SACTrainer("duel", small_sac(), envs, recording.reporter, seed=0)
    module = trainer.sampling_policy_module(torch.Generator())
    assert type(module) is type(trainer.policy_module())
    obs = torch.tensor([[1.0, 0.0]] * 50)
    assert len(set(module(obs).tolist())) == 1  # the same action every time


def test_the_opponent_plays_only_legal_moves_of_a_real_game(recording: Recording) -> None:
    import pettingzoo

    from evtrain.multiagent.slots import AgentSlots

    envs = AgentSlots([pettingzoo.make("aec", "classic/tictactoe-v3")], "player", self_play=True)
    network = NetworkSettings(hidden_units=16, num_layers=1, vis_encode_type="fully_connected")
    settings = small_ppo(self_play=SelfPlaySettings(), network_settings=network)
    trainer = PPOTrainer("player", settings, envs, recording.reporter, seed=0)
    assert settings.self_play is not None
    controller = GhostController(trainer, settings.self_play)
    controller.start()
    legal = np.random.default_rng(0).integers(0, 9, size=200)
    masks = np.eye(9, dtype=np.int8)[legal]  # one legal move each
    obs = {"action_mask": masks, "observation": np.zeros((200, 3, 3, 2), np.int8)}
    assert controller.opponent is not None
    assert controller.opponent(obs).tolist() == legal.tolist()
    envs.close()
