"""ML-Agents options evtrain accepts with ML-Agents' meaning (or translates), and the
table of every ML-Agents key in docs/configuration.md."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from evtrain import Bus, ConfigError, RunOptions, SaveEvent
from evtrain.config.environment_parameters import Constant, Gaussian, Sampler, Uniform
from evtrain.errors import RunFolderError
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.run.parameters.env_parameters import EnvironmentParameters
from evtrain.testing import Recorder
from tests.helpers import config
from tests.mlagents_table import how_evtrain_treats, table_rows


def warnings_of(caplog: pytest.LogCaptureFixture, data: dict[str, Any]) -> list[str]:
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        RunOptions.from_dict(data)
    return caplog.messages


def test_ml_agents_unity_keys_are_read_with_their_ml_agents_meaning_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env_keys = {
        "env_path": "3DBall",
        "env_args": ["--x"],
        "base_port": 5005,
        "num_areas": 4,
        "timeout_wait": 60,
        "max_lifetime_restarts": 10,
        "restarts_rate_limit_n": 1,
        "restarts_rate_limit_period_s": 60,
    }
    data = {
        "engine_settings": {"time_scale": 20},
        "env_settings": env_keys,
        "behaviors": {"A": {}},
    }
    assert warnings_of(caplog, data) == []
    options = RunOptions.from_dict(data)
    assert {key: getattr(options.env_settings, key) for key in env_keys} == env_keys
    assert options.engine_settings.time_scale == 20


@pytest.mark.parametrize(
    ("section", "resume", "warnings"),
    [
        (
            {"load_model": True},
            True,
            [
                "checkpoint_settings.load_model: deprecated by ML-Agents; resuming the run "
                "(use resume: true)"
            ],
        ),
        (
            {"train_model": True},
            False,
            [
                "checkpoint_settings.train_model: deprecated by ML-Agents; training is the "
                "default (inference: true runs the policy without training)"
            ],
        ),
        # what every configuration.yaml ML-Agents writes holds: its defaults, silently
        ({"load_model": False, "train_model": False}, False, []),
    ],
)
def test_deprecated_checkpoint_options_are_translated_as_ml_agents_does(
    caplog: pytest.LogCaptureFixture,
    section: dict[str, Any],
    resume: bool,
    warnings: list[str],
) -> None:
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        options = RunOptions.from_dict({"checkpoint_settings": section})
    assert caplog.messages == warnings
    assert options.checkpoint_settings.resume is resume
    assert options.checkpoint_settings.inference is False
    assert "load_model" not in options.as_dict()["checkpoint_settings"]


def test_a_behaviors_framework_is_dropped_with_a_warning_as_ml_agents_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = {
        "default_settings": {"framework": "pytorch"},
        "behaviors": {"A": {"framework": "tensorflow", "max_steps": 10}, "B": {}},
    }
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        options = RunOptions.from_dict(data)
    assert caplog.messages == [
        f"{where}.framework: deprecated by ML-Agents, which trains with PyTorch only (as evtrain "
        "does): ignored"
        for where in ("default_settings", "behaviors.A")
    ]
    assert options.behaviors["A"].max_steps == 10
    assert "framework" not in options.as_dict()["behaviors"]["A"]


def test_a_deprecated_option_that_is_no_boolean_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"checkpoint_settings": {"load_model": "yes"}})
    assert info.value.problems == (
        "checkpoint_settings.load_model: expected true or false, got 'yes'",
    )


def test_options_without_effect_are_accepted_with_one_warning_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = {
        "behaviors": {
            "P": {
                "network_settings": {"deterministic": True, "goal_conditioning_type": "none"},
                "hyperparameters": {"shared_critic": False},
            },
            "S": {
                "trainer_type": "sac",
                "hyperparameters": {"reward_signal_steps_per_update": 10},
            },
            # ML-Agents' defaults: no warning
            "Quiet": {
                "trainer_type": "sac",
                "network_settings": {"deterministic": False, "goal_conditioning_type": "hyper"},
                "hyperparameters": {"steps_per_update": 2, "reward_signal_steps_per_update": 2},
            },
        }
    }
    assert warnings_of(caplog, data) == [
        "behaviors.P.network_settings.deterministic: true has no effect in evtrain: training "
        "samples actions; the exported ONNX policy and --inference always take the most likely "
        "action",
        "behaviors.P.network_settings.goal_conditioning_type: none has no effect in evtrain: "
        "Gymnasium environments have no goal observations",
        "behaviors.S.hyperparameters.reward_signal_steps_per_update: 10.0 has no effect "
        "without an intrinsic reward provider (curiosity, rnd, gail): the extrinsic reward "
        "provider has no model to update",
    ]


def test_sac_warns_about_intrinsic_gammas_it_does_not_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    signals = {"extrinsic": {"gamma": 0.99}, "curiosity": {"gamma": 0.9}, "rnd": {}}
    data = {
        "behaviors": {
            "S": {"trainer_type": "sac", "reward_signals": signals},
            "P": {"reward_signals": signals},  # PPO discounts each signal with its own gamma
        }
    }
    assert warnings_of(caplog, data) == [
        "behaviors.S.reward_signals.curiosity.gamma: 0.9 has no effect with trainer_type sac: "
        "SAC discounts the sum of the providers' rewards with the extrinsic gamma (0.99)",
    ]


def test_batch_size_above_buffer_size_trains_on_one_minibatch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hp = {"batch_size": 512, "buffer_size": 256, "num_epoch": 1}
    with caplog.at_level(logging.INFO, logger="evtrain"):
        learn(config(tmp_path, max_steps=512, summary_freq=512, hyperparameters=hp))
    notes = [m for m in caplog.messages if "rounded" in m]
    assert notes == [
        "behaviors.CartPole.hyperparameters.buffer_size: 256 rounded up to 512, a multiple of "
        "batch_size (512) and of the number of environments (4)"
    ]
    assert load_checkpoint(tmp_path / "results/run/CartPole/checkpoint.pt")["step"] == 512


def save_steps(options: dict[str, Any]) -> list[int]:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    return [e.step for e in recorder.of(SaveEvent)]


def test_even_checkpoints_space_keep_checkpoints_over_max_steps(tmp_path: Path) -> None:
    # 128 steps per update; 1024 // 4 = a checkpoint every 256 steps, the last one the final save
    even = config(tmp_path, "even", checkpoint_interval=100000, keep_checkpoints=4)
    even["behaviors"]["CartPole"]["even_checkpoints"] = True
    assert save_steps(even) == [256, 512, 768, 1024]
    plain = config(tmp_path, "plain", checkpoint_interval=100000, keep_checkpoints=4)
    assert save_steps(plain) == [1024]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run ``teacher`` in ``results``; its folder."""
    root = tmp_path_factory.mktemp("teacher")
    learn(config(root, run_id="teacher", max_steps=256))
    return root / "results/teacher"


FROZEN = {"batch_size": 64, "buffer_size": 128, "num_epoch": 1, "learning_rate": 1e-10}
"""A learning rate of 1e-10 keeps the one update from moving the weights measurably."""


@pytest.mark.parametrize("form", ["file", "behavior folder", "run folder", "bare name"])
def test_init_path_starts_the_behavior_from_that_checkpoint_at_step_zero(
    tmp_path: Path, teacher: Path, form: str
) -> None:
    checkpoint = teacher / "CartPole/checkpoint.pt"
    init_path = {
        "file": str(checkpoint),
        "behavior folder": str(teacher / "CartPole"),
        "run folder": str(teacher),
        "bare name": "checkpoint.pt",  # ML-Agents: in initialize_from's behavior folder
    }[form]
    student = config(tmp_path, "student", max_steps=128, hyperparameters=FROZEN)
    student["behaviors"]["CartPole"]["init_path"] = init_path
    if form == "bare name":
        student["checkpoint_settings"]["results_dir"] = str(teacher.parent)
        student["checkpoint_settings"]["initialize_from"] = "teacher"
    assert save_steps(student) == [128]
    results = Path(student["checkpoint_settings"]["results_dir"])
    state = load_checkpoint(results / "student/CartPole/checkpoint.pt")
    assert state["step"] == 128
    for key, value in load_checkpoint(checkpoint)["agent"].items():
        assert torch.allclose(state["agent"][key], value, atol=1e-6), key


def test_init_path_without_a_checkpoint_names_the_key(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pt"
    options = config(tmp_path, max_steps=128)
    options["behaviors"]["CartPole"]["init_path"] = str(missing)
    with pytest.raises(RunFolderError) as info:
        learn(options)
    assert str(info.value) == (
        f"behaviors.CartPole.init_path: {missing} does not exist; give a checkpoint .pt file, "
        "or a run or behavior folder holding checkpoint.pt"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    options = config(tmp_path, "other", max_steps=128)
    options["behaviors"]["CartPole"]["init_path"] = str(empty)
    with pytest.raises(RunFolderError) as info:
        learn(options)
    assert str(info.value) == (
        f"behaviors.CartPole.init_path: {empty} is a folder without checkpoint.pt or "
        "CartPole/checkpoint.pt; give a checkpoint .pt file, or a run or behavior folder "
        "holding one"
    )


def test_a_samplers_own_seed_is_accepted_and_written_back() -> None:
    # What ML-Agents writes into every configuration.yaml: each sampler with its seed (the
    # constant of a curriculum lesson too).
    written = {
        "behaviors": {"B": {}},
        "environment_parameters": {
            "mass": {
                "sampler_type": "uniform",
                "sampler_parameters": {"seed": 12, "min_value": 0.5, "max_value": 10.0},
            },
            "tiles": {
                "curriculum": [
                    {
                        "name": "only",
                        "value": {
                            "sampler_type": "constant",
                            "sampler_parameters": {"seed": 13, "value": 2.0},
                        },
                    }
                ]
            },
            "scale": {"sampler_type": "gaussian", "sampler_parameters": {"st_dev": 0.5}},
        },
    }
    options = RunOptions.from_dict(written)
    values = {k: p.curriculum[0].value for k, p in options.environment_parameters.items()}
    assert values == {
        "mass": Uniform(min_value=0.5, max_value=10.0, seed=12),
        "tiles": Constant(value=2.0, seed=13),
        "scale": Gaussian(st_dev=0.5),
    }
    again = options.as_dict()["environment_parameters"]
    assert [again[k]["curriculum"][0]["value"] for k in ("mass", "tiles", "scale")] == [
        {
            "sampler_type": "uniform",
            "sampler_parameters": {"seed": 12, "min_value": 0.5, "max_value": 10.0},
        },
        {"sampler_type": "constant", "sampler_parameters": {"seed": 13, "value": 2.0}},
        # ML-Agents' default (-1) is not written: configurations without seeds read as before
        {"sampler_type": "gaussian", "sampler_parameters": {"mean": 1.0, "st_dev": 0.5}},
    ]
    assert RunOptions.from_dict(options.as_dict()) == options
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(
            {
                "environment_parameters": {
                    "m": {"sampler_type": "uniform", "sampler_parameters": {"seed": "x"}}
                }
            }
        )
    assert info.value.problems == (
        "environment_parameters.m.sampler_parameters.seed: expected an integer, got 'x'",
    )


def test_a_sampler_with_its_own_seed_draws_alike_in_every_sub_environment_and_run() -> None:
    def force_mags(sampler: Sampler, reset_seed: int, resets: int = 5) -> list[float]:
        env = EnvironmentParameters(gym.make("CartPole-v1"), {"force_mag": sampler})
        found = []
        for index in range(resets):
            env.reset(seed=reset_seed if index == 0 else None)
            found.append(env.unwrapped.force_mag)  # type: ignore[attr-defined]
        env.close()
        return found

    own = Uniform(min_value=5.0, max_value=15.0, seed=3)
    # sub-environments 0 and 1 (reset seeds 10 and 11), or another run's seed: the same draws
    assert force_mags(own, 10) == force_mags(own, 11) == force_mags(own, 99)
    assert len(set(force_mags(own, 10))) == 5  # still a fresh draw at every reset
    assert force_mags(Uniform(min_value=5.0, max_value=15.0, seed=4), 10) != force_mags(own, 10)
    # ML-Agents' default -1: the sub-environment's stream, from its reset seed
    shared = Uniform(min_value=5.0, max_value=15.0)
    assert force_mags(shared, 10) != force_mags(shared, 11)

    # a lesson change starts the new sampler's stream from its seed; a seeded reset restarts it
    env = EnvironmentParameters(gym.make("CartPole-v1"), {"force_mag": shared})
    env.reset(seed=10)
    env.set_environment_parameters({"force_mag": own})
    env.reset()
    base: Any = env.unwrapped
    assert base.force_mag == force_mags(own, 0, resets=1)[0]
    env.reset()
    second = base.force_mag
    env.reset(seed=10)
    env.reset()
    assert base.force_mag == second
    env.close()


# --- the table of every ML-Agents key in docs/configuration.md ---------------------------


def test_the_table_of_every_ml_agents_key_says_what_evtrain_does() -> None:
    rows = table_rows()
    assert len(rows) == len({(key, trainer) for key, trainer, _ in rows}), "no key twice"
    assert [(k, t, s) for k, t, s in rows if how_evtrain_treats(k, t) != s] == []


def test_the_table_lists_every_option_of_evtrains_ml_agents_table() -> None:
    from evtrain.config.mlagents import ML_AGENTS_OPTIONS

    keys = {key.rsplit(".", 1)[-1] for key, _, _ in table_rows()}
    missing = [k for _, row in ML_AGENTS_OPTIONS.values() for k in row if k not in keys]
    assert missing == []
