"""``behaviors.<name>.info_stats``: keys of the environment's ``info`` become statistics, with
their aggregation, in every trainer's stepping path (PPO's rollout, SAC's step, the group
trainers' rollout, ``--inference``), for Gymnasium vector environments in both autoreset modes
and PettingZoo agent slots; a reset's info never counts."""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from evtrain import Bus, StatsAggregationMethod, StatsEvent
from evtrain.config.converter import structure
from evtrain.errors import ConfigError
from evtrain.multiagent.slots import AgentSlots
from evtrain.trainers import PPOSettings, TrainerSettings
from evtrain.trainers.base import Trainer
from evtrain.trainers.info_stat_settings import InfoStat
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer
from tests.group_envs import TRAINERS
from tests.group_envs import settings as group_settings
from tests.info_envs import Tally, TallyCountdown, tally_walkers
from tests.trainers.helpers import Recording, small_ppo, small_sac


@pytest.fixture
def recording(bus: Bus) -> Recording:
    """Stats of behavior ``"Test"``, recorded on the test's bus."""
    return Recording(bus, "Test")


INFO_STATS = {
    "coins": InfoStat(aggregation="histogram"),
    "is_success": InfoStat(aggregation="sum", at="episode_end", stat="Custom/Successes"),
    "episode": InfoStat(aggregation="most_recent"),
    "label": InfoStat(),
}

# Two Tally environments (4-step episodes) each take 16 steps in two rollouts.  SAME_STEP: four
# whole episodes each, the even ones successes.  NEXT_STEP: a reset step after each episode
# (not a transition): three episodes and one step of a fourth.
SAME_STEP_COINS = sorted([1, 2, 3, 4] * 4 * 2)
NEXT_STEP_COINS = sorted(([1, 2, 3, 4] * 3 + [1]) * 2)


def tally_envs(mode: AutoresetMode) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.vector.SyncVectorEnv([Tally, Tally], autoreset_mode=mode)


def ppo(mode: AutoresetMode, recording: Recording, summary_freq: int = 10**6) -> Trainer:
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=16, buffer_size=16, num_epoch=1),
        summary_freq=summary_freq,
        info_stats=INFO_STATS,
    )
    return PPOTrainer("Test", settings, tally_envs(mode), recording.reporter, seed=0)


def summary(trainer: Trainer, recording: Recording) -> StatsEvent:
    trainer.write_final_summary()
    recording.flush()
    return recording.stats[-1]


@pytest.mark.parametrize(
    ("mode", "coins", "successes"),
    [
        (AutoresetMode.SAME_STEP, SAME_STEP_COINS, (1, 0, 1, 0)),
        (AutoresetMode.NEXT_STEP, NEXT_STEP_COINS, (1, 0, 1)),
    ],
)
def test_ppo_records_the_info_keys_of_its_rollout(
    recording: Recording,
    caplog: pytest.LogCaptureFixture,
    mode: AutoresetMode,
    coins: list[int],
    successes: tuple[int, ...],
) -> None:
    trainer = ppo(mode, recording)
    with caplog.at_level(logging.WARNING, logger="evtrain.trainers"):
        trainer.advance()
        trainer.advance()  # the warning about "label" is given once
    event = summary(trainer, recording)
    # a histogram of every step's value, the reset's 1000 never among them
    assert sorted(event.values["Environment/coins"].full_dist) == coins
    assert event.values["Environment/coins"].aggregation_method is StatsAggregationMethod.HISTOGRAM
    # only the last step of each episode, under the stat the settings name, summed
    successes_summary = event.values["Custom/Successes"]
    assert sorted(successes_summary.full_dist) == sorted(successes * 2)
    assert successes_summary.aggregated_value == sum(successes) * 2
    assert event.values["Environment/episode"].full_dist == (3.0,)  # most recent
    assert "Environment/label" not in event.values
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == (
        "Test: info_stats key 'label' has a value that is not a number (str 'tally'); such "
        "values are not recorded. Report one number per step under that key, or remove it "
        "from behaviors.Test.info_stats."
    )


def test_sac_records_the_info_keys_of_each_step(recording: Recording) -> None:
    settings = small_sac(summary_freq=10**6, info_stats=INFO_STATS)
    trainer = SACTrainer(
        "Test", settings, tally_envs(AutoresetMode.SAME_STEP), recording.reporter, seed=0
    )
    for _ in range(16):
        trainer.advance()
    event = summary(trainer, recording)
    assert sorted(event.values["Environment/coins"].full_dist) == SAME_STEP_COINS
    assert event.values["Custom/Successes"].full_dist == (1.0, 1.0, 0.0, 0.0) * 2


def test_inference_records_the_info_keys_too(recording: Recording) -> None:
    trainer = ppo(AutoresetMode.SAME_STEP, recording, summary_freq=32)
    trainer.begin_inference()
    for _ in range(16):
        trainer.run_policy()
    recording.flush()
    [event] = recording.stats
    assert event.step == 32
    assert sorted(event.values["Environment/coins"].full_dist) == SAME_STEP_COINS


# Walkers (max_cycles 6): walker_0 acts at steps 1-6, walker_1 at steps 1-2 (then leaves),
# walker_2 at steps 4-6 (it appears after step 3); coins = 10 x step + the walker's index.
WALKER_COINS = sorted([10, 20, 30, 40, 50, 60, 11, 21, 42, 52, 62])


def test_ppo_records_the_info_keys_of_pettingzoo_agents(recording: Recording) -> None:
    slots = AgentSlots([tally_walkers()], "walker")
    settings = small_ppo(
        hyperparameters=PPOSettings(batch_size=18, buffer_size=18, num_epoch=1),
        info_stats={"coins": InfoStat(aggregation="histogram")},
    )
    trainer = PPOTrainer("Test", settings, slots, recording.reporter, seed=0)
    trainer.advance()  # six steps of three slots: one whole episode
    event = summary(trainer, recording)
    # an agent out of its episode (walker_1 after step 2, walker_2 before step 4) says nothing
    assert sorted(event.values["Environment/coins"].full_dist) == WALKER_COINS


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_group_trainers_record_the_info_keys_of_their_agents(
    kind: str, recording: Recording
) -> None:
    slots = AgentSlots([tally_walkers(guide=False), tally_walkers(guide=False)], "walker")
    settings = group_settings(
        kind,
        hyperparameters={"batch_size": 36, "buffer_size": 36},
        info_stats={"coins": InfoStat(aggregation="average", stat="Walkers/Coins")},
    )
    trainer = TRAINERS[kind]("Test", settings, slots, recording.reporter, seed=0)
    trainer.advance()  # six steps of two copies of three slots: one episode of each copy
    event = summary(trainer, recording)
    assert sorted(event.values["Walkers/Coins"].full_dist) == sorted(WALKER_COINS * 2)


def test_turn_based_agents_infos_reach_their_slots() -> None:
    # player_1 learns; player_0 (random) moves first.  Each step is player_1's move and
    # player_0's answer: the info then says the counter after the answer.
    env = TallyCountdown(start=30)
    slots = AgentSlots([env], "player", agent_behaviors={"player_0": "p0"})
    slots.reset(seed=0)
    for _ in range(3):
        _, _, _, _, infos = slots.step(np.zeros(1, dtype=np.int64))  # take 1
        assert (infos["left"].tolist(), infos["_left"].tolist()) == ([env.counter], [True])
    assert 30 - 3 * 4 <= env.counter <= 30 - 3 * 2


def test_info_stats_settings_from_yaml_and_their_errors() -> None:
    settings = structure(
        {"info_stats": {"is_success": "average", "x": {"aggregation": "sum", "stat": "A/B"}}},
        TrainerSettings,
    )
    assert settings.info_stats == {
        "is_success": InfoStat(aggregation="average"),
        "x": InfoStat(aggregation="sum", stat="A/B"),
    }
    with pytest.raises(ConfigError) as error:
        structure(
            {"info_stats": {"a": "mean", "b": {"aggregation": "sum", "when": 1}, "c": 3}},
            TrainerSettings,
            root="behaviors.B",
        )
    assert error.value.problems == (
        "behaviors.B.info_stats.a.aggregation: expected one of 'average', 'most_recent', "
        "'sum', 'histogram', got 'mean'",
        "behaviors.B.info_stats.b.when: unknown key (valid keys: aggregation, stat, at)",
        "behaviors.B.info_stats.c: expected an aggregation (average, most_recent, sum, "
        "histogram) or a mapping {aggregation, stat, at}, got 3",
    )
