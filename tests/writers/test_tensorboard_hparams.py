"""TensorboardWriter's HParams sessions: the records read back with TensorBoard's accumulator,
and what the HParams plugin's own backend makes of a logdir of runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, metadata

from evtrain import RunFinished, RunStatus, StatsPropertyType
from evtrain_writers import TensorboardWriter
from evtrain_writers._hparams import HParamValue, flatten_hparams
from tests.helpers import HParamsSession, hparams_dashboard
from tests.writers.tensorboard_files import hparams_content, raw_events, run, stats

PPO: dict[str, Any] = {
    "trainer_type": "ppo",
    "hyperparameters": {"batch_size": 64, "beta": 0.005, "normalize_advantage": True},
    "network_settings": {"hidden_units": 32, "memory": None},
    "reward_signals": {"extrinsic": {"gamma": 0.99}},
    "max_steps": 1024,
}
PPO_FLAT: dict[str, HParamValue] = {
    "trainer_type": "ppo",
    "hyperparameters/batch_size": 64.0,
    "hyperparameters/beta": 0.005,
    "hyperparameters/normalize_advantage": True,
    "network_settings/hidden_units": 32.0,
    "network_settings/memory": "None",
    "reward_signals/extrinsic/gamma": 0.99,
    "max_steps": 1024.0,
}


def test_flatten_hparams_names_leaves_by_path_and_keeps_three_kinds() -> None:
    assert flatten_hparams(PPO) == PPO_FLAT
    assert flatten_hparams(
        {"layers": [64, 64], "empty": {}, "nan": float("nan"), "inf": float("inf"), 3: "x"}
    ) == {"layers": "[64, 64]", "empty": "{}", "nan": "nan", "inf": "inf", "3": "x"}


def test_session_start_and_end_are_hparams_plugin_data(tmp_path: Path) -> None:
    writer = run(tmp_path, "B", PPO, [1.0, 2.0])

    content = hparams_content(tmp_path / "B")
    assert sorted(content) == [metadata.SESSION_END_INFO_TAG, metadata.SESSION_START_INFO_TAG]
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    assert {k: getattr(v, str(v.WhichOneof("kind"))) for k, v in start.hparams.items()} == PPO_FLAT
    assert start.hparams["hyperparameters/batch_size"].WhichOneof("kind") == "number_value"
    assert start.hparams["hyperparameters/normalize_advantage"].WhichOneof("kind") == "bool_value"
    assert start.group_name == ""
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    assert (end.status, end.end_time_secs) == (api_pb2.STATUS_SUCCESS, 1234.5)
    # As tensorboard's summary_v2 writes them: step 0, an empty float tensor as the value.
    hparams_values = [
        (event.step, value)
        for event in raw_events(writer.event_files["B"])
        for value in event.summary.value
        if value.metadata.plugin_data.plugin_name == "hparams"
    ]
    assert [(step, value.tag) for step, value in hparams_values] == [
        (0, metadata.SESSION_START_INFO_TAG),
        (0, metadata.SESSION_END_INFO_TAG),
    ]
    assert all(value.tensor == metadata.NULL_TENSOR for _, value in hparams_values)
    assert metadata.EXPERIMENT_TAG not in content  # TensorBoard computes it (see _hparams)


def test_the_dashboard_joins_hyperparameters_with_the_last_scalars(tmp_path: Path) -> None:
    run(tmp_path, "B", PPO, [1.0, 3.0, 2.0])

    dashboard = hparams_dashboard(tmp_path)
    assert dashboard.metrics == ["Loss", "Reward"]
    assert dashboard.columns["hyperparameters/beta"] == "DATA_TYPE_FLOAT64"
    assert dashboard.columns["trainer_type"] == "DATA_TYPE_STRING"
    assert dashboard.columns["hyperparameters/normalize_advantage"] == "DATA_TYPE_BOOL"
    assert dashboard.sessions == {
        "B": HParamsSession(
            hparams=PPO_FLAT,
            metrics={"Loss": (300, -2.0), "Reward": (300, 2.0)},
            status="STATUS_SUCCESS",
        )
    }


def test_every_run_and_behavior_keeps_its_own_columns(tmp_path: Path) -> None:
    # One experiment summary per run would make TensorBoard show one run's columns for all.
    run(tmp_path / "ppo", "Walker", {"lr": 3e-4, "beta": 0.005}, [1.0])
    run(tmp_path / "sac", "Walker", {"lr": 1e-3, "tau": 0.005}, [2.0], RunStatus.FAILED)
    run(tmp_path / "sac", "Ball", {"lr": 1e-3, "tau": 0.01}, [3.0])

    dashboard = hparams_dashboard(tmp_path)
    assert sorted(dashboard.columns) == ["beta", "lr", "tau"]
    assert {
        name: (s.hparams, s.metrics["Reward"], s.status) for name, s in dashboard.sessions.items()
    } == {
        "ppo/Walker": ({"lr": 3e-4, "beta": 0.005}, (100, 1.0), "STATUS_SUCCESS"),
        "sac/Walker": ({"lr": 1e-3, "tau": 0.005}, (100, 2.0), "STATUS_FAILURE"),
        "sac/Ball": ({"lr": 1e-3, "tau": 0.01}, (100, 3.0), "STATUS_SUCCESS"),
    }


def test_an_interrupted_run_ends_when_its_resumed_run_does(tmp_path: Path) -> None:
    run(tmp_path, "B", {"lr": 0.1}, [1.0], RunStatus.INTERRUPTED)
    assert list(hparams_content(tmp_path / "B")) == [metadata.SESSION_START_INFO_TAG]
    assert hparams_dashboard(tmp_path).sessions["B"].status == "STATUS_UNKNOWN"

    run(tmp_path, "B", {"lr": 0.1}, [5.0, 6.0], clear_past_data=False)
    session = hparams_dashboard(tmp_path).sessions["B"]
    assert (session.status, session.metrics["Reward"]) == ("STATUS_SUCCESS", (200, 6.0))


def test_a_resume_keeps_the_first_files_start_and_end(tmp_path: Path) -> None:
    # TensorBoard keeps a tag's first metadata per run: the limit docs/trackers.md states.
    run(tmp_path, "B", {"lr": 0.1}, [1.0], RunStatus.FAILED)
    run(tmp_path, "B", {"lr": 0.2}, [2.0], clear_past_data=False)

    session = hparams_dashboard(tmp_path).sessions["B"]
    assert (session.hparams, session.status) == ({"lr": 0.1}, "STATUS_FAILURE")
    assert session.metrics["Reward"] == (100, 2.0)


def test_close_without_run_finished_leaves_the_session_open(tmp_path: Path) -> None:
    run(tmp_path, "B", {"lr": 0.1}, [1.0], status=None)
    assert list(hparams_content(tmp_path / "B")) == [metadata.SESSION_START_INFO_TAG]


def test_a_session_starts_once_per_behavior_and_ends_once(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    for _ in range(2):
        writer.add_property("B", StatsPropertyType.HYPERPARAMETERS, {"lr": 0.1})
    writer.write_stats("A", stats(Reward=1.0), 1)  # no hyperparameters: no session
    for _ in range(2):
        writer.on_run_finished(RunFinished(run_id="r", status=RunStatus.COMPLETED))
    writer.close()

    tags = [
        value.tag for event in raw_events(writer.event_files["B"]) for value in event.summary.value
    ]
    assert tags == [
        "Hyperparameters",
        metadata.SESSION_START_INFO_TAG,
        "Hyperparameters",
        metadata.SESSION_END_INFO_TAG,
    ]
    assert hparams_content(tmp_path / "A") == {}


def test_hparams_false_writes_only_the_text_summary(tmp_path: Path) -> None:
    run(tmp_path, "B", PPO, [1.0], hparams=False)

    assert hparams_content(tmp_path / "B") == {}
    assert hparams_dashboard(tmp_path).sessions == {}
    accumulator = EventAccumulator(str(tmp_path / "B"))
    accumulator.Reload()
    assert accumulator.Tags()["tensors"] == ["Hyperparameters"]


def test_scalars_alone_never_import_the_hparams_plugin_and_sessions_never_its_tf_stub(
    tmp_path: Path,
) -> None:
    script = """
import sys
from evtrain import StatsPropertyType, StatsSummary
from evtrain_writers import TensorboardWriter
writer = TensorboardWriter(sys.argv[1])
writer.write_stats("B", {"Reward": StatsSummary(full_dist=[1.0])}, 1)
before = "tensorboard.plugins.hparams.plugin_data_pb2" in sys.modules
writer.add_property("B", StatsPropertyType.HYPERPARAMETERS, {"lr": 0.1})
after = "tensorboard.plugins.hparams.plugin_data_pb2" in sys.modules
writer.close()
# The plugin's metadata module loads tensorboard's TensorFlow stub (~0.16 s): not needed.
stub = [m for m in ("tensorboard.plugins.hparams.metadata", "tensorboard.compat.tensorflow_stub")
        if m in sys.modules]
print(before, after, stub)
"""
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.split() == ["False", "True", "[]"]
