"""The optional file writers, ``csv`` and ``jsonl``: enabled from the config or ``--writer``,
read back after real runs, and their options checked like every other option."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evtrain import ConfigError, RunOptions, StatsAggregationMethod, StatsSummary
from evtrain.events.stats import StatsPropertyType
from evtrain.plugins import STATS_WRITER, Plugin, discover
from evtrain.run.wiring import register_stats_writer_plugins
from evtrain_writers.csv_file import CsvWriter
from evtrain_writers.jsonl import JsonlWriter
from tests.helpers import config, run_config
from tests.helpers import tensorboard_steps as scalar_steps


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


def test_a_run_with_csv_and_jsonl_writes_every_summary_tensorboard_has(tmp_path: Path) -> None:
    options = config(tmp_path)
    options["writers"] = {"csv": {"hidden_keys": ["Step"]}}  # jsonl comes from the flag
    result = run_config(tmp_path, options, "--writer", "jsonl")
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "results" / "run" / "CartPole"
    steps = scalar_steps(folder, "Environment/Cumulative Reward")
    assert steps == [256, 512, 768, 1024]

    rows = read_csv(folder / "progress.csv")
    assert [int(r["step"]) for r in rows] == steps
    header = list(rows[0])
    assert header[0] == "step" and header[1:] == sorted(header[1:])
    assert "Step" not in header and "Losses/Policy Loss" in header
    rewards = [float(r["Environment/Cumulative Reward"]) for r in rows]
    assert all(reward > 0 for reward in rewards)

    lines = [json.loads(line) for line in (folder / "stats.jsonl").read_text().splitlines()]
    assert lines[0]["property"] == "hyperparameters"
    assert lines[0]["value"]["trainer_type"] == "ppo"
    periods = [line for line in lines if "stats" in line]
    assert [p["step"] for p in periods] == steps
    reward = periods[0]["stats"]["Environment/Cumulative Reward"]
    assert reward["value"] == pytest.approx(rewards[0])
    assert len(reward["values"]) == reward["num"] > 0  # a HISTOGRAM key keeps every value


def test_a_key_that_appears_later_widens_the_csv(tmp_path: Path) -> None:
    writer = CsvWriter(tmp_path)
    writer.write_stats("B", {"b": StatsSummary(full_dist=[1.0])}, 10)
    writer.flush()
    writer.write_stats(
        "B", {"a": StatsSummary(full_dist=[2.0]), "b": StatsSummary(full_dist=[3.0])}, 20
    )
    writer.close()
    path = tmp_path / "B" / "progress.csv"
    assert path.read_text().splitlines() == ["step,a,b", "10,,1.0", "20,2.0,3.0"]
    # a resumed run appends, keeping the columns
    again = CsvWriter(tmp_path)
    again.write_stats("B", {"b": StatsSummary(full_dist=[4.0])}, 30)
    again.close()
    assert path.read_text().splitlines()[-1] == "30,,4.0"


def test_jsonl_writes_null_for_numbers_json_cannot_hold(tmp_path: Path) -> None:
    writer = JsonlWriter(tmp_path)
    nan = StatsSummary(full_dist=[float("nan")], aggregation_method=StatsAggregationMethod.SUM)
    writer.write_stats("B", {"x": nan}, 5)
    writer.add_property("B", StatsPropertyType.HYPERPARAMETERS, {"lr": 0.1})
    writer.close()
    lines = [json.loads(line) for line in (tmp_path / "B" / "stats.jsonl").read_text().splitlines()]
    assert lines[0]["stats"]["x"]["value"] is None
    assert lines[1] == {"property": "hyperparameters", "value": {"lr": 0.1}}


def test_writers_are_made_only_when_asked_for(tmp_path: Path) -> None:
    base = {"checkpoint_settings": {"results_dir": str(tmp_path)}}
    plain = register_stats_writer_plugins(RunOptions.from_dict(base))
    asked = register_stats_writer_plugins(RunOptions.from_dict({**base, "writers": {"csv": {}}}))
    try:
        assert not any(isinstance(w, CsvWriter) for w in plain)
        assert [type(w).__name__ for w in asked if isinstance(w, CsvWriter)] == ["CsvWriter"]
    finally:
        for w in plain + asked:
            w.close()


def evtrain_writer_plugins() -> list[Plugin]:
    """evtrain's own writer plugins, whatever else is installed."""
    return [p for p in discover([STATS_WRITER]) if p.distribution == "evtrain"]


def test_an_unknown_writer_or_option_is_a_config_error(tmp_path: Path) -> None:
    base = {"checkpoint_settings": {"results_dir": str(tmp_path)}}
    unknown = RunOptions.from_dict({**base, "writers": {"cvs": {}}})
    with pytest.raises(ConfigError) as info:
        register_stats_writer_plugins(unknown, evtrain_writer_plugins())
    assert info.value.problems == (
        "writers.cvs: no installed writer plugin is named 'cvs' (installed: csv, jsonl, "
        "mlflow, prometheus, wandb); install the package that provides it, or remove it",
    )
    bad = {**base, "writers": {"csv": {"hiden_keys": []}}}
    with pytest.raises(ConfigError) as info:
        register_stats_writer_plugins(RunOptions.from_dict(bad), evtrain_writer_plugins())
    assert info.value.problems == (
        "writers.csv.hiden_keys: unknown key (did you mean hidden_keys?)",
    )


def test_writer_flag_options_and_mistakes(tmp_path: Path) -> None:
    from evtrain.cli import parse_writer_flag

    assert parse_writer_flag("csv") == ("csv", {})
    assert parse_writer_flag("prom:port=9100,host=127.0.0.1") == (
        "prom",
        {"port": 9100, "host": "127.0.0.1"},
    )
    with pytest.raises(ConfigError) as info:
        parse_writer_flag("csv:hidden_keys")
    assert info.value.problems == (
        "--writer 'csv:hidden_keys': expected KEY=VALUE after csv:, got 'hidden_keys'",
    )
    result = run_config(tmp_path, config(tmp_path), "--writer", "nope")
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: writers.nope: no installed writer plugin is named 'nope' (installed: "
        "csv, jsonl, mlflow, prometheus, wandb); install the package that provides it, or "
        "remove it\n",
    )
