"""Subscribers that stop a run: a handler returning ``evtrain.StopRun`` (sync, async,
process-isolated, spool), ``StopOnReward`` and ``StopOnPlateau`` on crafted events, and
``behaviors.<name>.stop`` in a config, in-process and through the CLI."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest

from evtrain import (
    Bus,
    EvaluationEvent,
    RunFinished,
    RunStatus,
    StatsEvent,
    StatsSummary,
    StopOnPlateau,
    StopOnReward,
    StopRun,
    signals,
)
from evtrain.config.converter import structure
from evtrain.errors import ConfigError
from evtrain.events.stats import CUMULATIVE_REWARD as REWARD
from evtrain.run.learn import learn
from evtrain.run.stops import connect_stops
from evtrain.testing import Recorder
from evtrain.trainers import TrainerSettings
from tests.helpers import ROOT, config, run_cli, stats_event, tensorboard_scalars


def summary(step: int, key: str, value: float, category: str = "CartPole") -> StatsEvent:
    """A summary with one value of ``key``."""
    return StatsEvent(category=category, step=step, values={key: StatsSummary(full_dist=[value])})


def evaluation(step: int, mean: float, category: str = "CartPole") -> EvaluationEvent:
    returns = (mean - 1, mean + 1)
    return EvaluationEvent(category=category, step=step, returns=returns, lengths=(9, 9))


def test_a_handler_that_returns_stop_run_stops_the_run() -> None:
    with Bus() as bus:

        def enough(event: StatsEvent) -> StopRun | None:
            return StopRun(f"enough at {event.step}") if event.step >= 2 else None

        bus.connect(signals.stats, enough, name="enough")
        for step in range(4):
            bus.emit(signals.stats, stats_event(step))
        bus.flush()
        request = bus.take_stop_request()
    assert request is not None
    assert (request.reason, request.by) == ("enough at 2", "enough")  # the first wins


def test_an_async_handler_returning_stop_run_stops_the_run_too() -> None:
    with Bus() as bus:

        async def enough(event: StatsEvent) -> StopRun:
            return StopRun("async enough")

        bus.connect(signals.stats, enough, name="async-enough")
        bus.emit(signals.stats, stats_event(1))
        bus.flush()
        request = bus.stop_request
    assert request is not None and (request.reason, request.by) == ("async enough", "async-enough")


@pytest.mark.parametrize("options", [{"isolation": "process"}, {"overflow": "spool"}])
def test_stop_run_from_an_isolated_or_spool_subscriber(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    with Bus(journal_dir=tmp_path) as bus:
        # StopOnReward is a module-level class of plain values: a spawned child unpickles it
        bus.connect(signals.stats, StopOnReward(5.0), name="stopper", **options)
        bus.emit(signals.stats, summary(7, REWARD, 6.5))
        bus.flush()
        request = bus.stop_request
    assert request is not None
    assert request.by == "stopper"
    assert request.reason == (
        "CartPole: Environment/Cumulative Reward reached 6.5 (stop.reward 5) at step 7"
    )


def test_stop_on_reward_watches_one_stat_of_one_behavior() -> None:
    stop = StopOnReward(10.0, behavior="CartPole")
    assert stop(summary(1, REWARD, 9.5)) is None
    assert stop(summary(1, "Losses/Policy Loss", 99.0)) is None
    assert stop(summary(2, REWARD, 10.0)) == StopRun(
        "CartPole: Environment/Cumulative Reward reached 10 (stop.reward 10) at step 2"
    )
    on_evaluations = StopOnReward(10.0, stat="Evaluation/Mean Return")
    assert on_evaluations(evaluation(300, 12.0)) == StopRun(
        "CartPole: Evaluation/Mean Return reached 12 (stop.reward 10) at step 300"
    )
    with Bus() as bus:
        stop.connect(bus)
        # another behavior's summaries never reach it
        bus.emit(signals.stats, summary(3, REWARD, 50, "Other"))
        bus.flush()
        assert bus.stop_request is None


def test_stop_on_plateau_counts_evaluations_without_improvement() -> None:
    events = [(100, 1.0), (200, 2.0), (300, 2.05), (400, 1.5), (500, 2.5), (600, 2.55)]
    events += [(700, 2.0), (800, 2.6)]  # 2.55 (< 2.5 + 0.1) to 2.6: three without improving
    with Bus() as bus:
        StopOnPlateau(patience=3, min_delta=0.1, behavior="CartPole").connect(bus)
        for step, mean in events:
            bus.emit(signals.evaluation, evaluation(step, mean))
            bus.emit(signals.evaluation, evaluation(step, mean + 10, "Other"))  # not watched
        bus.flush()
        request = bus.stop_request
    assert request is not None
    assert request.by == "evtrain.stop.plateau[CartPole]"
    assert request.reason == (
        "CartPole: Evaluation/Mean Return did not improve on its best 2.5 (step 500) by more "
        "than 0.1 in 3 evaluations (stop.plateau patience 3); the last was 2.6 at step 800"
    )


def test_stop_on_plateau_refuses_a_patience_below_one() -> None:
    with pytest.raises(ValueError, match="patience must be at least 1, got 0"):
        StopOnPlateau(patience=0)


def test_stop_settings_from_yaml_and_their_errors() -> None:
    settings = structure({"stop": {"reward": 475, "plateau": {"patience": 5}}}, TrainerSettings)
    assert settings.stop is not None and settings.stop.reward == 475.0
    assert settings.stop.plateau is not None and settings.stop.plateau.patience == 5
    with pytest.raises(ConfigError) as error:
        structure(
            {"stop": {"reward": "high", "plateau": {"patience": 0}, "after": 3}},
            TrainerSettings,
            root="behaviors.B",
        )
    assert error.value.problems == (
        "behaviors.B.stop.reward: expected a number, got 'high'",
        "behaviors.B.stop.plateau.patience: must be > 0, got 0",
        "behaviors.B.stop.after: unknown key (valid keys: reward, reward_stat, plateau)",
    )


def test_stop_reward_in_the_config_stops_the_run_with_its_reason(tmp_path: Path) -> None:
    finished = Recorder()
    with Bus() as bus:
        bus.connect(signals.run_finished, finished)
        # a random CartPole policy's episodes last 9 steps at least: a mean return >= 9
        result = learn(config(tmp_path, max_steps=100_000, stop={"reward": 9.0}), bus)
    reason = "CartPole: Environment/Cumulative Reward reached"
    assert result.status is RunStatus.STOPPED
    assert result.stop_reason is not None and result.stop_reason.startswith(reason)
    assert result.stop_reason.endswith("(stop.reward 9) at step 256")
    assert result.steps["CartPole"] < 100_000
    (event,) = finished.of(RunFinished)
    assert (event.status, event.reason) == (RunStatus.STOPPED, result.stop_reason)
    onnxruntime.InferenceSession(str(result.models["CartPole"]))


def test_the_corridor_example_stops_once_every_episode_succeeds(tmp_path: Path) -> None:
    # the CLI, from the repository root, as the example's comment says
    example = "examples/custom_env/corridor_stop.yaml"
    assert f"#   evtrain learn {example}" in (ROOT / example).read_text()
    result = run_cli(example, "--results-dir", str(tmp_path), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    reason = "Corridor: Environment/Success Rate reached 1 (stop.reward 1) at step "
    assert f"Stopped early at a subscriber's request: {reason}" in result.stdout
    run = tmp_path / "corridor_stop"
    # the info's is_success, one value per episode: a success rate that reached 1
    rates = tensorboard_scalars(run / "Corridor", "Environment/Success Rate")
    assert max(rate for _, rate in rates) == 1.0 and min(rate for _, rate in rates) >= 0.0
    assert rates[-1][0] < 50_000  # max_steps: stopped long before
    session = onnxruntime.InferenceSession(str(run / "Corridor.onnx"))
    assert session.get_inputs()[0].shape[-1] == 1


def test_stop_plateau_on_a_stats_key_in_the_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the first summary sets the best; the second cannot beat it by 1000
    stop = {"plateau": {"patience": 1, "min_delta": 1000, "stat": REWARD}}
    with caplog.at_level(logging.WARNING, logger="evtrain.run"):
        result = learn(config(tmp_path, max_steps=100_000, stop=stop))
    assert result.status is RunStatus.STOPPED
    assert result.stop_reason is not None
    assert result.stop_reason.startswith(f"CartPole: {REWARD} did not improve on its best ")
    assert "(step 256) by more than 1000 in 1 summaries (stop.plateau patience 1)" in (
        result.stop_reason
    )
    assert result.stop_reason.endswith("at step 512")
    assert not [r for r in caplog.records if "stop.plateau" in r.getMessage()]


def test_a_stop_on_evaluations_without_evaluation_settings_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = structure({"stop": {"plateau": {"patience": 2}}}, TrainerSettings)
    with Bus() as bus, caplog.at_level(logging.WARNING, logger="evtrain.run"):
        handles = connect_stops(bus, "CartPole", settings)
    assert len(handles) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "behaviors.CartPole.stop.plateau.stat is 'Evaluation/Mean Return', but behavior "
        "CartPole has no evaluation settings: that stat is never reported, and this condition "
        "never stops the run. Set behaviors.CartPole.evaluation, or watch a stats key "
        "(plateau.stat: Environment/Cumulative Reward)."
    ]


def test_stop_plateau_on_evaluations_stops_the_run_after_patience_evaluations(
    tmp_path: Path,
) -> None:
    # The first evaluation sets the best; the next cannot beat it by 1000.
    stop = {"plateau": {"patience": 1, "min_delta": 1000}}
    evaluation = {"every": 256, "episodes": 2, "num_envs": 2, "best_model": False}
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus, signals.evaluation, signals.run_finished)
        result = learn(config(tmp_path, max_steps=100_000, stop=stop, evaluation=evaluation), bus)
    evaluations = recorder.of(EvaluationEvent)
    assert [e.step for e in evaluations[:2]] == [256, 512]
    assert result.status is RunStatus.STOPPED
    assert result.stop_reason is not None
    assert result.stop_reason.startswith("CartPole: Evaluation/Mean Return did not improve")
    assert "(step 256) by more than 1000 in 1 evaluations" in result.stop_reason
    (finished,) = recorder.of(RunFinished)
    assert finished.reason == result.stop_reason
    assert result.steps["CartPole"] < 100_000
