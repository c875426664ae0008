"""YAML configs are loaded within bounds: alias bombs, huge files and huge values are refused
with one short line; a tab in the indentation gets a hint.  Through ``read_config`` (where a
bomb on the code before would be expanded by whatever walks it next: an error message's repr,
the run's ``configuration.yaml``) and through the real CLI."""

from __future__ import annotations

import copy
import resource
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain.config.options import RunOptions
from evtrain.errors import ConfigError
from evtrain.run.options import read_config
from tests.helpers import config, isolated_python, run_cli, run_config


def alias_bomb(levels: int = 9) -> str:
    """``levels`` anchored lists of nine aliases of the one before: 9**levels values in under
    a kilobyte of YAML."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


BOMB_PROBLEM = (
    "holds more than 100,000 values once its aliases (*name) are expanded, where a config "
    "holds a few hundred; list each value once, or use fewer aliases of large anchored values"
)


@pytest.mark.parametrize(
    "where",
    [
        "behaviors:\n  CartPole:\n    max_steps: *a9\n",
        "env_settings:\n  env_id: CartPole-v1\n  env_kwargs: {size: *a9}\n",
    ],
)
def test_an_alias_bomb_is_refused_before_anything_expands_it(tmp_path: Path, where: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb() + where)
    assert path.stat().st_size < 1024
    with pytest.raises(ConfigError) as refused:
        read_config(path)
    assert refused.value.problems == (f"{path}: {BOMB_PROBLEM}",)
    # while anchors and aliases of an ordinary config load as before
    path.write_text(
        "shared: &ppo {trainer_type: ppo, max_steps: 512}\n"
        "behaviors:\n  A: *ppo\n  B: {<<: *ppo, max_steps: 1024}\n"
    )
    assert read_config(path)["behaviors"] == {
        "A": {"trainer_type": "ppo", "max_steps": 512},
        "B": {"trainer_type": "ppo", "max_steps": 1024},
    }


def test_a_value_that_contains_itself_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("env_settings:\n  env_kwargs:\n    size: &a [1, *a]\n")
    with pytest.raises(ConfigError) as refused:
        read_config(path)
    assert refused.value.problems == (
        f"{path}: line 3: an alias refers to the anchored value it is inside of (a value "
        "that contains itself), which no option can hold",
    )


def _three_gib_of_memory() -> None:
    # Where the bomb is not refused (the code before), its expansion fails here rather than
    # taking the memory of the machine the tests share.
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_cli_refuses_an_alias_bomb_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(
        alias_bomb() + "behaviors:\n  CartPole:\n    max_steps: *a9\n"
    )
    result = subprocess.run(
        [isolated_python(), "-m", "evtrain", "learn", "bomb.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
        preexec_fn=_three_gib_of_memory,
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"evtrain: error: bomb.yaml: {BOMB_PROBLEM}\n",
    )


def test_cli_refuses_a_config_file_over_the_size_limit_naming_the_limit(tmp_path: Path) -> None:
    items = ", ".join(["1"] * ((1 << 20) // 3 + 1))  # over 1 MiB
    (tmp_path / "big.yaml").write_text(f"behaviors:\n  CartPole:\n    max_steps: [{items}]\n")
    result = run_cli("big.yaml", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "evtrain: error: big.yaml: the file is bigger than 1,048,576 bytes, the most a config "
        "file may be; is it the right file?\n",
    )
    assert not (tmp_path / "results").exists()


def test_cli_cuts_a_long_value_in_an_error_to_200_characters(tmp_path: Path) -> None:
    options = config(tmp_path)
    options["behaviors"]["CartPole"]["max_steps"] = list(range(3000))
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(options))
    result = run_cli("long.yaml", cwd=tmp_path)
    value = repr(list(range(3000)))[:199] + "…"
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"evtrain: error: behaviors.CartPole.max_steps: expected an integer, got {value}\n",
    )


def test_cli_cuts_a_long_section_in_a_flag_error(tmp_path: Path) -> None:
    options = config(tmp_path)
    options["env_settings"] = ["x" * 1000]
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(options))
    result = run_cli("long.yaml", "--seed", "3", cwd=tmp_path)
    value = repr(["x" * 1000])[:199] + "…"
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"evtrain: error: env_settings: expected a mapping of options, got {value}\n",
    )


def test_cli_says_to_indent_with_spaces_not_tabs(tmp_path: Path) -> None:
    (tmp_path / "tabs.yaml").write_text("behaviors:\n  CartPole:\n\tmax_steps: 512\n")
    result = run_cli("tabs.yaml", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "evtrain: error: tabs.yaml: not valid YAML: while scanning for the next token\n"
        "found character '\\t' that cannot start any token\n"
        '  in "tabs.yaml", line 3, column 1\n'
        "line 3 is indented with a tab: use spaces, not tabs, to indent YAML\n"
    )


def test_a_checkpoint_of_other_network_settings_is_refused_naming_the_changed_keys(
    tmp_path: Path,
) -> None:
    trained = config(tmp_path, max_steps=256)
    learned = run_config(tmp_path, trained)
    assert learned.returncode == 0, learned.stderr
    results = Path(trained["checkpoint_settings"]["results_dir"])
    changed = config(tmp_path, max_steps=512)
    changed["behaviors"]["CartPole"]["network_settings"] = {"hidden_units": 64, "num_layers": 3}
    checkpoint = results / "run" / "CartPole" / "checkpoint.pt"
    expected = (
        f"evtrain: error: {checkpoint} does not fit behavior 'CartPole' of this run: its "
        f"networks were built with other settings ({results / 'run' / 'configuration.yaml'} "
        "-> this run): behaviors.CartPole.network_settings.hidden_units: 32 -> 64; "
        "behaviors.CartPole.network_settings.num_layers: 2 -> 3; train with the settings it "
        "was saved with, or start without --resume, --initialize-from and init_path\n"
    )
    initialized = run_config(tmp_path, changed, "--run-id", "other", "--initialize-from", "run")
    assert (initialized.returncode, initialized.stdout) == (2, ""), initialized.stderr
    assert initialized.stderr.splitlines(keepends=True)[-1] == expected
    assert "Traceback" not in initialized.stderr

    changed["behaviors"]["CartPole"]["init_path"] = str(checkpoint)
    from_path = run_config(tmp_path, changed, "--run-id", "third")
    assert (from_path.returncode, from_path.stdout) == (2, ""), from_path.stderr
    assert from_path.stderr.splitlines(keepends=True)[-1] == expected
    del changed["behaviors"]["CartPole"]["init_path"]

    resumed = run_config(tmp_path, changed, "--resume")
    assert (resumed.returncode, resumed.stdout) == (2, ""), resumed.stderr
    assert resumed.stderr.splitlines(keepends=True)[-1] == expected
    assert "Traceback" not in resumed.stderr


ONE_BEHAVIOR = {"behaviors": {"CartPole": {"trainer_type": "ppo"}}}


@pytest.mark.parametrize(
    ("section", "key", "limit", "unit"),
    [
        (("behaviors", "CartPole"), "max_steps", 10**12, "steps"),
        (("behaviors", "CartPole"), "summary_freq", 10**12, "steps"),
        (("behaviors", "CartPole"), "checkpoint_interval", 10**12, "steps"),
        (("behaviors", "CartPole"), "time_horizon", 10**12, "steps"),
        (("behaviors", "CartPole", "hyperparameters"), "buffer_size", 10**9, "experiences"),
        (("behaviors", "CartPole", "hyperparameters"), "batch_size", 10**9, "experiences"),
        (("behaviors", "CartPole", "hyperparameters"), "num_epoch", 10_000, "epochs"),
        (("behaviors", "CartPole", "network_settings"), "hidden_units", 16_384, "units"),
        (("behaviors", "CartPole", "network_settings"), "num_layers", 1_000, "layers"),
        (("behaviors", "CartPole", "network_settings", "memory"), "memory_size", 16_384, "units"),
        (
            ("behaviors", "CartPole", "reward_signals", "curiosity"),
            "encoding_size",
            16_384,
            "units",
        ),
        (("env_settings",), "num_envs", 100_000, "environments"),
        (("env_settings",), "seed", 2**32 - 1, "(a 32-bit seed)"),
    ],
)
def test_a_size_past_its_limit_is_refused_naming_the_key_the_limit_and_the_value(
    section: tuple[str, ...], key: str, limit: int, unit: str
) -> None:
    sac_too = "hyperparameters" in section and key != "num_epoch"  # SAC has no num_epoch
    for trainer_type in ("ppo", "sac") if sac_too else ("ppo",):
        data: dict[str, Any] = copy.deepcopy(ONE_BEHAVIOR)
        data["behaviors"]["CartPole"]["trainer_type"] = trainer_type
        where = data
        for name in section:
            where = where.setdefault(name, {})
        where[key] = limit  # the limit itself is taken
        RunOptions.from_dict(data)
        where[key] = limit + 1
        with pytest.raises(ConfigError) as refused:
            RunOptions.from_dict(data)
        assert refused.value.problems == (
            f"{'.'.join(section)}.{key}: expected at most {limit:,} {unit}, got {limit + 1}",
        )


@pytest.mark.parametrize(
    ("behavior", "key", "expected"),
    [
        (
            {"trainer_type": "sac", "hyperparameters": {"buffer_init_steps": 10**9 + 1}},
            "hyperparameters.buffer_init_steps",
            "expected at most 1,000,000,000 experiences",
        ),
        (
            {"behavioral_cloning": {"demo_path": "demos.npz", "num_epoch": 10_001}},
            "behavioral_cloning.num_epoch",
            "expected at most 10,000 epochs",
        ),
    ],
)
def test_sacs_warm_up_and_clonings_epochs_are_bounded(
    behavior: dict[str, Any], key: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        RunOptions.from_dict({"behaviors": {"CartPole": behavior}})
    value = 10**9 + 1 if "buffer" in key else 10_001
    assert refused.value.problems == (f"behaviors.CartPole.{key}: {expected}, got {value}",)


def test_an_integer_of_thousands_of_digits_is_refused_naming_its_key(tmp_path: Path) -> None:
    # Python reads no integer of more than 4,300 digits: before, a traceback from PyYAML.
    digits = "9" * 5000
    (tmp_path / "huge.yaml").write_text(
        f"behaviors:\n  CartPole:\n    trainer_type: ppo\n    max_steps: {digits}\n"
        f"env_settings:\n  env_kwargs: {{sizes: [1, {digits}]}}\n"
    )
    result = run_cli("huge.yaml", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "evtrain: error: huge.yaml: line 4: behaviors.CartPole.max_steps: an integer of 5,000 "
        "digits, where no option takes one of more than 20 (see the limits in "
        f"docs/configuration.md); got {'9' * 39}…\n",
    )
    (tmp_path / "huge.yaml").write_text(f"env_settings:\n  env_kwargs: {{sizes: [1, {digits}]}}\n")
    with pytest.raises(ConfigError) as refused:
        read_config(tmp_path / "huge.yaml")
    assert refused.value.problems == (
        f"{tmp_path / 'huge.yaml'}: line 2: env_settings.env_kwargs.sizes[1]: an integer of "
        "5,000 digits, where no option takes one of more than 20 (see the limits in "
        f"docs/configuration.md); got {'9' * 39}…",
    )


def test_cli_overrides_of_sizes_are_bounded_too(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config(tmp_path)))
    result = run_cli("run.yaml", "--num-envs", "100001", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "evtrain: error: env_settings.num_envs: expected at most 100,000 environments, got "
        "100001\n",
    )
    result = run_cli("run.yaml", "--seed", "9" * 5000, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        "evtrain learn: error: argument --seed: expected a whole number of at most 20 digits, "
        f"got one of 5,000 digits ({'9' * 20}…)"
    )
