"""GaugeWriter: gauges and bus metrics in run_logs/timers.json."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from evtrain import Bus, StatsAggregationMethod, StatsEvent, StatsSummary, signals
from evtrain_writers import GaugeWriter
from evtrain_writers.gauge import sanitize_string


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(
    ("name", "sanitized"),
    [
        ("Policy/Learning Rate", "Policy.LearningRate"),
        ("Very/Very/Very Nested Stat", "Very.Very.VeryNestedStat"),
        ("Plain", "Plain"),
    ],
)
def test_sanitize_string(name: str, sanitized: str) -> None:
    assert sanitize_string(name) == sanitized


def test_gauges_json(tmp_path: Path) -> None:
    run_logs = tmp_path / "run_logs"
    writer = GaugeWriter(run_logs)
    started = int(time.time())
    writer.write_stats(
        "3DBall",
        {
            "Policy/Learning Rate": StatsSummary(full_dist=[3.0, 1.0]),
            "Environment/Cumulative Reward": StatsSummary(
                full_dist=[1.0, 2.0, 6.0], aggregation_method=StatsAggregationMethod.SUM
            ),
        },
        100,
    )
    writer.write_stats("3DBall", {"Policy/Learning Rate": StatsSummary(full_dist=[1.0])}, 200)
    writer.write_stats("3DBall", {"Policy/Learning Rate": StatsSummary(full_dist=[5.0])}, 300)
    writer.flush()

    data = read(run_logs / "timers.json")
    assert data["gauges"] == {
        "3DBall.Environment.CumulativeReward.mean": {
            "value": 3.0,
            "min": 3.0,
            "max": 3.0,
            "count": 1,
        },
        "3DBall.Environment.CumulativeReward.sum": {
            "value": 9.0,
            "min": 9.0,
            "max": 9.0,
            "count": 1,
        },
        "3DBall.Policy.LearningRate.mean": {"value": 5.0, "min": 1.0, "max": 5.0, "count": 3},
        "3DBall.Policy.LearningRate.sum": {"value": 5.0, "min": 1.0, "max": 5.0, "count": 3},
    }
    assert data["bus"] == {}
    metadata = data["metadata"]
    assert metadata["python_version"] == platform.python_version()
    assert metadata["command_line_arguments"] == " ".join(sys.argv)
    assert metadata["evtrain_version"] == "0.1.0"
    assert started <= int(metadata["start_time_seconds"]) <= int(metadata["end_time_seconds"])
    assert int(metadata["end_time_seconds"]) <= time.time()
    assert ("torch_version" in metadata) == ("torch" in sys.modules)
    assert os.listdir(run_logs) == ["timers.json"]  # the temporary file was renamed


def test_each_flush_replaces_the_file(tmp_path: Path) -> None:
    writer = GaugeWriter(tmp_path)
    writer.flush()
    assert read(tmp_path / "timers.json")["gauges"] == {}
    writer.write_stats("B", {"Step": StatsSummary(full_dist=[2.0])}, 2)
    writer.close()
    writer.close()  # idempotent
    assert read(tmp_path / "timers.json")["gauges"] == {
        "B.Step.mean": {"value": 2.0, "min": 2.0, "max": 2.0, "count": 1},
        "B.Step.sum": {"value": 2.0, "min": 2.0, "max": 2.0, "count": 1},
    }
    assert os.listdir(tmp_path) == ["timers.json"]


def test_failed_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = GaugeWriter(tmp_path)
    writer.flush()
    before = (tmp_path / "timers.json").read_bytes()

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    writer.write_stats("B", {"Step": StatsSummary(full_dist=[2.0])}, 2)
    with pytest.raises(OSError, match="No space left"):
        writer.flush()
    assert os.listdir(tmp_path) == ["timers.json"]
    assert (tmp_path / "timers.json").read_bytes() == before


def test_bus_metrics_recorded_when_connected(tmp_path: Path) -> None:
    writer = GaugeWriter(tmp_path)
    with Bus() as bus:
        handle = bus.add_writer(writer)
        for step in (1, 2):
            bus.emit(
                signals.stats,
                StatsEvent(
                    category="B", step=step, values={"Reward": StatsSummary(full_dist=[step])}
                ),
            )
    data = read(tmp_path / "timers.json")
    assert data["gauges"]["B.Reward.mean"] == {"value": 2.0, "min": 1.0, "max": 2.0, "count": 2}
    assert handle.name == "evtrain_writers.gauge.GaugeWriter"
    metrics = data["bus"][handle.name]
    assert metrics["name"] == handle.name
    assert metrics["signals"] == [s.name for s in signals.WRITER_SIGNALS]
    assert (metrics["delivered"], metrics["dropped"], metrics["failed"]) == (2, 0, 0)
    assert metrics["disabled"] is False
    assert set(metrics) == {
        "name",
        "signals",
        "delivered",
        "dropped",
        "failed",
        "disabled",
        "queued",
        "high_water",
        "latency_p50_s",
        "latency_p99_s",
        "journaled",
        "replayed",
        "retries",
        "stalls",
        "stalled_s",
        "dead_lettered",
    }


def test_written_only_on_rank_zero(tmp_path: Path) -> None:
    assert GaugeWriter.ranks == frozenset({0})
    with Bus(rank=1) as bus:
        assert not bus.add_writer(GaugeWriter(tmp_path)).active
    assert os.listdir(tmp_path) == []
