"""``evtrain sync RUN_ID``, through the CLI (once in a real process): what it says of runs with
nothing to deliver and of runs that do not exist.  Delivering a journal to a real tracker is
tested beside the MLflow writer (tests/writers/test_mlflow_outage.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import config, run_config, sync


def test_sync_of_a_run_that_does_not_exist_names_what_is_missing(tmp_path: Path) -> None:
    result = sync("nope", "--results-dir", str(tmp_path), cwd=tmp_path, process=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"evtrain: error: no run 'nope' under {tmp_path}: {tmp_path}/nope/configuration.yaml "
        "does not exist. Give the run id evtrain learn was run with, and --results-dir if it "
        "was not results."
    ]


def test_sync_of_a_run_without_trackers_has_nothing_to_do(tmp_path: Path) -> None:
    options = config(tmp_path, max_steps=256)
    options["writers"] = {"csv": {}}
    learned = run_config(tmp_path, options)
    assert learned.returncode == 0, learned.stderr
    results = options["checkpoint_settings"]["results_dir"]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = sync("run", "--results-dir", results, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "run: nothing journaled; every tracker has every event\n"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
