"""A Unity run's side channels in ``evtrain learn`` over two instances of the stand-in corridor:
the statistics the builds record reach the behavior's statistics with their aggregation method
(``progress.csv``, TensorBoard), and ``environment_parameters`` (constants, samplers, a
curriculum's lessons) reach every instance as ML-Agents sends them."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain.bus import Bus
from evtrain.bus.reporter import StatsReporter
from evtrain.events.stats import StatsAggregationMethod
from evtrain.run.environments.build_channels import record_environment_stats
from evtrain.unity.side_channels import SideChannel, SideChannelRouter, StatsSideChannel
from tests.helpers import free_port, run_cli, tensorboard_scalars
from tests.standin import make_build, wire

CORRIDOR: dict[str, Any] = {
    "trainer_type": "ppo",
    "hyperparameters": {"batch_size": 32, "buffer_size": 128, "learning_rate": 0.003},
    "network_settings": {"hidden_units": 16, "num_layers": 1},
    "max_steps": 768,
    "time_horizon": 16,
    "summary_freq": 256,
}


def learn(tmp_path: Path, **sections: Any) -> Path:
    """``evtrain learn`` on two corridor instances (seed 1); the run's folder."""
    build = make_build(tmp_path / "builds", "corridor", "Basic")
    data: dict[str, Any] = {
        "behaviors": {"Basic": CORRIDOR},
        "env_settings": {"env_path": str(build), "seed": 1, "num_envs": 2},
        "checkpoint_settings": {"run_id": "channels", "results_dir": str(tmp_path / "results")},
        "writers": {"csv": {}},
        **sections,
    }
    data["env_settings"]["base_port"] = free_port()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_cli("run.yaml", "--time-scale", "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path / "results/channels"


def column(run: Path, key: str) -> list[float]:
    """The values of ``key`` in the corridor's ``progress.csv``, periods without one left out."""
    with (run / "Basic/progress.csv").open() as f:
        return [float(row[key]) for row in csv.DictReader(f) if row.get(key)]


def parameter_lines(run: Path, worker_id: int) -> list[str]:
    """What instance ``worker_id`` logged of the environment parameters it received and of its
    resets, in order."""
    log = (run / f"run_logs/Player-{worker_id}.log").read_text().splitlines()
    return [line for line in log if line.startswith(("env_param:", "command: RESET"))]


def test_statistics_a_build_sends_reach_the_behavior_with_their_aggregation(
    tmp_path: Path,
) -> None:
    # Six periods: a MOST_RECENT taken from either instance would show instance 1's seed.
    run = learn(tmp_path, behaviors={"Basic": {**CORRIDOR, "summary_freq": 128}})
    cells = column(run, "Basic/Goal Cell")  # AVERAGE of 7s and 17s
    assert cells and all(7 <= cell <= 17 for cell in cells), cells
    assert any(7 < cell < 17 for cell in cells), cells  # a mean, not one value
    goals = column(run, "Basic/Goals")  # SUM of 1s over both instances
    assert goals and all(g == int(g) for g in goals) and max(goals) > 1, goals
    # MOST_RECENT from instance 0 only: its seed (1), never instance 1's (2).
    assert column(run, "Basic/Seed") and set(column(run, "Basic/Seed")) == {1.0}
    steps = column(run, "Basic/Goal Steps")  # HISTOGRAM: its mean, at least 3 steps to a goal
    assert steps and all(s >= 3 for s in steps), steps
    tensorboard = [value for _, value in tensorboard_scalars(run / "Basic", "Basic/Seed")]
    assert tensorboard and set(tensorboard) == {1.0}
    accumulator = EventAccumulator(str(run / "Basic"), size_guidance={"histograms": 0})
    accumulator.Reload()
    histograms = {
        h.step: h.histogram_value for h in accumulator.Histograms("Basic/Goal Steps_hist")
    }
    means = dict(tensorboard_scalars(run / "Basic", "Basic/Goal Steps"))
    assert histograms and histograms.keys() == means.keys()
    for step, histogram in histograms.items():  # the scalar is the mean of the histogram's values
        assert histogram.min >= 3 and histogram.num > 0
        assert abs(histogram.sum / histogram.num - means[step]) < 1e-3 * means[step]


def test_every_behavior_gets_every_statistic_of_every_instance() -> None:
    instances: list[dict[str, SideChannel]] = [{"stats": StatsSideChannel()} for _ in range(2)]
    for worker_id, instance in enumerate(instances):
        SideChannelRouter(list(instance.values())).incoming(
            wire.stat_message("Goals", 1.0, wire.STATS_SUM)
            + wire.stat_message("Seed", worker_id, wire.STATS_MOST_RECENT)
            + wire.stat_message("Cell", 7.0 + 10 * worker_id, wire.STATS_HISTOGRAM)
        )
    with Bus() as bus:
        reporters = [StatsReporter(bus, "Striker"), StatsReporter(bus, "Goalie")]
        record_environment_stats(instances, reporters)
        record_environment_stats(instances, reporters)  # the channels were emptied
        for reporter in reporters:
            goals, seed = (
                reporter.get_stats_summaries("Goals"),
                reporter.get_stats_summaries("Seed"),
            )
            cell = reporter.get_stats_summaries("Cell")
            assert (goals.full_dist, goals.aggregation_method) == ((1.0, 1.0), _SUM)
            assert (seed.full_dist, seed.aggregation_method) == ((0.0,), _MOST_RECENT)
            assert (cell.full_dist, cell.aggregation_method) == ((7.0, 17.0), _HISTOGRAM)


_SUM, _MOST_RECENT = StatsAggregationMethod.SUM, StatsAggregationMethod.MOST_RECENT
_HISTOGRAM = StatsAggregationMethod.HISTOGRAM


def test_constants_and_samplers_reach_every_instance_before_its_first_reset(
    tmp_path: Path,
) -> None:
    parameters = {
        "gravity": 2.5,
        "size": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 1, "max_value": 2}},
        "mass": {"sampler_type": "gaussian", "sampler_parameters": {"mean": 3, "st_dev": 0.5}},
        "gap": {
            "sampler_type": "multirangeuniform",
            "sampler_parameters": {"intervals": [[0, 1], [4, 5]], "seed": 7},
        },
    }
    run = learn(tmp_path, environment_parameters=parameters)
    # Seeds of -1 become seed + their index (the constant counts), as ML-Agents makes them.
    expected = [
        "env_param: gravity=2.5",
        "env_param: size=uniform(1.0, 2.0, seed=2)",
        "env_param: mass=gaussian(3.0, 0.5, seed=3)",
        "env_param: gap=multirangeuniform([0.0, 1.0, 4.0, 5.0], seed=7)",
        "command: RESET",
    ]
    for worker_id in (0, 1):
        assert parameter_lines(run, worker_id) == expected


def test_a_lesson_change_reaches_every_instance(tmp_path: Path) -> None:
    lessons = [
        {
            "name": "near",
            "value": 0.5,
            "completion_criteria": {
                "behavior": "Basic",
                "measure": "progress",
                "threshold": 0.2,
                "min_lesson_length": 1,
            },
        },
        {"name": "far", "value": {"sampler_type": "uniform", "sampler_parameters": {}}},
    ]
    parameters = {"goal": {"curriculum": lessons}, "speed": 4.0}
    run = learn(tmp_path, environment_parameters=parameters)
    for worker_id in (0, 1):
        # Every parameter again after the change, with the next step (no reset).
        assert parameter_lines(run, worker_id) == [
            "env_param: goal=0.5",
            "env_param: speed=4.0",
            "command: RESET",
            "env_param: goal=uniform(0.0, 1.0, seed=2)",
            "env_param: speed=4.0",
        ]
    assert column(run, "Environment/Lesson Number/goal") == [0.0, 1.0, 1.0]
