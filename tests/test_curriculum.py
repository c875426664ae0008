"""``environment_parameters``: options and their errors, the samplers, the wrapper that sets
values on environments, and real runs whose lessons move (sync and async, resumed, through
the CLI with ML-Agents' own curriculum file)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from evtrain import Bus, LessonChanged, RunOptions, StatsEvent
from evtrain.config.environment_parameters import (
    CompletionCriteria,
    Constant,
    EnvironmentParameter,
    Gaussian,
    Lesson,
    MultiRangeUniform,
    Uniform,
)
from evtrain.errors import ConfigError
from evtrain.run.parameters.env_parameters import EnvironmentParameters
from tests.curriculum_envs import (
    CURRICULUM,
    ParameterEnv,
    check_curriculum_returns,
    progress,
    recorded_run,
    returns,
    run_options,
)
from tests.helpers import run_config, tensorboard_scalars

REPO = Path(__file__).parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "mlagents" / "Sorter_curriculum.yaml"


def problems(parameters: Any) -> list[str]:
    data = {"behaviors": {"B": {}}, "environment_parameters": parameters}
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(data)
    return list(info.value.problems)


def options(parameters: Any) -> dict[str, EnvironmentParameter]:
    data = {"behaviors": {"B": {}}, "environment_parameters": parameters}
    return RunOptions.from_dict(data).environment_parameters


# -- options ---------------------------------------------------------------------------------


def test_constants_samplers_and_curricula_are_structured_as_curricula() -> None:
    uniform = {"sampler_type": "uniform", "sampler_parameters": {"min_value": 1, "max_value": 2}}
    parsed = options(
        {
            "g": 9.8,
            "m": uniform,
            "s": {"sampler_type": "gaussian", "sampler_parameters": {"mean": 2, "st_dev": 0.3}},
            "l": {
                "sampler_type": "multirangeuniform",
                "sampler_parameters": {"intervals": [[7, 10], [15, 20]]},
            },
            "c": {"sampler_type": "constant", "sampler_parameters": {"value": 3}},
            "h": {
                "curriculum": [
                    {"name": "low", "value": 1, "completion_criteria": progress(0.5)},
                    {"name": "high", "value": uniform},
                ]
            },
        }
    )
    assert parsed == {
        "g": EnvironmentParameter(curriculum=[Lesson(name="g", value=Constant(value=9.8))]),
        "m": EnvironmentParameter(
            curriculum=[Lesson(name="m", value=Uniform(min_value=1.0, max_value=2.0))]
        ),
        "s": EnvironmentParameter(
            curriculum=[Lesson(name="s", value=Gaussian(mean=2.0, st_dev=0.3))]
        ),
        "l": EnvironmentParameter(
            curriculum=[
                Lesson(name="l", value=MultiRangeUniform(intervals=[[7.0, 10.0], [15.0, 20.0]]))
            ]
        ),
        "c": EnvironmentParameter(curriculum=[Lesson(name="c", value=Constant(value=3.0))]),
        "h": EnvironmentParameter(
            curriculum=[
                Lesson(
                    name="low",
                    value=Constant(value=1.0),
                    completion_criteria=CompletionCriteria(
                        behavior="B", measure="progress", threshold=0.5
                    ),
                ),
                Lesson(name="high", value=Uniform(min_value=1.0, max_value=2.0)),
            ]
        ),
    }
    # ML-Agents' defaults, and the options round-trip through configuration.yaml's data
    criteria = parsed["h"].curriculum[0].completion_criteria
    assert criteria is not None
    assert (criteria.min_lesson_length, criteria.signal_smoothing, criteria.require_reset) == (
        0,
        True,
        False,
    )
    run = RunOptions.from_dict({"behaviors": {"B": {}}, "environment_parameters": {"g": 9.8}})
    assert run.as_dict()["environment_parameters"] == {
        "g": {"curriculum": [{"name": "g", "value": 9.8, "completion_criteria": None}]}
    }
    assert RunOptions.from_dict(run.as_dict()) == run


UNIFORM = "uniform"


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ([1], ["environment_parameters: expected a mapping, got [1]"]),
        (
            {"g": "x"},
            [
                "environment_parameters.g: expected a number or a sampler ({sampler_type: "
                "uniform, sampler_parameters: {min_value: 0, max_value: 1}}), got 'x'"
            ],
        ),
        (
            {"g": {"sampler_type": "uniforme", "sampler_parameters": {}}},
            [
                "environment_parameters.g.sampler_type: expected one of 'constant', 'uniform', "
                "'gaussian', 'multirangeuniform', got 'uniforme'"
            ],
        ),
        (
            {"g": {"sampler-type": UNIFORM, "min_value": 1}},  # ML-Agents' 0.x format
            [
                "environment_parameters.g.sampler_type: required key is missing",
                "environment_parameters.g.sampler_parameters: required key is missing",
                "environment_parameters.g.min_value: unknown key (valid keys: sampler_type, "
                "sampler_parameters)",
                "environment_parameters.g.sampler-type: unknown key (did you mean sampler_type?)",
            ],
        ),
        (
            {"g": {"sampler_type": UNIFORM, "sampler_parameters": 3}},
            ["environment_parameters.g.sampler_parameters: expected a mapping, got 3"],
        ),
        (
            {"g": {"sampler_type": UNIFORM, "sampler_parameters": {"min_valu": 3}}},
            [
                "environment_parameters.g.sampler_parameters.min_valu: unknown key (did you "
                "mean min_value?)"
            ],
        ),
        (
            {
                "g": {
                    "sampler_type": UNIFORM,
                    "sampler_parameters": {"min_value": 3, "max_value": 2},
                }
            },
            [
                "environment_parameters.g.sampler_parameters.max_value: expected at least "
                "min_value (3.0), got 2.0"
            ],
        ),
        (
            {"g": {"sampler_type": "gaussian", "sampler_parameters": {"st_dev": -1}}},
            [
                "environment_parameters.g.sampler_parameters.st_dev: expected a number of at "
                "least 0, got -1.0"
            ],
        ),
        (
            {
                "g": {
                    "sampler_type": "multirangeuniform",
                    "sampler_parameters": {"intervals": [[1, 2], [4, 3]]},
                }
            },
            [
                "environment_parameters.g.sampler_parameters.intervals: interval 1: expected "
                "[min, max] with min <= max, got [4.0, 3.0]"
            ],
        ),
        (
            {"g": {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": []}}},
            [
                "environment_parameters.g.sampler_parameters.intervals: expected at least one "
                "interval [min, max], got none"
            ],
        ),
        (
            {"g": {"curriculum": {"name": "a"}}},
            ["environment_parameters.g.curriculum: expected a list, got {'name': 'a'}"],
        ),
        (
            {"g": {"curriculum": []}},
            ["environment_parameters.g.curriculum: expected at least one lesson, got none"],
        ),
        (
            {
                "g": {
                    "curriculum": [
                        {"name": "a", "value": 1, "completion_criteria": progress(1.5)},
                        # older ML-Agents samples' form, read as name: Lesson1
                        # (tests/test_first_day.py); a lesson without a value still is not
                        {"Lesson1": {"completion_criteria": progress(0.5)}},
                    ]
                }
            },
            [
                "environment_parameters.g.curriculum.0.completion_criteria.threshold: expected "
                "a number between 0 and 1 for measure progress, got 1.5",
                "environment_parameters.g.curriculum.1.value: required key is missing",
            ],
        ),
        (
            {
                "g": {
                    "curriculum": [
                        {
                            "name": "a",
                            "value": True,
                            "completion_criteria": {
                                "behavior": "B",
                                "measure": "rewards",
                                "min_lesson_length": -1,
                            },
                        },
                        {"name": "b", "value": 2},
                    ]
                }
            },
            [
                "environment_parameters.g.curriculum.0.value: expected a number or a sampler "
                "({sampler_type: uniform, sampler_parameters: {min_value: 0, max_value: 1}}), "
                "got True",
                "environment_parameters.g.curriculum.0.completion_criteria.measure: expected one "
                "of 'reward', 'progress', 'Elo', got 'rewards'",
            ],
        ),
        (
            {
                "g": {
                    "curriculum": [
                        {"name": "a", "value": 1, "completion_criteria": {"min_lesson_length": -1}},
                        {"name": "b", "value": 2},
                    ]
                }
            },
            [
                "environment_parameters.g.curriculum.0.completion_criteria.behavior: required "
                "key is missing"
            ],
        ),
        (
            {
                "g": {
                    "curriculum": [
                        {
                            "name": "a",
                            "value": 1,
                            "completion_criteria": {"behavior": "B", "min_lesson_length": -1},
                        },
                        {"name": "b", "value": 2},
                    ]
                }
            },
            [
                "environment_parameters.g.curriculum.0.completion_criteria.min_lesson_length: "
                "expected a number of at least 0, got -1"
            ],
        ),
        (
            {
                "g": {
                    "curriculum": [
                        {"name": "a", "value": 1},
                        {"name": "b", "value": 2, "completion_criteria": {"behavior": "X"}},
                        {"name": "c", "value": 3},
                    ]
                },
                "h": {
                    "curriculum": [
                        {"name": "a", "value": 1, "completion_criteria": {"behavior": "X"}},
                        {"name": "b", "value": 2},
                    ]
                },
                "metadata": 1,
            },
            [
                "environment_parameters.g.curriculum.0.completion_criteria: required for every "
                "lesson but the last (lesson 'a' is followed by 'b')",
                "environment_parameters.g.curriculum.1.completion_criteria.behavior: 'X' is not "
                "a behavior of this run (behaviors: B)",
                "environment_parameters.h.curriculum.0.completion_criteria.behavior: 'X' is not "
                "a behavior of this run (behaviors: B)",
                "environment_parameters.metadata: a parameter cannot be named 'metadata' "
                "(training_status.json keeps its versions under that key); rename it",
            ],
        ),
    ],
)
def test_every_bad_environment_parameter_is_named_by_its_path(
    parameters: Any, expected: list[str]
) -> None:
    assert problems(parameters) == expected


# -- samplers and the wrapper ------------------------------------------------------------------


def draws(sampler: Any, n: int = 20_000, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([sampler.sample(rng) for _ in range(n)])


def test_samplers_draw_their_distributions_from_the_generator() -> None:
    uniform = draws(Uniform(min_value=2.0, max_value=5.0))
    assert uniform.min() >= 2.0 and uniform.max() < 5.0
    assert uniform.mean() == pytest.approx(3.5, abs=0.03)
    assert uniform.std() == pytest.approx(3.0 / np.sqrt(12), abs=0.02)
    gaussian = draws(Gaussian(mean=1.0, st_dev=0.5))
    assert gaussian.mean() == pytest.approx(1.0, abs=0.02)
    assert gaussian.std() == pytest.approx(0.5, abs=0.02)
    multi = draws(MultiRangeUniform(intervals=[[0.0, 1.0], [4.0, 7.0]]))
    assert np.all(((multi >= 0) & (multi < 1)) | ((multi >= 4) & (multi < 7)))
    # an interval is picked in proportion to its width: 3 of 4 draws in [4, 7)
    assert np.mean(multi >= 4) == pytest.approx(0.75, abs=0.015)
    assert np.all(draws(Constant(value=2.5), n=10) == 2.5)
    # seeded: the same seed draws the same values
    assert np.array_equal(draws(Gaussian(), n=50), draws(Gaussian(), n=50))
    assert not np.array_equal(draws(Gaussian(), n=50), draws(Gaussian(), n=50, seed=8))


def test_the_wrapper_sets_attributes_at_reset_and_passes_the_rest_as_reset_options() -> None:
    env = EnvironmentParameters(
        gym.make("CartPole-v1"),
        {"force_mag": Uniform(min_value=11.0, max_value=12.0), "tilt": Constant(value=0.5)},
    )
    assert env.environment_parameter_targets() == {"force_mag": "attribute", "tilt": "option"}
    env.reset(seed=5)
    base: Any = env.unwrapped
    first = base.force_mag
    assert 11.0 <= first < 12.0 and env.values == {"force_mag": first, "tilt": 0.5}
    env.reset()  # a fresh draw at every reset
    assert base.force_mag != first
    env.reset(seed=5)  # reseeded by a reset with a seed
    assert base.force_mag == first
    # its own stream: not the environment's np_random, seeded alike
    assert first != 11.0 + np.random.default_rng(5).uniform()
    env.set_environment_parameters({"force_mag": Constant(value=20.0)})
    env.reset()
    assert base.force_mag == 20.0
    env.close()

    probe = EnvironmentParameters(
        ParameterEnv(), {"bonus": Constant(value=1.0), "tilt": Constant(value=0.5)}
    )
    probe.reset(seed=0, options={"other": 1})
    assert probe.step(np.int64(0))[1] == 1.5  # bonus as an attribute, tilt from the options


def test_what_evtrain_accepts_but_ignores_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from evtrain.run.checkpoints.training_status import TrainingStatus
    from evtrain.run.parameters.curriculum import Curriculum
    from evtrain.world import World

    parameters = options(
        {
            "g": {
                "curriculum": [
                    {
                        "name": "a",
                        "value": 1,
                        "completion_criteria": progress(0.1, require_reset=True),
                    },
                    {"name": "b", "value": 2, "completion_criteria": progress(0.2)},
                ]
            }
        }
    )
    with Bus() as bus, caplog.at_level(logging.WARNING, logger="evtrain"):
        status = TrainingStatus(tmp_path / "training_status.json")
        curriculum = Curriculum(parameters, bus=bus, status=status, world=World(), restore=False)
    assert [r.getMessage() for r in caplog.records] == [
        "environment_parameters.g: require_reset is accepted but evtrain does not cut episodes "
        "short: a new lesson applies from each environment's next episode",
        "environment_parameters.g: the completion_criteria of the last lesson ('b') are ignored",
    ]
    assert curriculum.lessons == {"g": 0} and status.lesson_number("g") == 0


# -- runs ----------------------------------------------------------------------------------------


def test_progress_moves_lessons_and_the_environments_see_the_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="evtrain"):
        recorder = recorded_run(run_options(tmp_path, CURRICULUM))
    check_curriculum_returns(returns(recorder))
    assert recorder.of(LessonChanged) == [
        LessonChanged(category="B", parameter="bonus", lesson_number=1, lesson_name="two", step=32),
        LessonChanged(
            category="B", parameter="bonus", lesson_number=2, lesson_name="draw", step=96
        ),
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "Parameter 'bonus' is now in lesson 1 ('two') after B's step 32: Constant(value=2.0)"
        in messages
    )
    assert (
        "environment_parameters.tilt: tests.curriculum_envs:parameter_env (ParameterEnv) has no "
        "attribute 'tilt': its value is passed to reset() as options['tilt'] only (ignored "
        "unless the environment reads it)"
    ) in messages
    # the lesson each summary period was played in, read back from TensorBoard
    run = tmp_path / "results" / "run"
    assert tensorboard_scalars(run / "B", "Environment/Lesson Number/bonus") == [
        (32, 0.0),
        (64, 1.0),
        (96, 1.0),
        (128, 2.0),
    ]
    assert [v for _, v in tensorboard_scalars(run / "B", "Environment/Lesson Number/tilt")] == [
        0.0
    ] * 4
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    assert status["bonus"] == {"lesson_num": 2} and status["tilt"] == {"lesson_num": 0}

    # --resume starts in the recorded lesson: every episode draws from "draw"
    resumed = run_options(tmp_path, CURRICULUM)
    resumed["behaviors"]["B"]["max_steps"] = 192
    resumed["checkpoint_settings"]["resume"] = True
    recorder = recorded_run(resumed)
    assert [e.step for e in recorder.of(StatsEvent)] == [160, 192]
    assert all(14.0 <= r < 18.0 for period in returns(recorder) for r in period)
    assert recorder.of(LessonChanged) == []
    assert tensorboard_scalars(run / "B", "Environment/Lesson Number/bonus")[-2:] == [
        (160, 2.0),
        (192, 2.0),
    ]

    # --inference plays the recorded lesson and never moves on
    inference = run_options(tmp_path, CURRICULUM)
    inference["behaviors"]["B"]["max_steps"] = 64
    inference["checkpoint_settings"]["inference"] = True
    recorder = recorded_run(inference)
    assert all(14.0 <= r < 18.0 for period in returns(recorder) for r in period)
    assert recorder.of(LessonChanged) == []
    lessons = [e.values["Environment/Lesson Number/bonus"].mean for e in recorder.of(StatsEvent)]
    assert lessons == [2.0, 2.0]


def test_async_workers_get_the_values_and_lesson_changes(tmp_path: Path) -> None:
    recorder = recorded_run(run_options(tmp_path, CURRICULUM, vectorization="async"))
    periods = returns(recorder)
    check_curriculum_returns(periods)
    # the same seeded draws as in this process
    in_process = recorded_run(run_options(tmp_path / "sync", CURRICULUM))
    assert periods == returns(in_process)


@pytest.mark.parametrize(("smoothing", "step"), [(True, 96), (False, 64)])
def test_reward_criteria_wait_for_min_lesson_length_and_smooth(
    tmp_path: Path, smoothing: bool, step: int
) -> None:
    # returns 8.0; threshold 7; 10 episodes: none at 32 (8 episodes), at 64 the mean is 8
    # (smoothed: 0.75 x 8 = 6), at 96 smoothed 0.25 x 6 + 0.75 x 8 = 7.5
    criteria = {
        "behavior": "B",
        "measure": "reward",
        "threshold": 7.0,
        "min_lesson_length": 10,
        "signal_smoothing": smoothing,
    }
    parameters = {
        "bonus": {
            "curriculum": [
                {"name": "easy", "value": 2.0, "completion_criteria": criteria},
                {"name": "none", "value": 0.0},
            ]
        }
    }
    recorder = recorded_run(run_options(tmp_path, parameters))
    assert [(e.lesson_name, e.step) for e in recorder.of(LessonChanged)] == [("none", step)]


def test_mlagents_sorter_curriculum_runs_through_the_cli(tmp_path: Path) -> None:
    # ML-Agents' file as it is (threaded: true, vis_encode_type with vector observations):
    # one rollout of 40960 steps, one summary, progress 1.0 > 0.5 with 10240 episodes: Lesson1.
    options = yaml.safe_load(FIXTURE.read_text())
    assert options["behaviors"]["Sorter"]["threaded"] is True
    result = run_config(tmp_path, options, name="sorter.yaml")
    assert result.returncode == 0, result.stderr
    assert "Parameter 'num_tiles' is now in lesson 1 ('Lesson1') after Sorter's step 40960" in (
        result.stderr + result.stdout
    )
    status = json.loads(
        (tmp_path / "results" / "evtrain" / "run_logs" / "training_status.json").read_text()
    )
    assert status["num_tiles"] == {"lesson_num": 1}
