"""ConsoleWriter: the exact ML-Agents progress line and hyperparameter block."""

from __future__ import annotations

import logging

import pytest

from evtrain import (
    Bus,
    PropertyEvent,
    StatsAggregationMethod,
    StatsEvent,
    StatsPropertyType,
    StatsSummary,
    signals,
)
from evtrain.ranks import get_world_size
from evtrain_writers import ConsoleWriter


class FakeClock:
    """Seconds that only move when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)


@pytest.fixture(autouse=True)
def info_on_evtrain(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="evtrain")


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Messages logged at INFO on the ``evtrain`` logger."""
    return [
        r.getMessage() for r in caplog.records if r.name == "evtrain" and r.levelno == logging.INFO
    ]


def summary(*values: float) -> StatsSummary:
    return StatsSummary(full_dist=values)


def writer_at(elapsed: float) -> ConsoleWriter:
    clock = FakeClock()
    writer = ConsoleWriter(clock=clock)
    clock.now += elapsed
    return writer


def test_training_line(caplog: pytest.LogCaptureFixture) -> None:
    writer_at(123.4567).write_stats(
        "3DBall",
        {
            "Environment/Cumulative Reward": summary(0.5, 1.5),
            "Is Training": summary(1.0),
            "Policy/Entropy": summary(1.4),
        },
        50000,
    )
    assert logged(caplog) == [
        "3DBall. Step: 50000. Time Elapsed: 123.457 s. Mean Reward: 1.000. "
        "Std of Reward: 0.500. Training."
    ]


@pytest.mark.parametrize("is_training", [None, 0.0])
def test_not_training_line(caplog: pytest.LogCaptureFixture, is_training: float | None) -> None:
    values = {"Environment/Cumulative Reward": summary(-1.0)}
    if is_training is not None:
        values["Is Training"] = summary(is_training)
    writer_at(2.0).write_stats("Walker", values, 10)
    assert logged(caplog) == [
        "Walker. Step: 10. Time Elapsed: 2.000 s. Mean Reward: -1.000. Std of Reward: 0.000. "
        "Not Training."
    ]


def test_no_episode_line(caplog: pytest.LogCaptureFixture) -> None:
    writer = writer_at(0.25)
    writer.write_stats("Walker", {"Is Training": summary(1.0)}, 20)
    writer.write_stats("Walker", {}, 30)
    assert logged(caplog) == [
        "Walker. Step: 20. Time Elapsed: 0.250 s. "
        "No episode was completed since last summary. Training.",
        "Walker. Step: 30. Time Elapsed: 0.250 s. "
        "No episode was completed since last summary. Not Training.",
    ]


def test_rank_shown_when_distributed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    writer = writer_at(1.0)
    writer.write_stats(
        "B", {"Environment/Cumulative Reward": summary(2.0), "Is Training": summary(1.0)}, 5
    )
    writer.write_stats("B", {"Is Training": summary(1.0)}, 6)
    assert logged(caplog) == [
        "B. Step: 5. Time Elapsed: 1.000 s. Rank: 3. Mean Reward: 2.000. Std of Reward: 0.000. "
        "Training.",
        "B. Step: 6. Time Elapsed: 1.000 s. Rank: 3. "
        "No episode was completed since last summary. Training.",
    ]


def test_rank_hidden_in_a_one_process_job(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    writer_at(1.0).write_stats("B", {"Environment/Cumulative Reward": summary(2.0)}, 5)
    assert logged(caplog) == [
        "B. Step: 5. Time Elapsed: 1.000 s. Mean Reward: 2.000. Std of Reward: 0.000. Not Training."
    ]


def test_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert get_world_size() == 8
    monkeypatch.setenv("WORLD_SIZE", "eight")
    with pytest.raises(ValueError, match="WORLD_SIZE environment variable must be an integer"):
        get_world_size()


def test_group_reward_replaces_std(caplog: pytest.LogCaptureFixture) -> None:
    writer_at(1.0).write_stats(
        "Soccer",
        {
            "Environment/Cumulative Reward": summary(1.0, 3.0),
            "Environment/Group Cumulative Reward": summary(4.0),
            "Is Training": summary(1.0),
        },
        7,
    )
    assert logged(caplog) == [
        "Soccer. Step: 7. Time Elapsed: 1.000 s. Mean Reward: 2.000. "
        "Mean Group Reward: 4.000. Training."
    ]


def test_self_play_adds_elo(caplog: pytest.LogCaptureFixture) -> None:
    writer = writer_at(1.0)
    values = {
        "Environment/Cumulative Reward": summary(1.0),
        "Is Training": summary(1.0),
        "Self-play/ELO": summary(1210.0, 1220.0),
    }
    writer.write_stats("Soccer", values, 1)
    writer.add_property("Soccer", StatsPropertyType.SELF_PLAY, True)
    writer.write_stats("Soccer", values, 2)
    assert logged(caplog) == [
        "Soccer. Step: 1. Time Elapsed: 1.000 s. Mean Reward: 1.000. Std of Reward: 0.000. "
        "Training.",
        "Soccer. Step: 2. Time Elapsed: 1.000 s. Mean Reward: 1.000. Std of Reward: 0.000. "
        "Training. ELO: 1215.000.",
    ]
    with pytest.raises(TypeError, match="SELF_PLAY property must be a bool, got 'yes'"):
        writer.add_property("Soccer", StatsPropertyType.SELF_PLAY, "yes")


def test_mean_not_aggregated_value_is_shown(caplog: pytest.LogCaptureFixture) -> None:
    # ML-Agents prints the mean of the rewards whatever their aggregation.
    reward = StatsSummary(full_dist=(1.0, 2.0), aggregation_method=StatsAggregationMethod.SUM)
    writer_at(1.0).write_stats("B", {"Environment/Cumulative Reward": reward}, 1)
    assert "Mean Reward: 1.500. Std of Reward: 0.500. Not Training." in logged(caplog)[0]


def test_hyperparameters_logged_once_per_category(caplog: pytest.LogCaptureFixture) -> None:
    writer = writer_at(0.0)
    hyperparameters = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 1024, "learning_rate": 0.0003, "schedule": {}},
        "network_settings": {"memory": None, "layers": {"hidden_units": 128}},
        "example": 1.0,
    }
    writer.add_property("3DBall", StatsPropertyType.HYPERPARAMETERS, hyperparameters)
    writer.add_property("3DBall", StatsPropertyType.HYPERPARAMETERS, hyperparameters)
    writer.add_property("Walker", StatsPropertyType.HYPERPARAMETERS, {"example": 2})
    assert logged(caplog) == [
        "Hyperparameters for behavior name 3DBall:\n"
        "\ttrainer_type:\tppo\n"
        "\thyperparameters:\n"
        "\t  batch_size:\t1024\n"
        "\t  learning_rate:\t0.0003\n"
        "\t  schedule:\t{}\n"
        "\tnetwork_settings:\n"
        "\t  memory:\tNone\n"
        "\t  layers:\n"
        "\t    hidden_units:\t128\n"
        "\texample:\t1.0",
        "Hyperparameters for behavior name Walker:\n\texample:\t2",
    ]


def test_through_a_bus_on_every_rank(caplog: pytest.LogCaptureFixture) -> None:
    assert ConsoleWriter.ranks is None
    with Bus(rank=2) as bus:
        assert bus.add_writer(ConsoleWriter()).active
        bus.emit(
            signals.hyperparameters,
            PropertyEvent(
                category="B", property_type=StatsPropertyType.HYPERPARAMETERS, value={"a": 1}
            ),
        )
        bus.emit(signals.stats, StatsEvent(category="B", step=3, values={}))
    hyperparameters, line = logged(caplog)
    assert hyperparameters == "Hyperparameters for behavior name B:\n\ta:\t1"
    assert line.startswith("B. Step: 3. Time Elapsed: ")
    assert line.endswith(" s. No episode was completed since last summary. Not Training.")
