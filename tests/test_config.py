from __future__ import annotations

import pytest

from evtrain import ConfigError, Overflow, RunOptions


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


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"checkpoint_settings": {"run_idd": "x"}},
            ["checkpoint_settings.run_idd: unknown key (did you mean run_id?)"],
        ),
        (
            {"bus": {"subscribers": {"tb": {"zzz": 1}}}},
            ["bus.subscribers.tb.zzz: unknown key (valid keys: capacity, overflow)"],
        ),
        (
            {"bus": {"overflow": "sometimes"}},
            [
                "bus.overflow: expected one of 'block', 'drop_oldest', 'drop_newest', 'latest', "
                "got 'sometimes'"
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
    ],
)
def test_errors_name_the_full_path(data: object, expected: list[str]) -> None:
    assert problems(data) == expected
