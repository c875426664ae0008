"""TensorboardWriter: real event files, read back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import gc
import logging
import os
import struct
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import SessionLog

from evtrain import (
    Bus,
    PropertyEvent,
    StatsAggregationMethod,
    StatsEvent,
    StatsPropertyType,
    StatsSummary,
    signals,
)
from evtrain_writers import TensorboardWriter
from tests.writers.tensorboard_files import raw_events, stats

HIDDEN = ["Is Training", "Step"]


def accumulate(folder: Path) -> EventAccumulator:
    """Everything in ``folder``, nothing sampled away."""
    accumulator = EventAccumulator(
        str(folder), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    accumulator.Reload()
    return accumulator


def scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    return [(event.step, event.value) for event in accumulate(folder).Scalars(tag)]


def f32(value: float) -> float:
    """``value`` as TensorBoard stores it (float32)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def event_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("events.out"))


def test_scalars_read_back_with_exact_steps_and_values(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    writer.write_stats(
        "3DBall",
        {
            "Environment/Cumulative Reward": StatsSummary(full_dist=[1.0, 2.0, 4.0]),
            "Losses/Value Loss": StatsSummary(
                full_dist=[0.1, 0.2], aggregation_method=StatsAggregationMethod.SUM
            ),
            "Policy/Learning Rate": StatsSummary(
                full_dist=[3e-4, 1e-4], aggregation_method=StatsAggregationMethod.MOST_RECENT
            ),
        },
        1000,
    )
    writer.write_stats("3DBall", stats(Environment_Reward=-2.5), 2000)
    writer.close()

    folder = tmp_path / "3DBall"
    assert scalars(folder, "Environment/Cumulative Reward") == [(1000, f32(7.0 / 3.0))]
    assert scalars(folder, "Losses/Value Loss") == [(1000, f32(0.1 + 0.2))]
    assert scalars(folder, "Policy/Learning Rate") == [(1000, f32(1e-4))]
    assert scalars(folder, "Environment Reward") == [(2000, -2.5)]
    assert list(writer.event_files) == ["3DBall"]
    assert event_files(folder) == [writer.event_files["3DBall"].name]


def test_one_event_per_write_stats_call(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    for step in range(3):
        writer.write_stats("B", stats(a=step, b=step * 2, c=step * 3), step)
    writer.close()

    events = raw_events(writer.event_files["B"])
    assert events[0].file_version == "brain.Event:2"
    # The first summary is preceded by a restart marker at its step (see test_crash_consistency).
    assert (events[1].step, events[1].session_log.status) == (0, SessionLog.START)
    assert [(e.step, [(v.tag, v.simple_value) for v in e.summary.value]) for e in events[2:]] == [
        (0, [("a", 0.0), ("b", 0.0), ("c", 0.0)]),
        (1, [("a", 1.0), ("b", 2.0), ("c", 3.0)]),
        (2, [("a", 2.0), ("b", 4.0), ("c", 6.0)]),
    ]
    assert all(abs(e.wall_time - time.time()) < 60 for e in events)


def test_many_categories_get_a_folder_each(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    categories = [f"Behavior{i}" for i in range(12)]
    for step in (10, 20):
        for i, category in enumerate(categories):
            writer.write_stats(category, stats(Reward=i + step), step)
    writer.close()

    for i, category in enumerate(categories):
        assert scalars(tmp_path / category, "Reward") == [(10, i + 10.0), (20, i + 20.0)]
        assert len(event_files(tmp_path / category)) == 1


def test_hidden_keys_are_not_written(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path, hidden_keys=HIDDEN)
    writer.write_stats("B", stats(Is_Training=1.0, Step=5.0, Reward=3.0), 5)
    writer.write_stats("B", stats(Is_Training=1.0, Step=6.0), 6)  # nothing shown: no event
    writer.close()

    tags = accumulate(tmp_path / "B").Tags()
    assert tags["scalars"] == ["Reward"]
    assert len(raw_events(writer.event_files["B"])) == 3  # version, restart marker, Reward


def test_histogram_stats_also_write_a_histogram(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    values = [1.0, 2.0, 2.0, 3.0, 10.0]
    writer.write_stats(
        "B",
        {
            "Actions": StatsSummary(
                full_dist=values, aggregation_method=StatsAggregationMethod.HISTOGRAM
            )
        },
        7,
    )
    writer.close()

    accumulator = accumulate(tmp_path / "B")
    assert accumulator.Tags()["histograms"] == ["Actions_hist"]
    assert [(e.step, e.value) for e in accumulator.Scalars("Actions")] == [(7, f32(3.6))]
    (event,) = accumulator.Histograms("Actions_hist")
    histogram = event.histogram_value
    assert event.step == 7
    assert (histogram.min, histogram.max, histogram.num) == (1.0, 10.0, 5.0)
    assert (histogram.sum, histogram.sum_squares) == (18.0, 118.0)
    assert sum(histogram.bucket) == 5
    assert histogram.bucket_limit[-1] == 10.0
    assert len(histogram.bucket) == len(histogram.bucket_limit) == 5


def test_hyperparameters_are_a_text_summary(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    writer.add_property(
        "B",
        StatsPropertyType.HYPERPARAMETERS,
        {"trainer_type": "ppo", "hyperparameters": {"batch_size": 64, "beta": 0.005}},
    )
    writer.add_property("B", StatsPropertyType.SELF_PLAY, True)  # ignored
    writer.close()

    accumulator = accumulate(tmp_path / "B")
    # Beside the HParams session start (tests/writers/test_tensorboard_hparams.py).
    assert accumulator.Tags()["tensors"] == ["Hyperparameters", "_hparams_/session_start_info"]
    assert list(accumulator.PluginTagToContent("text")) == ["Hyperparameters"]
    (event,) = accumulator.Tensors("Hyperparameters")
    assert event.step == 0
    assert event.tensor_proto.string_val == [
        b"\ttrainer_type:\tppo\n\thyperparameters:\n\t  batch_size:\t64\n\t  beta:\t0.005"
    ]


def test_hyperparameters_must_be_a_mapping(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    with pytest.raises(TypeError, match="hyperparameters of 'B' must be a mapping, got list"):
        writer.add_property("B", StatsPropertyType.HYPERPARAMETERS, [1, 2])
    writer.close()


def test_clear_past_data_removes_earlier_files_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "B"
    folder.mkdir()
    old = [folder / "events.out.tfevents.1.host.1.0", folder / "events.out.other"]
    for path in old:
        path.write_bytes(b"old")
    (folder / "B-100.pt").write_bytes(b"checkpoint")

    writer = TensorboardWriter(tmp_path, clear_past_data=True)
    with caplog.at_level(logging.WARNING):
        writer.write_stats("B", stats(Reward=1.0), 1)
    writer.close()

    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["B-100.pt", writer.event_files["B"].name]
    )
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"Deleting TensorBoard data {path} that was left over from a previous run.")
        for path in sorted(old)
    ]
    assert scalars(folder, "Reward") == [(1, 1.0)]


def test_clear_past_data_logs_a_failed_removal_and_continues(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "B"
    folder.mkdir()
    stuck = folder / "events.out.tfevents.1.host.1.0"
    stuck.write_bytes(b"old")

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    writer = TensorboardWriter(tmp_path, clear_past_data=True)
    with caplog.at_level(logging.WARNING):
        writer.write_stats("B", stats(Reward=1.0), 1)
    writer.close()

    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"Deleting TensorBoard data {stuck} that was left over from a previous run."),
        ("ERROR", f"Could not delete TensorBoard data {stuck}; continuing."),
    ]
    assert stuck.exists()
    assert scalars(folder, "Reward") == [(1, 1.0)]


def test_resume_keeps_earlier_files(tmp_path: Path) -> None:
    first = TensorboardWriter(tmp_path)
    first.write_stats("B", stats(Reward=1.0), 100)
    first.close()
    resumed = TensorboardWriter(tmp_path, clear_past_data=False)
    resumed.write_stats("B", stats(Reward=2.0), 200)
    resumed.close()

    assert event_files(tmp_path / "B") == sorted(
        [first.event_files["B"].name, resumed.event_files["B"].name]
    )
    assert scalars(tmp_path / "B", "Reward") == [(100, 1.0), (200, 2.0)]


def test_nothing_is_flushed_per_event_but_close_writes_everything(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path, flush_secs=3600)
    for step in range(100):
        writer.write_stats("B", stats(Reward=step), step)
    path = writer.event_files["B"]
    assert path.stat().st_size == 0
    writer.close()
    writer.close()  # idempotent

    assert scalars(tmp_path / "B", "Reward") == [(step, float(step)) for step in range(100)]


def test_flush_writes_buffered_events(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path, flush_secs=3600)
    writer.write_stats("B", stats(Reward=1.0), 1)
    writer.flush()
    assert scalars(tmp_path / "B", "Reward") == [(1, 1.0)]
    writer.close()


def test_timer_flushes_without_being_asked(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path, flush_secs=0.05)
    writer.write_stats("B", stats(Reward=1.0), 1)
    path = writer.event_files["B"]
    deadline = time.monotonic() + 10
    while path.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scalars(tmp_path / "B", "Reward") == [(1, 1.0)]
    writer.close()


def flush_threads(base_dir: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"evtrain-tensorboard-flush {base_dir}"]


def test_close_stops_the_flush_thread(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    assert flush_threads(tmp_path) == []  # started with the first file
    writer.write_stats("B", stats(Reward=1.0), 1)
    assert len(flush_threads(tmp_path)) == 1
    writer.close()
    assert flush_threads(tmp_path) == []


def test_writer_dropped_without_close_keeps_its_data(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path, flush_secs=0.01)
    writer.write_stats("B", stats(Reward=1.0), 1)
    (thread,) = flush_threads(tmp_path)
    del writer
    gc.collect()  # the files' finalizers write the buffers and close them
    thread.join(timeout=10)  # the thread holds only a weak reference, so it ends too
    assert not thread.is_alive()
    assert scalars(tmp_path / "B", "Reward") == [(1, 1.0)]


def test_writing_after_close_is_refused(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path)
    writer.write_stats("A", stats(Reward=1.0), 1)
    writer.close()
    with pytest.raises(ValueError, match="is closed"):
        writer.write_stats("A", stats(Reward=1.0), 2)
    with pytest.raises(ValueError, match="is closed"):
        writer.write_stats("B", stats(Reward=1.0), 2)


def test_flush_secs_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flush_secs must be positive, got 0"):
        TensorboardWriter(tmp_path, flush_secs=0)


def test_through_a_bus(tmp_path: Path) -> None:
    writer = TensorboardWriter(tmp_path, hidden_keys=HIDDEN)
    with Bus() as bus:
        handle = bus.add_writer(writer)
        assert handle.name == "evtrain_writers.tensorboard.TensorboardWriter"
        bus.emit(
            signals.hyperparameters,
            PropertyEvent(
                category="B", property_type=StatsPropertyType.HYPERPARAMETERS, value={"lr": 0.1}
            ),
        )
        for step in range(1, 4):
            bus.emit(
                signals.stats,
                StatsEvent(category="B", step=step * 10, values=stats(Reward=step, Step=step)),
            )
    # No flush anywhere: the bus's close() closed the writer.
    accumulator = accumulate(tmp_path / "B")
    assert accumulator.Tags()["scalars"] == ["Reward"]
    assert [(e.step, e.value) for e in accumulator.Scalars("Reward")] == [
        (10, 1.0),
        (20, 2.0),
        (30, 3.0),
    ]
    assert accumulator.Tensors("Hyperparameters")[0].tensor_proto.string_val == [b"\tlr:\t0.1"]


def test_written_only_on_rank_zero(tmp_path: Path) -> None:
    assert TensorboardWriter.ranks == frozenset({0})
    with Bus(rank=1) as bus:
        handle = bus.add_writer(TensorboardWriter(tmp_path))
        bus.emit(signals.stats, StatsEvent(category="B", step=1, values=stats(Reward=1.0)))
    assert not handle.active
    assert os.listdir(tmp_path) == []


def test_100k_scalars_round_trip(tmp_path: Path) -> None:
    keys = [f"Losses/Key {i}" for i in range(10)]
    writer = TensorboardWriter(tmp_path)
    for step in range(10_000):
        writer.write_stats(
            "B", {key: StatsSummary(full_dist=[step + i / 4]) for i, key in enumerate(keys)}, step
        )
    writer.close()

    accumulator = accumulate(tmp_path / "B")
    assert sorted(accumulator.Tags()["scalars"]) == sorted(keys)
    for i, key in enumerate(keys):
        events = accumulator.Scalars(key)
        assert [e.step for e in events] == list(range(10_000))
        assert [e.value for e in events] == [f32(step + i / 4) for step in range(10_000)]
