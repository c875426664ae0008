from __future__ import annotations

from typing import Any

import attrs
import pytest

from evtrain import ConfigError, Overflow, RunOptions
from evtrain.config.converter import structure


def problems(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(data)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    return list(info.value.problems)


def test_defaults_and_paths() -> None:
    options = RunOptions()
    cs = options.checkpoint_settings
    assert (cs.run_id, cs.results_dir, cs.resume, cs.force) == ("evtrain", "results", False, False)
    assert str(cs.write_path) == "results/evtrain"
    assert str(cs.run_logs_dir) == "results/evtrain/run_logs"
    assert cs.maybe_init_path is None
    other = RunOptions.from_dict({"checkpoint_settings": {"initialize_from": "old"}})
    assert str(other.checkpoint_settings.maybe_init_path) == "results/old"


def test_round_trip() -> None:
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {"run_id": "a", "resume": True},
            "bus": {"overflow": "drop_oldest", "subscribers": {"tb": {"capacity": 5}}},
            "plugins": {"disabled": ["jsonl"], "required": ["default"]},
        }
    )
    assert RunOptions.from_dict(options.as_dict()) == options
    assert options.as_dict()["bus"]["overflow"] == "drop_oldest"
    assert options.bus.overflow is Overflow.DROP_OLDEST


def test_scientific_notation_is_accepted_for_integers() -> None:
    # PyYAML reads 5.0e5 (no exponent sign) as a string; ML-Agents configs are full of them.
    assert RunOptions.from_dict({"bus": {"capacity": "5.0e5"}}).bus.capacity == 500_000
    assert RunOptions.from_dict({"bus": {"capacity": 2e3}}).bus.capacity == 2000


def odd_memory(size: int) -> dict[str, Any]:
    return {"memory": {"memory_size": size}}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"checkpoint_settings": {"run_idd": "x"}},
            ["checkpoint_settings.run_idd: unknown key (did you mean run_id?)"],
        ),
        (
            {"bus": {"subscribers": {"tb": {"zzz": 1}}}},
            [
                "bus.subscribers.tb.zzz: unknown key (valid keys: capacity, capacity_bytes, "
                "overflow, stall_timeout, block_timeout, journal_max_bytes, isolation, "
                "hang_timeout, max_rss_bytes)"
            ],
        ),
        (
            {"bus": {"overflow": "sometimes"}},
            [
                "bus.overflow: expected one of 'block', 'drop_oldest', 'drop_newest', 'latest', "
                "'spool', got 'sometimes'"
            ],
        ),
        ({"bus": {"capacity": 1.5}}, ["bus.capacity: expected an integer, got 1.5"]),
        ({"bus": {"capacity": 0}}, ["bus.capacity: expected an integer of at least 1, got 0"]),
        ({"debug": "yes"}, ["debug: expected true or false, got 'yes'"]),
        ({"plugins": {"disabled": "jsonl"}}, ["plugins.disabled: expected a list, got 'jsonl'"]),
        ({"checkpoint_settings": 3}, ["checkpoint_settings: expected a mapping of options"]),
        (
            {"checkpoint_settings": {"resume": 1}, "bus": {"capacity": "many"}},
            [
                "checkpoint_settings.resume: expected true or false, got 1",
                "bus.capacity: expected an integer, got 'many'",
            ],
        ),
        ("not a mapping", ["expected a mapping of options, got str 'not a mapping'"]),
        (
            {
                "behaviors": {
                    "B": {
                        "trainer_type": "sac",
                        "reward_signals": {"gail": {"strength": 0.02}},
                        "threaded": "yes",
                    }
                },
            },
            [
                "behaviors.B.reward_signals.gail.demo_path: required key is missing",
                "behaviors.B.threaded: expected true or false, got 'yes'",
            ],
        ),
        (
            # no "did you mean checkpoint_interval": sharing a suffix is no typo
            {"behaviors": {"B": {"checkpoint_freq": 10}}},
            [
                "behaviors.B.checkpoint_freq: unknown key (valid keys: trainer_type, "
                "hyperparameters, network_settings, reward_signals, behavioral_cloning, "
                "self_play, evaluation, max_steps, time_horizon, summary_freq, "
                "checkpoint_interval, keep_checkpoints, even_checkpoints, init_path, threaded, "
                "on_nonfinite, info_stats, stop)"
            ],
        ),
        (
            # a default_settings problem is reported once, under default_settings, not again
            # for each behavior that inherits it
            {
                "default_settings": {"max_stepz": 5, "network_settings": odd_memory(7)},
                "behaviors": {"A": {}, "B": {"network_settings": odd_memory(9)}},
            },
            [
                "behaviors.B.network_settings.memory.memory_size: expected an even number (the "
                "LSTM's hidden and cell state, memory_size / 2 each), got 9; use 10",
                "default_settings.network_settings.memory.memory_size: expected an even number "
                "(the LSTM's hidden and cell state, memory_size / 2 each), got 7; use 8",
                "default_settings.max_stepz: unknown key (did you mean max_steps?)",
            ],
        ),
    ],
)
def test_errors_name_the_full_path(data: object, expected: list[str]) -> None:
    assert problems(data) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"env_settings": {"vectorization": "threads"}},
            ["env_settings.vectorization: expected one of 'sync', 'async', 'ray', got 'threads'"],
        ),
        (
            {"behaviors": {"B": {"network_settings": {"activation": "gelu"}}}},
            [
                "behaviors.B.network_settings.activation: expected one of 'tanh', 'relu', "
                "'elu', 'silu', got 'gelu'"
            ],
        ),
        (
            {"behaviors": {"B": {"hyperparameters": [64]}}},
            ["behaviors.B.hyperparameters: expected a mapping of options"],
        ),
        (
            {"behaviors": {"B": {"trainer_type": "sac", "hyperparameters": {"tau": 0}}}},
            ["behaviors.B.hyperparameters.tau: must be > 0.0, got 0.0"],
        ),
    ],
)
def test_values_name_what_was_expected(data: object, expected: list[str]) -> None:
    assert problems(data) == expected


@attrs.define(kw_only=True)
class _Part:
    """A plugin's options class: attrs' own validators, a required key."""

    size: int
    color: str = attrs.field(default="red", validator=attrs.validators.in_(("red", "blue")))
    token: Any = attrs.field(default=1, validator=attrs.validators.instance_of(int))
    rate: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))


@attrs.define(kw_only=True)
class _Whole:
    parts: dict[str, _Part] = attrs.field(factory=dict)
    row: list[_Part] = attrs.field(factory=list)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"parts": {"a": {}}}, ["my.parts.a.size: required key is missing"]),
        (
            {"parts": {"a": {"size": 1, "color": "green"}}},
            ["my.parts.a.color: expected one of 'red', 'blue', got 'green'"],
        ),
        (
            {"parts": {"a": {"size": 1, "token": "x"}}},
            ["my.parts.a.token: expected int, got 'x'"],
        ),
        ({"parts": {"a": {"size": 1, "rate": 0}}}, ["my.parts.a.rate: must be > 0, got 0.0"]),
        (
            {"parts": {"it's [1] @ x": {"size": 1, 2: 0, "sizee": 0}}},
            [
                "my.parts.it's [1] @ x.2: unknown key (valid keys: size, color, token, rate)",
                "my.parts.it's [1] @ x.sizee: unknown key (did you mean size?)",
            ],
        ),
        (
            {"row": [{"size": 1}, {"size": "big"}, 3]},
            [
                "my.row.1.size: expected an integer, got 'big'",
                "my.row.2: expected a mapping of options",
            ],
        ),
    ],
)
def test_a_plugins_options_name_the_full_path(data: object, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        structure(data, _Whole, root="my")
    assert list(info.value.problems) == expected


def test_default_settings_problems_are_reported_once_under_any_behavior_name() -> None:
    data = {"default_settings": {"max_stepz": 5}, "behaviors": {"a": {}, "a.b": {}, "c": {}}}
    assert problems(data) == ["default_settings.max_stepz: unknown key (did you mean max_steps?)"]
